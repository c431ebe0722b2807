"""Which process runs a "running" run, and whether that process is still at work.

This module owns what a run records of its owner (process id, host name, and on Linux the
process's start time with the boot id, against pid reuse) and the checks that tell an owner at
work from one that is gone, or from one on another host, which cannot be checked from here.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class Owner:
    """A run recorded as running, and what is known of the process that runs it."""

    run_id: str
    pid: int | None
    host: str | None
    started: str | None
    # alive: its process is at work on this host; dead: it is gone (or was never recorded, by
    # an older memagent); elsewhere: it runs on another host, where it cannot be checked.
    state: Literal["alive", "dead", "elsewhere"]

    def where(self) -> str:
        """ "pid 4242", or "pid 4242 on gpu-box" for another host's."""
        return f"pid {self.pid}" + (f" on {self.host}" if self.state == "elsewhere" else "")

    def ended_note(self) -> str:
        if self.pid is None:
            return "Its process was not recorded (an older memagent ran it) and it is no longer taken as running."
        return f"Its process (pid {self.pid}) ended without finishing the run."


def this_process() -> tuple[int, str, str | None]:
    """The owner columns (pid, host, pid_started) for a run this process runs."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    return pid, socket.gethostname(), stat[1] if stat else None


def liveness(pid: int | None, host: str | None, started: str | None) -> Literal["alive", "dead", "elsewhere"]:
    """Whether the process recorded as running a run is still at work. Alive unless shown gone."""
    if pid is None or host is None:  # recorded before runs had owners
        return "dead"
    if host != socket.gethostname():
        return "elsewhere"
    if pid <= 0:  # never a real process; os.kill would signal a process group
        return "dead"
    if not _pid_exists(pid):
        return "dead"
    stat = _proc_stat(pid)
    if stat is None:  # no /proc (macOS), or it is hidden from us: the pid alone decides
        return "alive"
    state, now_started = stat
    if state in ("Z", "X"):  # a zombie: it has ended, its parent has not collected it yet
        return "dead"
    if started is not None and now_started != started:  # the pid was reused by another process
        return "dead"
    return "alive"


def _pid_exists(pid: int) -> bool:
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate it there
        import ctypes

        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return bool(kernel32.GetLastError() != 87)  # ERROR_INVALID_PARAMETER: no such process
        code = ctypes.c_ulong()
        try:
            ok = kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        finally:
            kernel32.CloseHandle(handle)
        return not ok or code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, and belongs to another user
        return True
    except OSError:  # cannot tell: taken as alive, so that it is never removed by mistake
        return True
    return True


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """Linux: the process's state and "<boot id>/<start time>" (field 22 of /proc/PID/stat,
    in clock ticks after boot: with the boot id, it names one process for good). Else None."""
    boot = _boot_id()
    if boot is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # Field 2, the command name in parentheses, may hold spaces and parentheses itself.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0].decode("ascii", "replace"), f"{boot}/{fields[19].decode('ascii', 'replace')}"


@lru_cache(maxsize=1)
def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
    except (OSError, ValueError):
        return None
