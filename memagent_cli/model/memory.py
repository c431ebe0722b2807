"""What a model needs in memory: weights per layer, KV cache, compute buffers.

Arithmetic on the GGUF's tensor table, no device, no llama.cpp: the bytes of every tensor
(from the tensor table, no weights read), the KV cache for a context size, the compute
buffer, and what offloading all or some of the layers puts on a GPU. `model.gpu` plans the
layers from these numbers; `memagent doctor` and the model listings read them. The engine
checks a context against the machine's free memory here (`check_context_fits`) before
llama.cpp allocates it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import MemagentError
from .gguf import GGUFInfo, TensorInfo

# ggml type id -> (elements per block, bytes per block), from ggml's type traits
# (ggml_blck_size / ggml_type_size of ggml 0.25, checked against the loaded library by the
# tests). Ids 4, 5 and 31-33, 36-38 are removed types; no current GGUF holds them.
GGML_TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    9: (32, 36),  # Q8_1 (half2 d+s; gguf-py's table says 40, the old two-float layout)
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    18: (256, 98),  # IQ3_XXS
    19: (256, 50),  # IQ1_S
    20: (32, 18),  # IQ4_NL
    21: (256, 110),  # IQ3_S
    22: (256, 82),  # IQ2_S
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    29: (256, 56),  # IQ1_M
    30: (1, 2),  # BF16
    34: (256, 54),  # TQ1_0
    35: (256, 66),  # TQ2_0
    39: (32, 17),  # MXFP4
    40: (64, 36),  # NVFP4
    41: (128, 18),  # Q1_0
    42: (64, 18),  # Q2_0
}

GIB = 1024**3
MIB = 1024**2

# The engine's micro-batch (llama.LlamaEngine: n_ubatch=512); the compute buffer scales with it.
N_UBATCH = 512
# Fixed part of the compute-buffer estimate: graph scratch (attention, FFN activations) and
# backend workspaces. The logits buffer (n_vocab floats per micro-batch token) comes on top.
COMPUTE_BASE_BYTES = 256 * MIB

_LAYER_RE = re.compile(r"^blk\.(\d+)\.")


def format_duration(seconds: float) -> str:
    """A time a person is told to expect, in one form wherever it is said (an estimate, a pull's
    plan, an MCP progress note): "42 s", "12 min", "1 h 05 min"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def format_bytes(n: int | float | None) -> str:
    """'4.4 GiB', '512 MiB', '?' for unknown."""
    if n is None:
        return "?"
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.0f} MiB"
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{int(n)} B"


# --- what a model needs ----------------------------------------------------------------------


def tensor_bytes(t: TensorInfo) -> int:
    """Bytes of a tensor's data, as ggml_nbytes counts them. ValueError for a type this
    table does not know (model_memory then sizes it from the file layout)."""
    try:
        block, size = GGML_TYPE_SIZES[t.ggml_type]
    except KeyError:
        raise ValueError(f"unknown ggml type {t.ggml_type} for tensor {t.name}") from None
    if not t.shape:
        return size
    rows = math.prod(t.shape[1:])
    return math.ceil(t.shape[0] / block) * size * rows


@dataclass
class ModelMemory:
    weights_total: int  # bytes of every tensor
    per_layer: list[int]  # bytes of blk.N.* tensors, index N
    non_layer: int  # token_embd, output, output_norm...
    n_layer: int
    kv_bytes_per_token: int  # K and V at f16 over all layers
    # What the output layer puts on the GPU once offloaded: output_norm and output.weight,
    # or a second copy of token_embd when the model ties its embeddings (no output.weight).
    # token_embd itself always stays on the CPU (llama.cpp keeps the input layer there).
    output_bytes: int = 0
    kv_per_layer: list[int] = field(default_factory=list)  # per-token K+V bytes of each layer
    n_vocab: int = 0

    def layer_kv(self, i: int) -> int:
        if self.kv_per_layer:
            return self.kv_per_layer[i]
        return self.kv_bytes_per_token // self.n_layer if self.n_layer else 0


def _per_layer_values(value: Any, n_layer: int) -> list[int]:
    """A hyper-parameter that is one number or (for some architectures) one per layer."""
    if isinstance(value, (list, tuple)):
        values = [int(v) for v in value][:n_layer]
        return values + [values[-1] if values else 0] * (n_layer - len(values))
    return [int(value or 0)] * n_layer


def _kv_per_layer(info: GGUFInfo, n_layer: int) -> list[int]:
    """Per-token bytes of the f16 KV cache, layer by layer: (key_length + value_length) *
    n_head_kv * 2 bytes. head_dim defaults to embedding_length / head_count. Layers with no
    KV heads (recurrent layers of hybrid models) cost nothing here; sliding-window layers
    are counted at the full context, which overestimates (safe)."""
    n_head = _per_layer_values(info.arch_get("attention.head_count", 0), n_layer)
    n_head_kv_raw = info.arch_get("attention.head_count_kv")
    n_head_kv = _per_layer_values(n_head_kv_raw, n_layer) if n_head_kv_raw is not None else n_head
    n_embd = int(info.arch_get("embedding_length", 0) or 0)
    out = []
    for i in range(n_layer):
        head_dim = n_embd // n_head[i] if n_head[i] else 0
        k = int(info.arch_get("attention.key_length", head_dim) or 0)
        v = int(info.arch_get("attention.value_length", head_dim) or 0)
        out.append((k + v) * n_head_kv[i] * 2)
    return out


def _sizes_from_layout(info: GGUFInfo) -> dict[str, int]:
    """Bytes per tensor. Known types are exact; a tensor of a type this table does not know
    gets the gap to the next tensor's data offset (exact up to alignment padding), or, when
    it is the last one, the rest of the file (which counts the header too: an overestimate,
    capped at 4 bytes per element)."""
    sizes: dict[str, int] = {}
    ordered = sorted(info.tensors, key=lambda t: t.offset)
    for i, t in enumerate(ordered):
        try:
            sizes[t.name] = tensor_bytes(t)
            continue
        except ValueError:
            pass
        if i + 1 < len(ordered):
            size = ordered[i + 1].offset - t.offset
        else:
            size = max(0, info.file_size - t.offset)
            size = min(size, 4 * math.prod(t.shape or (1,)))
        sizes[t.name] = max(0, size)
    return sizes


def model_memory(info: GGUFInfo) -> ModelMemory:
    sizes = _sizes_from_layout(info)
    n_layer = int(info.arch_get("block_count", 0) or 0)
    layer_of: dict[str, int] = {}
    for name in sizes:
        m = _LAYER_RE.match(name)
        if m:
            layer_of[name] = int(m.group(1))
    if layer_of:  # extra blocks (e.g. next-token-prediction layers) beyond block_count
        n_layer = max(n_layer, max(layer_of.values()) + 1)
    per_layer = [0] * n_layer
    non_layer = 0
    for name, size in sizes.items():
        if name in layer_of:
            per_layer[layer_of[name]] += size
        else:
            non_layer += size
    if "output.weight" in sizes:
        output = sizes["output.weight"]
    else:  # tied embeddings: llama.cpp loads token_embd a second time for the output layer
        output = sizes.get("token_embd.weight", 0)
    output_bytes = output + sizes.get("output_norm.weight", 0) + sizes.get("output_norm.bias", 0)
    n_vocab = 0
    for t in info.tensors:
        if t.name in ("token_embd.weight", "output.weight") and len(t.shape) >= 2:
            n_vocab = int(t.shape[1])
            break
    kv = _kv_per_layer(info, n_layer)
    return ModelMemory(
        weights_total=sum(sizes.values()),
        per_layer=per_layer,
        non_layer=non_layer,
        n_layer=n_layer,
        kv_bytes_per_token=sum(kv),
        output_bytes=output_bytes,
        kv_per_layer=kv,
        n_vocab=n_vocab,
    )


def read_per_token(info: GGUFInfo) -> tuple[int, str | None]:
    """The model's bytes as one token's pass reads them, which its speed follows: the whole file
    for a dense model; for a mixture of experts, the shared tensors and `expert_used_count` of
    every `expert_count` experts (llama.cpp's `*_exps` tensors hold them all). With a note
    saying so for a mixture of experts, else None."""
    n, used = info.arch_get("expert_count"), info.arch_get("expert_used_count")
    if not n or not used:
        return info.file_size, None
    experts = sum(size for name, size in _sizes_from_layout(info).items() if "_exps." in name)
    if not experts:
        return info.file_size, None
    read = info.file_size - round(experts * (1 - int(used) / int(n)))
    return read, f"a mixture of experts: speeds scaled by what one token reads ({used} of {n} experts, {format_bytes(read)})"


def kv_cache_bytes(mem: ModelMemory, n_ctx: int) -> int:
    return mem.kv_bytes_per_token * n_ctx


def compute_buffer_bytes(mem: ModelMemory) -> int:
    """Estimate of the GPU compute buffer: a fixed scratch allowance plus the logits of one
    micro-batch (n_vocab f32 per token). For Qwen2.5 (152K vocabulary) about 550 MiB."""
    return COMPUTE_BASE_BYTES + N_UBATCH * mem.n_vocab * 4


def full_offload_bytes(mem: ModelMemory, n_ctx: int) -> int:
    """GPU bytes with every layer offloaded: all blocks, the output layer, the whole KV
    cache and the compute buffer (token_embd stays on the CPU)."""
    return sum(mem.per_layer) + mem.output_bytes + kv_cache_bytes(mem, n_ctx) + compute_buffer_bytes(mem)


def partial_offload_bytes(mem: ModelMemory, n_ctx: int, k: int) -> int:
    """GPU bytes for n_gpu_layers = k (0 < k <= n_layer).

    llama.cpp fills the GPU from the last layer backwards, but versions differ on what k
    counts: current ones (i_gpu_start = n_layer + 1 - k) put the output layer plus the last
    k-1 blocks there, older ones (i_gpu_start = n_layer - k) the last k blocks and no output
    layer. We do not know which llama.cpp a build vendors, so a plan must fit under both."""
    if k <= 0:
        return 0
    n = mem.n_layer
    k = min(k, n)

    def blocks(j: int) -> int:  # weights and KV cache of the last j blocks
        return sum(mem.per_layer[n - j :]) + n_ctx * sum(mem.layer_kv(i) for i in range(n - j, n))

    current = mem.output_bytes + blocks(k - 1)
    older = blocks(k)
    return max(current, older) + compute_buffer_bytes(mem)


# --- what the machine has ----------------------------------------------------------------------


def available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes a new allocation can take without swapping: Linux's MemAvailable (free memory plus
    the page cache and slabs the kernel can reclaim). None where it is not known (not Linux)."""
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gpu_blocks(mem: ModelMemory, gpu_layers: int) -> int:
    """Blocks n_gpu_layers surely puts on a GPU: all of them for -1 (or more than there are),
    else the last k-1 (current llama.cpp counts the output layer as the first; see
    partial_offload_bytes), which leaves the most on the CPU."""
    n = mem.n_layer
    if gpu_layers < 0 or gpu_layers > n:
        return n
    return max(0, gpu_layers - 1)


def host_kv_bytes(mem: ModelMemory, n_ctx: int, gpu_layers: int = 0) -> int:
    """The f16 KV cache that stays in the machine's memory for a context of n_ctx tokens with
    n_gpu_layers = gpu_layers: that of the blocks left on the CPU (llama.cpp keeps a layer's cache
    where the layer runs)."""
    on_cpu = mem.n_layer - _gpu_blocks(mem, gpu_layers)
    return n_ctx * sum(mem.layer_kv(i) for i in range(on_cpu))


def check_context_fits(
    mem: ModelMemory,
    n_ctx: int,
    *,
    gpu_layers: int = 0,
    host_free: int | None = None,
    gpu_free: int | None = None,
) -> None:
    """Refuses (MemagentError) a context whose KV cache cannot fit, before llama.cpp allocates
    anything: on the machine, the KV cache of the layers left on the CPU against `host_free`
    (available_memory()); on the GPUs, the weights and KV cache `gpu_layers` puts there against
    `gpu_free`. The machine's share of the weights is not counted: llama.cpp maps the file, and
    the kernel pages it in and out (slowly, where memory is short) rather than failing. An unknown
    figure (None) checks nothing. Asked for more than there is, llama.cpp would fill the machine's
    memory before failing, or swap."""
    if host_free is not None:
        kv = host_kv_bytes(mem, n_ctx, gpu_layers)
        if kv > host_free:
            per_token = kv // n_ctx if n_ctx else 0
            fit = host_free // per_token if per_token else 0
            raise MemagentError(
                f"A context of {n_ctx:,} tokens needs {format_bytes(kv)} of KV cache; "
                f"{format_bytes(host_free)} of memory is free",
                f"Not enough memory: lower --ctx (now {n_ctx:,}; about {fit:,} fit), or --chunk-tokens and "
                "--memory-tokens, which set it by default; memagent doctor shows what fits.",
            )
    if gpu_free is not None and gpu_layers != 0:
        # weights and KV cache only: the compute buffer's estimate is too rough to refuse on
        need = full_offload_bytes(mem, n_ctx) if gpu_layers < 0 else partial_offload_bytes(mem, n_ctx, gpu_layers)
        need -= compute_buffer_bytes(mem)
        if need > gpu_free:
            kv = n_ctx * sum(mem.layer_kv(i) for i in range(mem.n_layer - _gpu_blocks(mem, gpu_layers), mem.n_layer))
            raise MemagentError(
                f"A context of {n_ctx:,} tokens with --gpu-layers {gpu_layers} needs {format_bytes(need)} of GPU memory "
                f"({format_bytes(kv)} of it KV cache); {format_bytes(gpu_free)} is free",
                f"Not enough GPU memory: lower --ctx (now {n_ctx:,}) or --gpu-layers, or leave --gpu-layers out "
                "to offload what fits; memagent doctor shows what fits.",
            )
