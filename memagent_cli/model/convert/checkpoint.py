"""A Hugging Face checkpoint folder, read and checked before anything is converted.

A folder holds `config.json`, `tokenizer.json`, `tokenizer_config.json` and the weights: one
`*.safetensors` file, or shards named by `model.safetensors.index.json`. Everything a conversion
could trip on later (a missing or truncated shard, a dtype we cannot read, an architecture we do not
support, an already-quantized checkpoint) is found here, from the headers alone, so a bad folder is
refused in a second with one line instead of after minutes of writing.

Only the safetensors headers are read here (gguf's `SafetensorsLocal`, llama.cpp's own reader);
the tensors are read later, a window at a time, by `writer`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import MemagentError

# Hugging Face class name -> llama.cpp architecture. Qwen2 covers every MemAgent checkpoint; Qwen3 is
# the same network with q/k norms and no q/k/v biases, so it falls out of the same code; Qwen3-MoE
# (Qwen3-30B-A3B, QwenLong-L1.5) is Qwen3 with a router and experts in place of each layer's MLP.
ARCHITECTURES = {"Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3moe"}
# Architectures whose layers hold experts, which llama.cpp stores merged into one 3-D tensor each.
MOE_ARCHITECTURES = frozenset({"qwen3moe"})

# safetensors dtype -> bytes per element, for the dtypes we convert from.
DTYPE_SIZES = {"BF16": 2, "F16": 2, "F32": 4}

REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
INDEX_FILE = "model.safetensors.index.json"
# Besides the weights, what a conversion reads (the chat template may sit in its own file).
METADATA_FILES = (
    *REQUIRED_FILES,
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "special_tokens_map.json",
    INDEX_FILE,
)

_FOLDER_HINT = (
    "A checkpoint folder holds config.json, tokenizer.json, tokenizer_config.json and *.safetensors "
    "(one file, or shards with model.safetensors.index.json)"
)


@dataclass(frozen=True)
class Tensor:
    """One tensor of the checkpoint: where its bytes are and what they are."""

    name: str  # as in the checkpoint, e.g. "model.layers.0.self_attn.q_proj.weight"
    dtype: str  # safetensors dtype: BF16, F16 or F32
    shape: tuple[int, ...]  # PyTorch order (rows first)
    path: Path  # the shard
    offset: int  # absolute byte offset in the shard
    nbytes: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Checkpoint:
    folder: Path
    config: dict[str, Any]  # config.json
    architecture: str  # llama.cpp's name: "qwen2", "qwen3" or "qwen3moe"
    tensors: dict[str, Tensor]  # in the order they are converted: shard by shard, by name within one
    shards: tuple[Path, ...]

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    @property
    def parameters(self) -> int:
        return sum(t.count for t in self.tensors.values())


def _error(message: str, hint: str | None = _FOLDER_HINT) -> MemagentError:
    return MemagentError(message, hint)


def read_config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _error(f"{folder} has no config.json") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _error(f"{path} cannot be read as JSON ({exc})", "Download the checkpoint again") from None
    if not isinstance(config, dict):
        raise _error(f"{path} is not a JSON object", "Download the checkpoint again")
    return config


def architecture_of(config: dict[str, Any]) -> str:
    """llama.cpp's architecture name for a config, or a one-line refusal naming what is supported."""
    names = config.get("architectures") or []
    name = names[0] if isinstance(names, list) and names else config.get("model_type") or "unknown"
    if name not in ARCHITECTURES:
        supported = ", ".join(f"{k} ({v})" for k, v in ARCHITECTURES.items())
        raise MemagentError(
            f"The checkpoint's architecture is {name}, which memagent cannot convert",
            f"Supported: {supported}. For other models, pull a GGUF build (hf:OWNER/REPO:QUANT)",
        )
    quantized = config.get("quantization_config")
    if quantized:
        method = quantized.get("quant_method", "quantized") if isinstance(quantized, dict) else "quantized"
        raise MemagentError(
            f"The checkpoint is already quantized ({method}), which memagent cannot convert",
            "Convert the original bf16/f16 checkpoint",
        )
    architecture = ARCHITECTURES[name]
    if architecture in MOE_ARCHITECTURES:
        _check_moe(config)
    return architecture


def _check_moe(config: dict[str, Any]) -> None:
    """llama.cpp's qwen3moe has experts in every layer and no shared expert: a config that asks for
    dense layers or a shared expert would convert to a file llama.cpp cannot load."""
    experts, used = config.get("num_experts"), config.get("num_experts_per_tok")
    if not isinstance(experts, int) or not isinstance(used, int) or not 0 < used <= experts:
        raise MemagentError(
            f"config.json's num_experts ({experts}) and num_experts_per_tok ({used}) do not describe a mixture of experts",
            "Download the checkpoint's config.json again",
        )
    if not isinstance(config.get("moe_intermediate_size"), int):
        raise MemagentError("config.json lacks moe_intermediate_size", "Download the checkpoint's config.json again")
    dense = config.get("mlp_only_layers") or []
    step = config.get("decoder_sparse_step", 1)
    if dense or step != 1 or config.get("shared_expert_intermediate_size"):
        what = f"dense layers {dense}" if dense else "a shared expert" if step == 1 else f"decoder_sparse_step {step}"
        raise MemagentError(
            f"The checkpoint's config.json asks for {what}, which llama.cpp's qwen3moe has no place for",
            "memagent converts Qwen3-MoE checkpoints with experts in every layer (as Qwen3-30B-A3B)",
        )


def open_checkpoint(folder: str | Path) -> Checkpoint:
    """Reads and checks a checkpoint folder; raises MemagentError with the first problem found."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise _error(f"{folder} is not a folder")
    config = read_config(folder)
    architecture = architecture_of(config)
    for name in REQUIRED_FILES[1:]:
        if not (folder / name).is_file():
            raise _error(f"{folder} has no {name}", "The tokenizer files come with the checkpoint: download them too")
    shards, expected = _shard_files(folder)
    tensors: dict[str, Tensor] = {}
    for shard in shards:
        for tensor in _read_header(shard):
            if tensor.name in tensors:
                raise _error(
                    f"Tensor {tensor.name} is in both {tensors[tensor.name].path.name} and {shard.name}",
                    "Download the checkpoint again",
                )
            tensors[tensor.name] = tensor
    for name, shard_name in expected.items():
        if name not in tensors:
            raise _error(f"{INDEX_FILE} puts {name} in {shard_name}, which does not hold it", "Download the checkpoint again")
    if not tensors:
        raise _error(f"{folder} holds no tensors")
    return Checkpoint(folder=folder, config=config, architecture=architecture, tensors=tensors, shards=tuple(shards))


def _shard_files(folder: Path) -> tuple[list[Path], dict[str, str]]:
    """The safetensors files to read, and (with an index) which tensor each should hold."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise _error(f"{index} cannot be read ({exc})", "Download the checkpoint again") from None
        names = sorted(set(weight_map.values()))
        for name in names:
            if "/" in name or "\\" in name or name in ("", ".", ".."):
                raise _error(f"{INDEX_FILE} names a shard outside the folder: {name!r}", "Download the checkpoint again")
            if not (folder / name).is_file():
                raise _error(
                    f"{INDEX_FILE} names {name}, which is missing from {folder}",
                    "Download the missing shard (or the whole checkpoint) again",
                )
        return [folder / n for n in names], weight_map
    found = sorted(folder.glob("*.safetensors"))
    if len(found) == 1:
        return found, {}
    if found:
        raise _error(f"{folder} has {len(found)} safetensors files but no {INDEX_FILE} to say how they fit together")
    bins = sorted(p.name for p in folder.glob("*.bin"))
    if bins:
        raise _error(
            f"{folder} has PyTorch .bin weights ({bins[0]}…), which memagent cannot read without torch",
            "Use the checkpoint's safetensors release",
        )
    raise _error(f"{folder} has no *.safetensors weights")


def _read_header(shard: Path) -> list[Tensor]:
    from gguf.utility import SafetensorsLocal

    size = shard.stat().st_size
    if size < 8:
        raise _error(f"{shard.name} is truncated ({size} bytes): not even a safetensors header", "Download it again")
    try:
        local = SafetensorsLocal(shard)
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        reason = str(exc).splitlines()[0][:160]
        if "complete metadata" in reason:
            raise _error(
                f"{shard.name} is truncated: its header does not fit in its {size:,} bytes", "Download it again"
            ) from None
        raise _error(f"{shard.name} is not a safetensors file ({reason})", "Download it again") from None
    out = []
    for name, info in local.tensors.items():
        shape = tuple(int(n) for n in info.shape)
        if info.dtype not in DTYPE_SIZES:
            raise MemagentError(
                f"Tensor {name} in {shard.name} has dtype {info.dtype}, which memagent cannot read",
                f"It converts {', '.join(DTYPE_SIZES)} checkpoints; use the unquantized release",
            )
        start, nbytes = info.data_range.offset, info.data_range.size
        if nbytes != math.prod(shape) * DTYPE_SIZES[info.dtype] or nbytes < 0:
            raise _error(f"Tensor {name} in {shard.name} has {nbytes} bytes for shape {list(shape)}", "Download it again")
        if start + nbytes > size:
            raise _error(
                f"{shard.name} is truncated: it has {size:,} bytes, its header describes {start + nbytes:,}",
                "Download it again (an interrupted download leaves such a file)",
            )
        out.append(Tensor(name=name, dtype=info.dtype, shape=shape, path=shard, offset=start, nbytes=nbytes))
    return out
