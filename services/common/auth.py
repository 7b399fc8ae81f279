"""Deprecated entry point: ``python -m services.common.auth NAME`` is ``streamshop users api-key
NAME`` (kit.api_keys); it still prints a new key and its line."""

if __name__ == "__main__":
    import runpy
    import sys

    print("services.common.auth is deprecated: use `streamshop users api-key NAME`", file=sys.stderr)
    runpy.run_module("kit.api_keys", run_name="__main__", alter_sys=True)
