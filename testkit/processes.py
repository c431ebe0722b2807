"""A server process a test or benchmark starts: a free port for it, and the process held until its
block ends, once it is ready."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def until_ready(
    proc: subprocess.Popen,
    log: Path,
    name: str,
    ready: Callable[[], bool],
    *,
    not_yet: tuple[type[BaseException], ...] = (OSError,),
    within: float = 60,
    every: float = 0.1,
    stop_within: float = 30,
) -> Iterator[None]:
    """Holds `proc` (its output in `log`) for the block, once `ready()` holds (looked at every `every`
    seconds; an exception of `not_yet` is "not yet"). It fails with the log's end where the process
    exits first, or `within` seconds pass; at the block's end the process is terminated (killed
    after `stop_within` seconds)."""
    try:
        deadline = time.monotonic() + within
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{_end(log)}")
            try:
                if ready():
                    break
            except not_yet:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} was not ready in {within:g} s:\n{_end(log)}")
            time.sleep(every)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(stop_within)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _end(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]
