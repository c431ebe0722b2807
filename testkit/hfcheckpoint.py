"""Tiny Hugging Face checkpoints (safetensors, config and tokenizer files) made at test time.

`memagent models convert` reads what the Hub publishes for a Qwen2, Qwen3 or Qwen3-MoE model:
`config.json`, `tokenizer.json`, `tokenizer_config.json` and one `*.safetensors` file or several
shards with a `model.safetensors.index.json`. This module writes such a folder with the tensor
names, shapes, config fields and dtype a real checkpoint has, at any size: tiny for tests,
Qwen2.5-7B's exact shapes for the conversion benchmark, Qwen3-30B-A3B's (QwenLong-L1.5's) for
sizing the MoE conversion.

Weights are deterministic for a seed: a test, the oracle script that recorded llama.cpp's own
conversion (`tests/data/make_convert_reference.py`) and the benchmark all make the same bytes.
The safetensors format is written by hand (an 8-byte little-endian header length, a JSON header, the
raw tensors): it needs neither torch nor the safetensors package. Tensors are generated and written
one at a time, so a 15 GB checkpoint is made in bounded memory.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from testkit.texts import SHARED

# The real Qwen2.5 tokenizer files (see tests/data/shared/README.md).
QWEN25_TOKENIZER = SHARED / "fixtures" / "hf" / "qwen2.5"

_DTYPES = {"BF16": 2, "F16": 2, "F32": 4}


@dataclass
class Shape:
    """The hyperparameters that decide a checkpoint's tensors (Qwen2-style names).

    A Qwen3MoeForCausalLM replaces each layer's MLP with a router (`mlp.gate`) and `num_experts`
    SwiGLU experts of width `moe_intermediate_size`; `intermediate_size` is then only a config field.
    """

    architecture: str = "Qwen2ForCausalLM"
    vocab_size: int = 152064
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int | None = None  # Qwen3 states it; Qwen2 derives it from hidden / heads
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    extra_config: dict = field(default_factory=dict)
    # Mixture of experts (Qwen3MoeForCausalLM only)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_qwen3(self) -> bool:
        return self.architecture.startswith("Qwen3")

    @property
    def is_moe(self) -> bool:
        return self.architecture == "Qwen3MoeForCausalLM"

    def record(self) -> dict:
        """The fields that make this shape, as JSON (`Shape(**record)` makes it again); a dense
        shape leaves the expert fields out, so its record reads as it did before MoE existed."""
        moe = ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
        return {k: v for k, v in vars(self).items() if self.is_moe or k not in moe}


TINY = Shape()
# Qwen2.5-7B-Instruct (and so RL-MemoryAgent-7B): the tensors the benchmark converts.
QWEN25_7B = Shape(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4)
# A tiny Qwen3-MoE: 8 experts of width 32, 2 routed per token, Qwen3-30B-A3B-Thinking-2507's RoPE
# base and context. The Qwen2.5 tokenizer's 152064 rows, as TINY, keep the oracle's vocab subset.
TINY_MOE = Shape(
    architecture="Qwen3MoeForCausalLM",
    head_dim=32,
    max_position_embeddings=262144,
    rope_theta=10000000.0,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
)
# QwenLong-L1.5-30B-A3B, a post-training of Qwen3-30B-A3B-Thinking-2507: 48 layers, 32 query / 4 KV
# heads of 128, 128 experts of width 768 with 8 routed per token, no shared expert, untied output,
# RoPE base 1e7 at 262144 positions (Qwen3-30B-A3B-Thinking-2507's config.json); 30.5B parameters.
QWENLONG_L15_30B = Shape(
    architecture="Qwen3MoeForCausalLM",
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=48,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=128,
    max_position_embeddings=262144,
    rope_theta=10000000.0,
    num_experts=128,
    num_experts_per_tok=8,
    moe_intermediate_size=768,
)


def tensor_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Every tensor name and (PyTorch-order) shape, in the order a checkpoint lists them."""
    h, hd = shape.hidden_size, shape.head_size
    q, kv = shape.num_attention_heads * hd, shape.num_key_value_heads * hd
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (shape.vocab_size, h)}
    for i in range(shape.num_hidden_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "self_attn.q_proj.weight"] = (q, h)
        out[p + "self_attn.k_proj.weight"] = (kv, h)
        out[p + "self_attn.v_proj.weight"] = (kv, h)
        if not shape.is_qwen3:  # Qwen2 has q/k/v biases; Qwen3 has q/k norms instead
            out[p + "self_attn.q_proj.bias"] = (q,)
            out[p + "self_attn.k_proj.bias"] = (kv,)
            out[p + "self_attn.v_proj.bias"] = (kv,)
        else:
            out[p + "self_attn.q_norm.weight"] = (hd,)
            out[p + "self_attn.k_norm.weight"] = (hd,)
        out[p + "self_attn.o_proj.weight"] = (h, q)
        out[p + "post_attention_layernorm.weight"] = (h,)
        if shape.is_moe:
            ff = shape.moe_intermediate_size
            out[p + "mlp.gate.weight"] = (shape.num_experts, h)  # the router
            for e in range(shape.num_experts):
                out[p + f"mlp.experts.{e}.gate_proj.weight"] = (ff, h)
                out[p + f"mlp.experts.{e}.up_proj.weight"] = (ff, h)
                out[p + f"mlp.experts.{e}.down_proj.weight"] = (h, ff)
            continue
        out[p + "mlp.gate_proj.weight"] = (shape.intermediate_size, h)
        out[p + "mlp.up_proj.weight"] = (shape.intermediate_size, h)
        out[p + "mlp.down_proj.weight"] = (h, shape.intermediate_size)
    out["model.norm.weight"] = (h,)
    if not shape.tie_word_embeddings:
        out["lm_head.weight"] = (shape.vocab_size, h)
    return out


def config_json(shape: Shape, dtype: str = "bfloat16") -> dict:
    config = {
        "architectures": [shape.architecture],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": shape.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "max_window_layers": shape.num_hidden_layers,
        "model_type": "qwen3" if shape.is_qwen3 else "qwen2",
        "num_attention_heads": shape.num_attention_heads,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_key_value_heads": shape.num_key_value_heads,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": shape.rope_theta,
        "sliding_window": 131072,
        "tie_word_embeddings": shape.tie_word_embeddings,
        "torch_dtype": dtype,
        "transformers_version": "4.43.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": shape.vocab_size,
    }
    if shape.head_dim is not None:
        config["head_dim"] = shape.head_dim
    if shape.is_moe:
        # The fields Qwen3-30B-A3B's config.json has besides the dense ones: every layer sparse,
        # no dense-MLP layers, top-k weights renormalized, no shared expert.
        config.update(
            {
                "attention_bias": False,
                "decoder_sparse_step": 1,
                "mlp_only_layers": [],
                "model_type": "qwen3_moe",
                "moe_intermediate_size": shape.moe_intermediate_size,
                "norm_topk_prob": True,
                "num_experts": shape.num_experts,
                "num_experts_per_tok": shape.num_experts_per_tok,
                "output_router_logits": False,
                "rope_scaling": None,
                "router_aux_loss_coef": 0.001,
                "sliding_window": None,
                "transformers_version": "4.51.0",
            }
        )
        config = dict(sorted(config.items()))
    config.update(shape.extra_config)
    return config


def to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even as PyTorch does."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))
    return (rounded >> 16).astype(np.uint16)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _values(name: str, dims: tuple[int, ...], rng: np.random.Generator, fast: bool) -> np.ndarray:
    """float32 values for one tensor: norms near 1, biases and weights small and random."""
    count = int(np.prod(dims))
    if name.endswith("norm.weight"):
        return (1.0 + 0.1 * rng.standard_normal(count, dtype=np.float32)).reshape(dims)
    std = 0.02 if name.endswith(".bias") else (1.0 / np.sqrt(dims[-1]))
    if fast:
        # Benchmarks need gigabytes: one random block, tiled, is plenty for timing a conversion.
        block = rng.standard_normal(min(count, 1 << 22), dtype=np.float32) * np.float32(std)
        return np.resize(block, count).reshape(dims)
    return (rng.standard_normal(count, dtype=np.float32) * np.float32(std)).reshape(dims)


def _encode(values: np.ndarray, dtype: str) -> bytes | np.ndarray:
    if dtype == "BF16":
        return to_bf16(values)
    if dtype == "F16":
        return values.astype(np.float16)
    return values.astype(np.float32)


def write_checkpoint(
    folder: Path,
    shape: Shape = TINY,
    *,
    seed: int = 0,
    dtype: str = "BF16",
    shards: int = 2,
    tokenizer: Path | None = QWEN25_TOKENIZER,
    fast: bool = False,
) -> Path:
    """Writes a checkpoint folder; `shards` > 1 splits the tensors over files with an index.

    The same (shape, seed, dtype, shards) always gives the same bytes. `tokenizer` is a folder whose
    tokenizer.json and tokenizer_config.json are copied (None: write none).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch_dtype = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype]
    (folder / "config.json").write_text(json.dumps(config_json(shape, torch_dtype), indent=2) + "\n")
    if tokenizer is not None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(tokenizer / name, folder / name)

    shapes = tensor_shapes(shape)
    names = list(shapes)
    groups = [names] if shards <= 1 else _split(names, shapes, shards)
    rng = np.random.default_rng(seed)
    weight_map: dict[str, str] = {}
    total = 0
    for k, group in enumerate(groups):
        filename = "model.safetensors" if shards <= 1 else f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name in group:
            nbytes = int(np.prod(shapes[name])) * _DTYPES[dtype]
            header[name] = {"dtype": dtype, "shape": list(shapes[name]), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            weight_map[name] = filename
        total += offset
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # the safetensors writer pads the header to 8 bytes
        with open(folder / filename, "wb") as out:
            out.write(len(raw).to_bytes(8, "little"))
            out.write(raw)
            for name in group:
                np.ascontiguousarray(_encode(_values(name, shapes[name], rng, fast), dtype)).tofile(out)
    if shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return folder


def _split(names: list[str], shapes: dict[str, tuple[int, ...]], shards: int) -> list[list[str]]:
    """Consecutive groups of roughly equal bytes, as transformers' save_pretrained makes them."""
    sizes = [int(np.prod(shapes[n])) for n in names]
    target = sum(sizes) / shards
    groups: list[list[str]] = [[]]
    acc = 0
    for name, size in zip(names, sizes):
        if groups[-1] and acc + size > target * len(groups) and len(groups) < shards:
            groups.append([])
        groups[-1].append(name)
        acc += size
    return groups


def read_tensor(folder: Path, name: str) -> tuple[str, tuple[int, ...], np.ndarray]:
    """(dtype, shape, float32 values) of one tensor, for tests that compare against the checkpoint."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    filename = json.loads(index.read_text())["weight_map"][name] if index.exists() else "model.safetensors"
    with open(folder / filename, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
        meta = header[name]
        start, end = meta["data_offsets"]
        fh.seek(8 + n + start)
        raw = fh.read(end - start)
    dtype = meta["dtype"]
    if dtype == "BF16":
        values = from_bf16(np.frombuffer(raw, dtype=np.uint16))
    else:
        values = np.frombuffer(raw, dtype={"F16": np.float16, "F32": np.float32}[dtype]).astype(np.float32)
    return dtype, tuple(meta["shape"]), values.reshape(meta["shape"])


if __name__ == "__main__":  # pragma: no cover - by hand: python tests/hfcheckpoint.py OUT_DIR
    import sys

    print(write_checkpoint(Path(sys.argv[1])))
