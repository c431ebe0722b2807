"""safetensors -> GGUF in bounded memory: the tensors are streamed, a window of rows at a time.

The header (metadata and tensor table) is written with gguf's `GGUFWriter`, llama.cpp's own writer,
and tensor names come from gguf's tensor-name tables, so the file is laid out exactly as
convert_hf_to_gguf.py lays it out. The tensor data is then written window by window: each window is
read through a memory map of the shard, widened to float32 and narrowed to the output type with
gguf's `quants.quantize` (the converter's own conversion, so f16 output is bit-identical), written,
and its pages released. A bf16 embedding of 1 GB is never widened whole; peak memory is a few
windows, whatever the model size (B5, `python -m benchmarks run B5`, measures it).

A mixture-of-experts layer's experts (`mlp.experts.{e}.{gate,up,down}_proj`) become one 3-D tensor
each (`ffn_gate_exps`...), as the converter's `torch.stack` makes them: expert 0's rows, then
expert 1's... Converting is element by element, so the stacked tensor is written expert by expert,
window by window, and never held: a 384 MiB expert tensor of Qwen3-30B-A3B costs a window too.

The output appears only when complete: it is written to `dest`.partial and renamed.
"""

from __future__ import annotations

import functools
import math
import mmap
import os
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ...errors import MemagentError
from .checkpoint import MOE_ARCHITECTURES, Checkpoint, Tensor
from .metadata import add_header

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType

# Output types the converter writes itself; anything smaller goes through llama.cpp's quantizer.
OUTTYPES = ("f32", "f16", "bf16")
_WINDOW = 32 * 1024 * 1024  # source bytes converted at once
# Checkpoint tensors that carry nothing llama.cpp uses.
_SKIPPED = (".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Planned:
    sources: tuple[Tensor, ...]  # one tensor, or a layer's experts in expert order (stacked on a new dim 0)
    name: str  # the GGUF name, e.g. "blk.0.attn_q.weight"
    shape: tuple[int, ...]  # PyTorch order, as the converter hands it to the writer
    qtype: int  # GGMLQuantizationType
    nbytes: int  # bytes in the GGUF


# A layer's expert weights, as Qwen3-MoE checkpoints name them.
_EXPERT = re.compile(r"model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight")
# The order in which the converter (Qwen2MoeModel.modify_tensors) writes a layer's merged experts.
_EXPERT_WEIGHTS = ("down_proj", "gate_proj", "up_proj")


def _ggml_types() -> dict[str, GGMLQuantizationType]:
    from gguf import GGMLQuantizationType as T

    return {"f32": T.F32, "f16": T.F16, "bf16": T.BF16}


def file_type(outtype: str) -> int:
    from gguf import LlamaFileType as F

    return {"f32": F.ALL_F32, "f16": F.MOSTLY_F16, "bf16": F.MOSTLY_BF16}[outtype]


def plan(checkpoint: Checkpoint, outtype: str) -> list[Planned]:
    """Every tensor's GGUF name, shape, type and size, in the converter's order; a tensor the
    architecture has no place for is refused."""
    import gguf

    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == checkpoint.architecture)
    blocks = int(checkpoint.config["num_hidden_layers"])
    names = gguf.get_tensor_name_map(arch, blocks)
    out_type = _ggml_types()[outtype]
    # As the converter's prepare_tensors: vectors, norms and what llama.cpp's quantizer keeps in float32
    # (the MoE router, whose logits pick the experts) stay float32; matrices take the output type.
    always_f32 = _templates(gguf, arch, (gguf.MODEL_TENSOR.FFN_GATE_INP, gguf.MODEL_TENSOR.FFN_GATE_INP_SHEXP))
    moe = checkpoint.architecture in MOE_ARCHITECTURES
    n_experts = int(checkpoint.config["num_experts"]) if moe else 0
    experts: dict[int, dict[str, Tensor]] = {}  # by layer, until the layer's last expert weight is seen
    planned = []
    seen: dict[str, str] = {}

    def add(hf_name: str, sources: tuple[Tensor, ...], shape: tuple[int, ...]) -> None:
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise MemagentError(
                f"The checkpoint has a tensor {sources[0].name} that a {checkpoint.architecture} model has no place for",
                "Is config.json's architecture right for these weights?",
            )
        if name in seen:
            raise MemagentError(f"Tensors {seen[name]} and {hf_name} both map to {name}")
        seen[name] = hf_name
        f32 = len(shape) <= 1 or name.endswith(("_norm.weight", ".bias")) or bool(always_f32.fullmatch(name))
        qtype = gguf.GGMLQuantizationType.F32 if f32 else out_type
        itemsize = 4 if qtype == gguf.GGMLQuantizationType.F32 else 2
        planned.append(Planned(sources, name, shape, int(qtype), math.prod(shape) * itemsize))

    for tensor in checkpoint.tensors.values():
        if tensor.name.endswith(_SKIPPED):
            continue
        if not moe or "experts" not in tensor.name:
            add(tensor.name, (tensor,), tensor.shape)
            continue
        found = _EXPERT.fullmatch(tensor.name)
        if found is None or int(found.group(2)) >= n_experts or int(found.group(1)) >= blocks:
            raise MemagentError(
                f"The checkpoint has a tensor {tensor.name} that a {checkpoint.architecture} model with "
                f"{n_experts} experts in {blocks} layers has no place for",
                "Is config.json's num_experts right for these weights?",
            )
        layer = int(found.group(1))
        pending = experts.setdefault(layer, {})
        pending[tensor.name] = tensor
        # The converter merges a layer's experts when the last of its 3 x num_experts weights comes by,
        # and writes the merged tensors there, in its file order.
        if len(pending) == 3 * n_experts:
            for weight in _EXPERT_WEIGHTS:
                stack = tuple(pending[f"model.layers.{layer}.mlp.experts.{e}.{weight}.weight"] for e in range(n_experts))
                if len({t.shape for t in stack}) != 1:
                    raise MemagentError(
                        f"The experts' {weight} tensors of layer {layer} differ in shape", "Download the checkpoint again"
                    )
                add(f"model.layers.{layer}.mlp.experts.{weight}.weight", stack, (n_experts, *stack[0].shape))
            del experts[layer]
    if experts:
        layer, pending = next(iter(experts.items()))
        raise MemagentError(
            f"The checkpoint has {len(pending)} of the {3 * n_experts} expert tensors of layer {layer}",
            "Download the checkpoint again: a shard may be missing",
        )
    _check_complete(planned, checkpoint)
    return planned


def _templates(gguf: Any, arch: Any, keys: tuple[Any, ...]) -> re.Pattern[str]:
    """A pattern for the GGUF names of these tensor kinds in this architecture ("blk.{bid}..." any block)."""
    names = [gguf.TENSOR_NAMES[k] for k in keys if k in gguf.MODEL_TENSORS[arch]]
    alternatives = [re.escape(n).replace(re.escape("{bid}"), r"\d+") + r"\.weight" for n in names]
    return re.compile("|".join(alternatives) or r"(?!)")


def _check_complete(planned: list[Planned], checkpoint: Checkpoint) -> None:
    """The tensors llama.cpp will ask for when it loads the file: a missing one is a load error later."""
    have = {p.name for p in planned}
    need = ["token_embd.weight", "output_norm.weight"]
    if checkpoint.architecture in MOE_ARCHITECTURES:
        ffn: tuple[str, ...] = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
    else:
        ffn = ("ffn_gate", "ffn_up", "ffn_down")
    for i in range(int(checkpoint.config["num_hidden_layers"])):
        need += [f"blk.{i}.{n}.weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", *ffn)]
    missing = [n for n in need if n not in have]
    if missing:
        raise MemagentError(
            f"The checkpoint lacks {len(missing)} tensor(s) a {checkpoint.architecture} model needs, e.g. {missing[0]}",
            "Download the checkpoint again: a shard may be missing",
        )


def output_bytes(planned: list[Planned]) -> int:
    return sum(p.nbytes for p in planned)


def convert(checkpoint: Checkpoint, dest: Path, outtype: str = "f16", *, progress: Progress | None = None) -> Path:
    """Writes the checkpoint as a GGUF of `outtype` (f32, f16 or bf16) at exactly `dest`."""
    import gguf

    if outtype not in OUTTYPES:
        raise MemagentError(f"{outtype!r} is not an output type of the converter", f"Use one of {', '.join(OUTTYPES)}")
    planned = plan(checkpoint, outtype)
    dest = Path(dest)
    partial = dest.with_name(dest.name + ".partial")
    dest.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path=None, arch=checkpoint.architecture)
    for p in planned:
        # Shapes go in PyTorch order; the writer reverses them into ggml's, as the converter's do.
        writer.add_tensor_info(
            p.name,
            p.shape,
            np.dtype(np.float32 if p.qtype == 0 else np.float16),
            p.nbytes,
            raw_dtype=gguf.GGMLQuantizationType(p.qtype),
        )
    add_header(writer, checkpoint, file_type(outtype))
    total = output_bytes(planned)
    done = 0
    try:
        writer.write_header_to_file(path=partial)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None  # write_header_to_file opened it
        out = writer.fout[0]
        writer.write_padding(out, out.tell())
        maps: dict[Path, tuple[BinaryIO, mmap.mmap]] = {}
        # Views into a map must be gone before the map is closed, also when a write fails (a full
        # disk): the block here and the suspended generator's own view.
        windows: Generator[np.ndarray, None, None] | None = None
        block: np.ndarray | None = None
        try:
            for p in planned:
                windows = _windows(p, maps)
                for block in windows:
                    # numpy's stubs give ndarray __buffer__ only for Python >= 3.12; it is a buffer on every version.
                    out.write(block)  # type: ignore[arg-type]
                    done += block.nbytes
                    block = None
                    if progress is not None:
                        progress(done, total)
                writer.write_padding(out, p.nbytes)
        finally:
            block = None
            if windows is not None:
                windows.close()
            for fh, mm in maps.values():
                mm.close()
                fh.close()
        out.flush()
        os.fsync(out.fileno())
        writer.close()
    except BaseException:
        if writer.fout:
            for fh in writer.fout:
                fh.close()
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, dest)
    return dest


def write_vocabulary(folder: str | Path, dest: Path) -> Path:
    """A vocabulary-only GGUF (no tensors) from a checkpoint folder's config and tokenizer files,
    as llama.cpp's converter writes with --vocab-only: enough for `--tokenizer` and for tests."""
    import gguf

    from .checkpoint import REQUIRED_FILES, architecture_of, read_config

    folder = Path(folder).expanduser()
    config = read_config(folder)
    architecture = architecture_of(config)
    for name in REQUIRED_FILES[1:]:
        if not (folder / name).is_file():
            raise MemagentError(f"{folder} has no {name}", "The tokenizer files come with the checkpoint")
    checkpoint = Checkpoint(folder=folder, config=config, architecture=architecture, tensors={}, shards=())
    writer = gguf.GGUFWriter(path=None, arch=architecture)
    add_header(writer, checkpoint, file_type("f16"))
    partial = Path(dest).with_name(Path(dest).name + ".partial")
    try:
        writer.write_header_to_file(path=partial)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, dest)
    return Path(dest)


def _windows(p: Planned, maps: dict[Path, tuple[BinaryIO, mmap.mmap]]) -> Generator[np.ndarray, None, None]:
    """The tensor's GGUF bytes, a window of whole rows at a time (as memoryviews or arrays); a merged
    tensor's sources one after another, in expert order."""
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize

    for src in p.sources:
        if src.path not in maps:
            fh = open(src.path, "rb")
            maps[src.path] = (fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
        mm = maps[src.path][1]
        itemsize = src.nbytes // max(src.count, 1)
        row = itemsize * (src.shape[-1] if src.shape else 1)
        rows_per_window = max(1, _WINDOW // max(row, 1))
        same = (src.dtype, p.qtype) in (("F32", T.F32), ("F16", T.F16), ("BF16", T.BF16))
        start, end = src.offset, src.offset + src.nbytes
        while start < end:
            stop = min(end, start + rows_per_window * row)
            raw = np.frombuffer(mm, dtype=np.uint8, count=stop - start, offset=start)
            if same:
                # Already in the output type (bf16 -> bf16 is the converter's rounding of an exact value).
                yield raw
            elif src.dtype == "BF16" and p.qtype == T.F16:
                yield np.take(_bf16_to_f16(), raw.view(np.uint16))
            else:
                yield quantize(_widen(raw, src.dtype), T(p.qtype))
            del raw
            _release(mm, start, stop)
            start = stop


@functools.lru_cache(maxsize=1)
def _bf16_to_f16() -> np.ndarray:
    """The f16 bits of every bf16 bit pattern, made by the same widening and the converter's own
    narrowing: a lookup gives identical bits at twice the speed of converting each window (the
    f16 stage was CPU-bound at 0.43x a file copy; see B5, benchmarks/convert.py)."""
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize

    with np.errstate(all="ignore"):  # NaN and infinity patterns are converted as the converter would
        every = _widen(np.arange(1 << 16, dtype=np.uint16).view(np.uint8), "BF16")
        return quantize(every, T.F16).view(np.uint16)


def _widen(raw: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values of raw little-endian bytes; what torch's .to(float32) gives the converter."""
    if dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float32)
    return raw.view(np.float32)


def _release(mm: mmap.mmap, start: int, stop: int) -> None:
    """Drops the window's pages from this process (the page cache keeps them), so resident memory
    stays at a window however large the shard."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is None:
        return
    first = start - start % mmap.PAGESIZE
    try:
        mm.madvise(advice, first, stop - first)
    except (OSError, ValueError):
        pass
