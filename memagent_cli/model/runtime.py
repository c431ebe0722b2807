"""llama.cpp as a library in this process: its log (kept for error messages, shown with
--verbose, listened to by the quantizer for progress), whether this build can offload to a GPU,
and how many cores there are to use."""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from typing import TypedDict


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

    # What `@llama_cpp.llama_log_callback` would make, written as a call: the CFUNCTYPE instance is
    # typed as taking and returning anything, which a decorator would spread to the function.
    _callback = llama_cpp.llama_log_callback(_on_log)
    _log_state["callback"] = _callback  # ctypes callbacks must outlive their registration
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))


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
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_threads(load: float | None = None) -> int:
    """The cores not already busy with other work, at least one.

    Measured on 2 cores (B7, docs/PERFORMANCE.md): idle, 2 threads generate 1.73x as fast as 1;
    beside one busy process, 2 threads drop to 0.58x of 1, because llama.cpp's threads spin
    waiting for each other and collapse when they outnumber the free cores. So every free core,
    and no more: the 1-minute load average counts the busy ones.
    """
    cores = available_cores()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # Windows: no load average; half the cores is the safe side
            return max(1, cores // 2)
    return max(1, min(cores, cores - round(load)))
