"""B11's model: Qwen3-30B-A3B's exact tensors with random weights, built from two quantized layers."""

from __future__ import annotations

import collections
from pathlib import Path

from benchmarks.harness import shapes
from benchmarks.harness.fixtures import DATA, QWEN25_VOCAB

DEFAULT_VOCAB = QWEN25_VOCAB
STAND_IN = DATA / "qwenlong.gguf"
QUESTION = "What did the committee decide about the old mill?"
SHAPE = "qwenlong-l1.5-30b-a3b"  # in harness/shapes.py
REAL_LAYERS = 48
REAL_Q4_K_M_GB = 18.6  # QwenLong-L1.5-30B-A3B at Q4_K_M, about (llama.cpp's mix of the real 30.5B parameters)


def build(work: Path, vocab: Path = DEFAULT_VOCAB, n_layer: int = REAL_LAYERS) -> Path:
    """The Q4_K_M model in `work`, made once from two quantized layers (harness/shapes.py), with the
    trained QwenLong stand-in's Qwen3-Thinking-style chat template (its prompt opens "<think>")."""
    from memagent_cli.model.gguf import read_gguf

    template = read_gguf(STAND_IN).chat_template or ""
    return shapes.build(SHAPE, work, vocab, fast=True, n_layer=n_layer, template=template)


def model_record(model: Path) -> dict:
    import gguf

    reader = gguf.GGUFReader(str(model))
    types = dict(collections.Counter(t.tensor_type.name for t in reader.tensors))
    n_layer = int(reader.fields["qwen3moe.block_count"].contents())
    return {
        "file": model.name,
        "bytes": model.stat().st_size,
        "gb": round(model.stat().st_size / 1e9, 2),
        "real_gb": REAL_Q4_K_M_GB,
        "layers": n_layer,
        "tensor_types": types,
        "layers_with_more_bits": sum(shapes.use_more_bits(i, n_layer) for i in range(n_layer)),
    }
