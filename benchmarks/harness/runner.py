"""memagent (or any child) in a fresh process: its output, wall time, CPU time and peak RSS.

Peak RSS is the child's own VmHWM (/proc/PID/status), sampled while it runs, not wait4's
ru_maxrss: that high-water mark survives exec, so a child started from a big parent can report
the parent's peak. Off Linux the sampled figure is missing and ru_maxrss stands in.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.results import REPO


@dataclass
class Run:
    """A finished child process."""

    stdout: str
    stderr: str
    returncode: int
    seconds: float  # wall time, start to exit
    cpu_seconds: float  # the child's user and system time
    peak_rss_mb: float
    sampled_kb: dict[str, int]  # the largest of each status figure run() was asked to sample
    user_seconds: float  # of cpu_seconds, the user time
    pid: int

    def record(self) -> dict:
        """stdout as the JSON record `--json` prints."""
        return json.loads(self.stdout)


def log(*parts: object) -> None:
    """A benchmark's progress, on stderr (stdout may be what it measures)."""
    print(*parts, file=sys.stderr, flush=True)


def proc_kb(path: str = "/proc/self/status") -> dict[str, int]:
    """The kB figures of a /proc file (a process's status: VmHWM, VmRSS, RssAnon, RssFile; meminfo:
    MemTotal, MemAvailable), empty where /proc does not say (a process that has ended, not Linux)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return {}
    found = (line.partition(":") for line in lines)
    return {key: int(value.split()[0]) for key, _, value in found if value.strip().endswith(" kB")}


def vmhwm_mb(pid: int) -> float | None:
    """A live process's peak resident memory so far (MB), or None where /proc does not say."""
    kb = proc_kb(f"/proc/{pid}/status").get("VmHWM")
    return None if kb is None else kb / 1024


def run(
    command: list[str],
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    terminal: bool = False,
    check: bool = True,
    stdin: str | None = None,
    sample: tuple[str, ...] = (),
    watch: Callable[[int, dict[str, int]], None] | None = None,
    during: Callable[[Callable[[], bool]], None] | None = None,
    every: float = 0.05,
) -> Run:
    """Runs `command` to its end. With `terminal`, its stderr is a pseudo-terminal (a live view
    draws there), drained as it writes; else stdout and stderr are collected. Its /proc status is
    read every `every` seconds: VmHWM's largest value kept, and that of each figure in `sample`
    (RssAnon, RssFile, …); `watch(pid, status)` sees each reading. `during(alive)` runs meanwhile
    in this thread (the child is killed if it raises)."""
    peak: list[float] = [0.0]
    sampled = dict.fromkeys(sample, 0)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        leader = follower = -1
        if terminal:
            leader, follower = pty.openpty()
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=follower if terminal else err,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            text=True,
        )
        if terminal:
            os.close(follower)
            threading.Thread(target=_drain, args=(leader,), daemon=True).start()
        watcher = threading.Thread(target=_watch, args=(proc.pid, peak, sampled, watch, every), daemon=True)
        watcher.start()
        if stdin is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.close()
        try:
            if during is not None:  # whether the child runs, without reaping it: os.wait4 does
                during(lambda: os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None)
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        seconds = time.perf_counter() - t0
        watcher.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = Run(
        stdout,
        stderr,
        proc.returncode,
        seconds,
        usage.ru_utime + usage.ru_stime,
        round(peak[0] or usage.ru_maxrss / 1024, 1),
        sampled,
        usage.ru_utime,
        proc.pid,
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} … exited {result.returncode}: {result.stderr[-2000:]}")
    return result


def memagent(*args: str | Path, home: Path, env: dict[str, str] | None = None, **options) -> Run:
    """`python -m memagent_cli ARGS` with its own MEMAGENT_HOME (models, settings, trace store),
    plain output (NO_COLOR, 110 columns); options as run()'s."""
    base = {"MEMAGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "110"}
    return run([sys.executable, "-m", "memagent_cli", *map(str, args)], env={**base, **(env or {})}, **options)


def _watch(pid: int, peak: list[float], sampled: dict[str, int], watch, every: float) -> None:
    while "VmHWM" in (status := proc_kb(f"/proc/{pid}/status")):  # until the process has ended
        peak[0] = max(peak[0], status["VmHWM"] / 1024)
        for key in sampled:
            sampled[key] = max(sampled[key], status.get(key, 0))
        if watch is not None:
            watch(pid, status)
        time.sleep(every)


def _drain(leader: int) -> None:
    try:
        while os.read(leader, 65536):
            pass
    except OSError:
        pass
    finally:
        os.close(leader)
