"""The compaction build in a process of its own (`python -m broker.log.cleaner_worker`).

Decoding a partition's records in a thread of the broker would hold the interpreter lock
against the event loop (measured: stalls of 50-250 ms while 400,000 records were compacted).
The broker starts this process on first use and sends it `BuildSpec`s; it answers each with
the `Built` result or the exception, as length-prefixed pickles on its stdin and stdout.
Only the broker talks to it, over a pipe it created: the pickles come from the broker itself.
"""

from __future__ import annotations

import asyncio
import pickle
import signal
import struct
import sys
from typing import Any

from broker.log.cleaner import BuildSpec, Built, build_files
from kit.process import signal_child

_LENGTH = struct.Struct(">Q")


def _serve() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while header := stdin.read(_LENGTH.size):
        (size,) = _LENGTH.unpack(header)
        spec: BuildSpec = pickle.loads(stdin.read(size))
        answer: Any
        try:
            answer = build_files(spec)
        except Exception as e:  # sent back, raised in the broker
            answer = e
        data = pickle.dumps(answer)
        stdout.write(_LENGTH.pack(len(data)) + data)
        stdout.flush()


class CleanerProcess:
    """The broker's side: one child, started when first needed and again if it died."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        # Children given up on (a build cancelled or failed): killed at once, reaped by `stop`,
        # so that no pipe or process handle outlives the broker's loop.
        self._retired: list[asyncio.subprocess.Process] = []

    async def build(self, spec: BuildSpec) -> Built:
        async with self._lock:
            proc = await self._started()
            assert proc.stdin is not None
            assert proc.stdout is not None
            data = pickle.dumps(spec)
            try:
                proc.stdin.write(_LENGTH.pack(len(data)) + data)
                await proc.stdin.drain()
                (size,) = _LENGTH.unpack(await proc.stdout.readexactly(_LENGTH.size))
                answer = pickle.loads(await proc.stdout.readexactly(size))
            except (OSError, asyncio.IncompleteReadError) as e:
                self._retire(proc)
                raise OSError(f"the compaction process ended: {e}") from e
            except asyncio.CancelledError:
                # Its answer would be read as the next build's: start afresh next time.
                self._retire(proc)
                raise
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, Built)
        return answer

    async def _started(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "broker.log.cleaner_worker",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        return self._proc

    def _retire(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = None
        signal_child(proc, signal.SIGKILL)
        self._retired.append(proc)

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()  # end of input: the child exits
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                self._retire(proc)
            else:
                await _drained(proc)
        retired, self._retired = self._retired, []
        for dead in retired:
            await dead.wait()
            await _drained(dead)


async def _drained(proc: asyncio.subprocess.Process) -> None:
    """Close the pipes of an exited child: its input, and its output read to the end."""
    if proc.stdin is not None:
        proc.stdin.close()
    if proc.stdout is not None:
        await proc.stdout.read()


if __name__ == "__main__":
    _serve()
