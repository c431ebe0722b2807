"""Which model file a run uses.

Today: `--model PATH` or the MEMAGENT_MODEL environment variable. The catalog, downloads
and a configured default plug in here (resolution order: flag > environment > configured
default > catalog default).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import EXIT_USAGE, MemagentError

ENV_MODEL = "MEMAGENT_MODEL"


def resolve_model(model: str | os.PathLike | None) -> Path:
    chosen = model or os.environ.get(ENV_MODEL)
    if not chosen:
        raise MemagentError(
            "No model given.",
            f"Pass --model PATH.gguf or set {ENV_MODEL}; MemAgent GGUFs are converted from "
            "BytedTsinghua-SIA/RL-MemoryAgent-7B or -14B with llama.cpp's convert_hf_to_gguf.py.",
            exit_code=EXIT_USAGE)
    path = Path(chosen).expanduser()
    if not path.exists():
        raise MemagentError(f"Model file not found: {path}", f"Check --model or {ENV_MODEL}.", exit_code=EXIT_USAGE)
    return path
