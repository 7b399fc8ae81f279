"""Coverage-guided fuzz target (atheris, libFuzzer) for the broker's request decoding path:
the header, the structural check against the message schema and kio's reader, exactly as the
server runs them on every frame.  Any exception other than the refusal the server turns into
a closed connection (`MalformedRequest`) is a finding, and so is an abort.

    python -m loadtest.fuzz_decode [libFuzzer flags, e.g. -max_total_time=600 -runs=1000000 CORPUS_DIR]

Without a corpus directory it starts from one frame per advertised API and version.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["broker", "kio"]):
    from broker.handlers import APIS
    from broker.protocol.codec import MalformedRequest, decode_request, peek_header

_VERSIONS = {api.key: (api.min_version, api.max_version) for api in APIS}


def one_input(data: bytes) -> None:
    if len(data) < 8:
        return  # the server needs a header's first 8 bytes before it looks further
    api_key, api_version, _ = peek_header(data)
    versions = _VERSIONS.get(api_key)
    if versions is None or not versions[0] <= api_version <= versions[1]:
        return  # refused by the server before decoding
    with contextlib.suppress(MalformedRequest):
        decode_request(data, "127.0.0.1", 100_000)


def _seed_corpus() -> str:
    directory = tempfile.mkdtemp(prefix="fuzz-decode-corpus-")
    for key, (low, high) in _VERSIONS.items():
        for version in range(low, high + 1):
            frame = struct.pack(">hhih", key, version, 1, 4) + b"seed" + bytes(24)
            with open(os.path.join(directory, f"{key}-{version}"), "wb") as f:
                f.write(frame)
    return directory


def main() -> None:
    argv = list(sys.argv)
    if not any(not a.startswith("-") for a in argv[1:]):
        argv.append(_seed_corpus())
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
