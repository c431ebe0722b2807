"""GGUF -> smaller GGUF with llama.cpp's own quantizer (`llama_model_quantize`), through the
llama-cpp-python that memagent already runs models with: no llama.cpp checkout, no build.

The quantizer is one blocking C call. It runs in a worker thread so that Ctrl-C still reaches the
main thread at once, and its progress is read off llama.cpp's log ("[ 12/ 339] blk.1.attn_q.weight
..."), which names each tensor as it is done. Like the converter, it writes `dest`.partial and renames
it when llama.cpp reports success.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from ...errors import MemagentError
from ..gguf import FILE_TYPES

# The quantizations memagent makes, the default first: its usual size/quality trade-off for a laptop.
QUANTS = ("q4_k_m", "q5_k_m", "q6_k", "q8_0", "f16", "bf16")
DEFAULT_QUANT = QUANTS[0]
# memagent's quantization names -> llama.cpp's llama_ftype.
FTYPES = {quant: next(k for k, name in FILE_TYPES.items() if name == quant) for quant in QUANTS}
# Bits per weight of each type as llama.cpp's quantizer makes them for a Qwen2-shaped model (the mixes
# of k-quants keep some tensors at higher precision), for size estimates before anything is made.
BITS_PER_WEIGHT = {"q4_k_m": 4.9, "q5_k_m": 5.7, "q6_k": 6.6, "q8_0": 8.5, "f16": 16.0, "bf16": 16.0}

_STEP = re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]")


class _Outcome(TypedDict, total=False):
    """What the quantizer's thread leaves for the waiting one."""

    rc: int  # llama_model_quantize's return code: 0 is success
    error: BaseException  # what the call raised instead


def check_quant(quant: str) -> str:
    q = quant.lower()
    if q not in FTYPES:
        raise MemagentError(f"{quant!r} is not a quantization memagent can make", f"Use one of: {', '.join(QUANTS)}", exit_code=2)
    return q


def quantize(
    src: Path, dest: Path, quant: str, *, progress: Callable[[int, int], None] | None = None, threads: int | None = None
) -> Path:
    """Quantizes the GGUF `src` to `quant` at exactly `dest`; `progress(tensors done, tensors)`."""
    import ctypes

    from ..runtime import llama_cpp_module, llama_log_listener, log_reason

    llama_cpp = llama_cpp_module()

    quant = check_quant(quant)
    dest = Path(dest)
    partial = dest.with_name(dest.name + ".partial")
    partial.unlink(missing_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[quant]
    params.nthread = threads or 0  # 0: every core
    result: _Outcome = {}

    def work() -> None:
        try:
            result["rc"] = llama_cpp.llama_model_quantize(os.fsencode(src), os.fsencode(partial), ctypes.byref(params))
        except BaseException as exc:  # reported by the waiting thread
            result["error"] = exc

    step: list[tuple[int, int]] = []

    def listen(line: str) -> None:
        # Called on the quantizer's thread, inside a C callback: only note the step here.
        found = _STEP.search(line)
        if found:
            step.append((int(found.group(1)), int(found.group(2))))

    with llama_log_listener(listen):
        worker = threading.Thread(target=work, name="memagent-quantize", daemon=True)
        worker.start()
        reported = None
        try:
            while worker.is_alive():
                worker.join(0.2)
                # Progress is reported from this thread, so a display error or Ctrl-C surfaces here.
                if step and step[-1] != reported and progress is not None:
                    reported = step[-1]
                    progress(*reported)
        except BaseException:
            # Ctrl-C: the C call cannot be stopped, but nothing it writes will be used.
            partial.unlink(missing_ok=True)
            raise
    if step and step[-1] != reported and progress is not None and result.get("rc") == 0:
        progress(*step[-1])
    if "error" in result:
        partial.unlink(missing_ok=True)
        raise result["error"]
    if result.get("rc") != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        reason = log_reason()
        raise MemagentError(
            f"llama.cpp could not quantize {src.name} to {quant}" + (f": {reason}" if reason else ""),
            "Check free disk space; --verbose shows llama.cpp's log",
        )
    os.replace(partial, dest)
    return dest
