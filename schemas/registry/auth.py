"""Deprecated entry point: ``python -m schemas.registry.auth < password-file`` is ``streamshop
users hash-password`` (kit.users); it still prints the PBKDF2 credential of the password."""

if __name__ == "__main__":
    import runpy
    import sys

    print("schemas.registry.auth is deprecated: use `streamshop users hash-password`", file=sys.stderr)
    runpy.run_module("kit.users", run_name="__main__", alter_sys=True)
