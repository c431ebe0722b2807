"""llama.cpp as a library in memagent's process: its log never reaches the terminal unasked, and a
Ctrl-C that lands inside its log callback still stops the run. Each case runs in a fresh Python,
since both depend on what happened first in the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers import sigint_default

# ggml's own logging entry point (what GGML_LOG_INFO and friends call), reached through the library
# llama-cpp-python loaded: a line logged here takes the path ggml_cuda_init's lines take on a GPU.
PROLOGUE = textwrap.dedent(
    """
    import ctypes, os, signal, sys, time

    def ggml_log(level, text):
        import llama_cpp
        lib = llama_cpp.llama_cpp._lib  # libllama's handle finds the ggml it links (a copy loaded by name would not)
        lib.ggml_log_internal.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]
        lib.ggml_log_internal(level, b"%s", text.encode())
    """
)
GGML_LOG_LEVEL_INFO, GGML_LOG_LEVEL_ERROR = 2, 4


def python(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROLOGUE + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=sigint_default,  # a pytest started in the background hands its children SIGINT ignored
    )


def test_a_device_query_first_keeps_llamas_log_off_the_terminal():
    """On a CUDA build the first device query logs "ggml_cuda_init: found 1 CUDA devices" (seen on an
    H200 before every error message and answer): whatever first touches llama.cpp routes its log
    through memagent, and the lines are kept for error messages instead."""
    done = python(
        f"""
        from memagent_cli.model import gpu, runtime
        gpu.gpu_devices()
        ggml_log({GGML_LOG_LEVEL_INFO}, "ggml_cuda_init: found 1 CUDA devices\\n")
        ggml_log({GGML_LOG_LEVEL_ERROR}, "probe failed: out of memory\\n")
        print(runtime.log_reason())
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.strip() == "probe failed: out of memory"


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_signal_inside_the_log_callback_stops_the_run(signum):
    """On a GPU, llama.cpp calls back into Python on every decode; a KeyboardInterrupt raised there is
    printed as "Exception ignored" by ctypes and lost, and the run went on to its answer (an H200,
    test_qwenlong's interrupted run). A Ctrl-C that lands in the callback is handled once out of it;
    so is the SIGTERM `ask` turns into the same interruption (cli.common.sigterm_as_interrupt)."""
    done = python(
        f"""
        from memagent_cli.cli.common import sigterm_as_interrupt
        from memagent_cli.model import runtime
        runtime.llama_cpp_module()
        def listener(line):
            if "probe" in line:
                os.kill(os.getpid(), signal.{signum})  # delivered while still inside the callback
                sum(range(1000))  # bytecode after it, where Python runs its handler
        with sigterm_as_interrupt(), runtime.llama_log_listener(listener):
            try:
                ggml_log({GGML_LOG_LEVEL_INFO}, "probe\\n")
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    time.sleep(0.01)
                print("went on")
            except KeyboardInterrupt:
                print("interrupted")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "interrupted" and "Exception ignored" not in done.stderr
