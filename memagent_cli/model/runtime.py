"""llama.cpp as a library in this process: loading it (`llama_cpp_module`), its log (kept for
error messages, shown with --verbose, listened to by the quantizer for progress), a signal that
lands inside that log's callback, whether this build can offload to a GPU, and how many cores there
are to use (those not busy with other work now)."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, TypedDict


class _LogState(TypedDict):
    verbose: bool
    callback: object  # the ctypes callback handed to llama.cpp (kept referenced), or None before that


MAX_SEQUENCES = 16  # the most replies batched in one context (B4 measured 1, 4 and 16)

_LOG_TAIL: deque[str] = deque(maxlen=40)  # recent llama.cpp log lines, for error messages
_log_state: _LogState = {"verbose": False, "callback": None}
# functions called with each log line (the quantizer's progress reads them)
_LOG_LISTENERS: list[Callable[[str], object]] = []


def share_cxx_runtime() -> None:
    """Make the system's C++ runtime (libstdc++) the one every later library binds to.

    Measured on an H100 with llama-cpp-python 0.3.36 built with CUDA 13: libggml-cuda.so carries
    its own static copy of libstdc++ (3,437 exported std:: symbols) and libllama.so links no
    libstdc++ of its own, so libllama's C++ calls bind to whichever copy the lookup meets first.
    Alone, that is libggml-cuda's, consistently. But numpy (which memagent's tokenizer imports
    first) loads the system's libstdc++ privately, and then the two copies' locale state mixed:
    SIGSEGV in `llama_model_load_from_file` as it printed the hyperparameters (every layer on the
    GPU; a vocabulary-only load survived). Loading libstdc++ RTLD_GLOBAL first puts one copy in
    the global scope, which the dynamic linker searches before any library's own dependencies:
    the load then works in either order. Cheap (numpy has normally loaded it already); nothing
    to do where the library is absent.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass


def llama_cpp_module() -> Any:
    """llama_cpp, with its log routed through ours before anything can call into it.

    llama-cpp-python's own log callback prints every line to stderr until a `Llama` is made, and
    ggml builds its device registry on first use: on a CUDA build, the first device query (the GPU
    plan, `doctor`'s hint) prints "ggml_cuda_init: found 1 CUDA devices" and each device's name.
    Every use of llama.cpp in memagent starts here, so those lines go to the log tail, not to the
    user's terminal."""
    import llama_cpp

    quiet_llama_logs(_log_state["verbose"])
    return llama_cpp


def quiet_llama_logs(verbose: bool = False) -> None:
    """Route llama.cpp's log through us: kept for error messages, shown only with --verbose."""
    import ctypes

    import llama_cpp

    _log_state["verbose"] = verbose
    if _log_state["callback"] is not None:
        return

    def _on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        line = text.decode("utf-8", errors="replace")
        _LOG_TAIL.append(line)
        for listener in list(_LOG_LISTENERS):
            listener(line)
        if _log_state["verbose"] and sys.__stderr__ is not None:  # None: Python started without a stderr
            sys.__stderr__.write(line)

    _CALLBACK_CODE.add(_on_log.__code__)
    # What `@llama_cpp.llama_log_callback` would make, written as a call: the CFUNCTYPE instance is
    # typed as taking and returning anything, which a decorator would spread to the function.
    _callback = llama_cpp.llama_log_callback(_on_log)
    _log_state["callback"] = _callback  # ctypes callbacks must outlive their registration
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
    _interrupt_outside_callbacks()


# The code of the Python functions llama.cpp calls back into (the log callback).
_CALLBACK_CODE: set[CodeType] = set()
REDELIVER_SECONDS = 0.01  # how soon a signal that landed in a callback is sent again


def in_llama_callback(frame: FrameType | None) -> bool:
    """Whether Python code is running inside a call from llama.cpp: `frame` or a caller of it is
    the log callback (or a listener it calls)."""
    while frame is not None:
        if frame.f_code in _CALLBACK_CODE:
            return True
        frame = frame.f_back
    return False


def deferred_from_callback(signum: int, frame: FrameType | None) -> bool:
    """For a signal handler that raises (KeyboardInterrupt): True when the signal landed inside
    llama.cpp's callback, where an exception is printed as "Exception ignored" and dropped by ctypes,
    and the run goes on as if Ctrl-C had not been pressed. On a GPU the callback runs on every
    decode (CUDA graph notes), so this is where a Ctrl-C often lands. The signal is then sent again
    in a moment from another thread, and handled once the main thread is back out of the callback."""
    if not in_llama_callback(frame):
        return False
    import _thread

    redeliver = threading.Timer(REDELIVER_SECONDS, _thread.interrupt_main, args=(signum,))
    redeliver.daemon = True
    redeliver.start()
    return True


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if not deferred_from_callback(signum, frame):
        raise KeyboardInterrupt


def _interrupt_outside_callbacks() -> None:
    """Ctrl-C raises KeyboardInterrupt as always, but never inside llama.cpp's callback (see
    deferred_from_callback). Only where Python's own handler is in place, and from the main thread."""
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread (embedded): leave signals alone
        pass


@contextlib.contextmanager
def llama_log_listener(listener: Callable[[str], object]) -> Iterator[None]:
    """Calls `listener` with every llama.cpp log line while the block runs."""
    quiet_llama_logs(_log_state["verbose"])
    _LOG_LISTENERS.append(listener)
    try:
        yield
    finally:
        _LOG_LISTENERS.remove(listener)


def log_reason() -> str:
    """The most specific failure llama.cpp logged: its 'error ...' lines name the cause,
    the 'failed to load' line that follows them does not."""
    lines = [line.strip() for line in _LOG_TAIL]
    for words in ("error loading model:", "error", "failed"):
        found = [line for line in lines if words in line.lower()]
        if found:
            return found[-1].split(words, 1)[-1].strip() if words.endswith(":") else found[-1]
    return ""


def gpu_offload_supported() -> bool:
    return bool(llama_cpp_module().llama_supports_gpu_offload())


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


IDLE_SAMPLE_SECONDS = 0.1  # how long default_threads watches the cores (10 clock ticks a core at Linux's 100 Hz)


@dataclass(frozen=True)
class CpuTimes:
    """One reading of the kernel's CPU clocks, in clock ticks: the time the cores this process may
    use have spent (`total`, summed over them) and of that not idle (`busy`: iowait counts as idle,
    time stolen by a hypervisor as busy), and the time this process itself has run (`own`)."""

    cores: int
    busy: float
    total: float
    own: float


def cpu_times(stat: str = "/proc/stat", self_stat: str = "/proc/self/stat") -> CpuTimes | None:
    """Linux's CPU clocks now, for the cores in this process's affinity; None where there are none."""
    try:
        allowed = {f"cpu{i}" for i in os.sched_getaffinity(0)}
        with open(stat, encoding="ascii") as f:
            lines = f.read().splitlines()
        with open(self_stat, encoding="ascii", errors="replace") as f:
            mine = f.read()
    except (AttributeError, OSError):  # not Linux
        return None
    cores, busy, total = 0, 0.0, 0.0
    for line in lines:
        name, *fields = line.split()
        if name not in allowed:
            continue
        # user nice system idle iowait irq softirq steal (guest time is within user already)
        ticks = [float(x) for x in fields[:8]]
        cores += 1
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    # /proc/self/stat: "pid (comm) state ...": utime and stime are the 12th and 13th fields after comm
    after = mine.rsplit(")", 1)[-1].split()
    if not cores or len(after) < 13:
        return None
    return CpuTimes(cores, busy, total, float(after[11]) + float(after[12]))


def busy_cores(before: CpuTimes, after: CpuTimes) -> float | None:
    """How many cores other processes kept busy between two readings: busy time less this
    process's own (a document read ahead while the model loads is not a neighbour), over the
    time that passed on one core. None when no time passed."""
    if before.cores != after.cores or after.total <= before.total:
        return None
    per_core = (after.total - before.total) / after.cores
    others = (after.busy - before.busy) - (after.own - before.own)
    return min(float(after.cores), max(0.0, others / per_core))


def busy_now(seconds: float = IDLE_SAMPLE_SECONDS, read: Callable[[], CpuTimes | None] = cpu_times) -> float | None:
    """The cores busy with other work now, watched for `seconds`; None where the kernel does not say."""
    before = read()
    if before is None:
        return None
    time.sleep(seconds)
    after = read()
    return None if after is None else busy_cores(before, after)


def threads_for(cores: int, busy: float) -> int:
    """The policy: every core not busy with other work, at least one; a core counts as busy when
    other work keeps it busy at least half the time."""
    return max(1, min(cores, cores - math.floor(busy + 0.5)))


def default_threads(busy: float | None = None, sample: Callable[[], float | None] = busy_now) -> int:
    """The cores not busy with other work now, at least one (`busy`: that figure, else `sample()`).

    Measured on 2 cores (B7, docs/PERFORMANCE.md): idle, 2 threads generate 1.73x as fast as 1;
    beside one busy process, 2 threads drop to 0.58x of 1, because llama.cpp's threads spin
    waiting for each other and collapse when they outnumber the free cores. So every free core,
    and no more. Busy means now: the kernel's CPU clocks over 0.1 s. The 1-minute load average,
    used before, still counted a command that had just ended (1.07 on an idle machine, so one
    thread) and not yet a neighbour that had just started; it remains the figure only where the
    clocks cannot be read (macOS), and half the cores where neither can (Windows).
    """
    cores = available_cores()
    if busy is None:
        busy = sample()
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except (AttributeError, OSError):  # Windows: no load average; half the cores is the safe side
            return max(1, cores // 2)
    return threads_for(cores, busy)
