"""What a model needs in memory, what GPUs there are, and how many layers to offload.

This module owns the numbers behind `n_gpu_layers`: the bytes of every tensor (from the
GGUF tensor table, no weights read), the KV cache for a context size, the GPUs this
llama-cpp-python build can use with their free memory, and the choice of how many layers
fit. `memagent doctor` and the engine read them; nothing here loads a model.

Where the device list comes from, best first:
1. ggml's backend device registry (`ggml_backend_dev_*`), called through ctypes on the
   libraries llama-cpp-python ships: llama-cpp-python binds none of these functions, but
   its libggml/libggml-base export them. This sees exactly the devices llama.cpp will use,
   whatever the backend (CUDA, Metal, Vulkan, ROCm, SYCL...).
2. where those symbols cannot be reached (older or differently packaged builds) and the
   build can offload: `nvidia-smi`, or on macOS the unified memory size (`sysctl`).
"""

from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

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

# The engine's micro-batch (engine.LlamaEngine: n_ubatch=512); the compute buffer scales with it.
N_UBATCH = 512
# Fixed part of the compute-buffer estimate: graph scratch (attention, FFN activations) and
# backend workspaces. The logits buffer (n_vocab floats per micro-batch token) comes on top.
COMPUTE_BASE_BYTES = 256 * MIB

_LAYER_RE = re.compile(r"^blk\.(\d+)\.")


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


# --- what GPUs there are ---------------------------------------------------------------------


@dataclass
class GPUDevice:
    name: str
    total: int | None  # bytes
    free: int | None  # bytes
    backend: str  # "CUDA", "Metal", "Vulkan", ...


# enum ggml_backend_dev_type
DEV_CPU, DEV_GPU, DEV_IGPU, DEV_ACCEL, DEV_META = 0, 1, 2, 3, 4


@dataclass
class RawDevice:
    """One entry of ggml's device registry."""

    name: str  # "CUDA0"
    description: str  # "NVIDIA GeForce RTX 4090"
    type: int  # DEV_*
    free: int
    total: int
    backend: str  # the registry it belongs to: "CUDA", "Metal", "Vulkan", "CPU"...


class _GGML:
    """ggml's backend registry through ctypes. The symbols live in libggml (registry) and
    libggml-base (device calls); dlsym on a handle finds its dependencies' symbols on Linux
    and macOS but GetProcAddress does not on Windows, so every library is asked in turn."""

    def __init__(self) -> None:
        import llama_cpp  # loads libllama and the ggml libraries it links

        handles: list[ctypes.CDLL] = []
        libdir = Path(llama_cpp.__file__).resolve().parent / "lib"
        load: Callable[[str, Path], ctypes.CDLL] | None
        try:
            from llama_cpp._ctypes_extensions import load_shared_library
        except ImportError:  # older llama-cpp-python: everything may be in libllama
            load = None
        else:
            load = load_shared_library
        if load is not None:
            for name in ("ggml-base", "ggml"):
                try:  # already loaded by libllama: dlopen returns the same library
                    handles.append(load(name, libdir))
                except (OSError, RuntimeError):
                    pass
        lib = getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)
        if lib is not None:
            handles.append(lib)
        self.handles = handles

    def fn(self, name: str, argtypes: list[type[Any]], restype: type[Any] | None) -> Callable[..., Any]:
        for h in self.handles:
            try:
                f = h[name]  # a fresh function object: never retypes llama_cpp's own bindings
            except AttributeError:
                continue
            f.argtypes, f.restype = argtypes, restype
            return f
        raise AttributeError(name)


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", errors="replace") if raw else ""


def ggml_devices(*, memory: bool = True) -> list[RawDevice] | None:
    """Every device in ggml's registry, CPU included; None when the registry cannot be
    reached from Python. `memory` asks each GPU for its free memory (on CUDA that creates
    the device context, which a model load does anyway)."""
    try:
        g = _GGML()
        vp = ctypes.c_void_p
        count = g.fn("ggml_backend_dev_count", [], ctypes.c_size_t)
        get = g.fn("ggml_backend_dev_get", [ctypes.c_size_t], vp)
        name = g.fn("ggml_backend_dev_name", [vp], ctypes.c_char_p)
        desc = g.fn("ggml_backend_dev_description", [vp], ctypes.c_char_p)
        dtype = g.fn("ggml_backend_dev_type", [vp], ctypes.c_int)
        mem = g.fn("ggml_backend_dev_memory", [vp, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)], None)
        reg_of = g.fn("ggml_backend_dev_backend_reg", [vp], vp)
        reg_name = g.fn("ggml_backend_reg_name", [vp], ctypes.c_char_p)
    except Exception:
        return None
    out = []
    try:
        for i in range(count()):
            dev = get(i)
            if not dev:
                continue
            kind = int(dtype(dev))
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            if memory and kind in (DEV_GPU, DEV_IGPU):
                mem(dev, ctypes.byref(free), ctypes.byref(total))
            reg = reg_of(dev)
            out.append(
                RawDevice(
                    name=_text(name(dev)),
                    description=_text(desc(dev)),
                    type=kind,
                    free=int(free.value),
                    total=int(total.value),
                    backend=_text(reg_name(reg)) if reg else "",
                )
            )
    except Exception:
        return None
    return out


def registered_backends() -> list[str] | None:
    """Names of the backends compiled into this build, from ggml's registry (e.g.
    ["CUDA", "CPU"]); None when the registry cannot be reached."""
    try:
        g = _GGML()
        count = g.fn("ggml_backend_reg_count", [], ctypes.c_size_t)
        get = g.fn("ggml_backend_reg_get", [ctypes.c_size_t], ctypes.c_void_p)
        reg_name = g.fn("ggml_backend_reg_name", [ctypes.c_void_p], ctypes.c_char_p)
        return [_text(reg_name(get(i))) for i in range(count())]
    except Exception:
        return None


def pick_gpus(raw: Iterable[RawDevice]) -> list[GPUDevice]:
    """The devices llama.cpp offloads to: the dedicated GPUs, or the integrated ones when
    there is no dedicated one (llama.cpp's own default choice). Memory 0 reads as unknown."""
    raw = list(raw)
    chosen = [d for d in raw if d.type == DEV_GPU] or [d for d in raw if d.type == DEV_IGPU]
    return [
        GPUDevice(
            name=d.description or d.name,
            total=d.total or None,
            free=d.free or None,
            backend=d.backend or re.sub(r"\d+$", "", d.name) or "GPU",
        )
        for d in chosen
    ]


def parse_nvidia_smi(text: str) -> list[GPUDevice]:
    """Lines of `nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits`
    ("NVIDIA GeForce RTX 4090, 24564, 23897", MiB) -> devices. '[N/A]' reads as unknown."""

    def mib(field_: str) -> int | None:
        try:
            return int(float(field_.strip())) * MIB
        except ValueError:
            return None

    out = []
    for line in text.splitlines():
        parts = line.strip().rsplit(",", 2)
        if len(parts) != 3 or not parts[0].strip():
            continue
        out.append(GPUDevice(name=parts[0].strip(), total=mib(parts[1]), free=mib(parts[2]), backend="CUDA"))
    return out


def nvidia_smi_devices(timeout: float = 5.0) -> list[GPUDevice] | None:
    """NVIDIA GPUs as the driver sees them; None when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else None


def parse_memsize(text: str) -> int | None:
    """`sysctl -n hw.memsize` output -> bytes."""
    try:
        return int(text.strip())
    except ValueError:
        return None


def macos_unified_memory(timeout: float = 5.0) -> GPUDevice | None:
    """Apple silicon's GPU shares system memory: report its size. How much of it Metal may
    use (its recommended working set, typically 2/3 to 3/4) is not known here, so free is
    left unknown and the plan leaves the split to llama.cpp."""
    if sys.platform != "darwin":
        return None
    try:
        proc = subprocess.run(["sysctl", "-n", "hw.memsize"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    total = parse_memsize(proc.stdout) if proc.returncode == 0 else None
    return GPUDevice(name="Apple GPU (unified memory)", total=total, free=None, backend="Metal") if total else None


def _offload_supported() -> bool:
    from .runtime import gpu_offload_supported

    return gpu_offload_supported()


def gpu_devices() -> list[GPUDevice]:
    """The GPUs this build of llama.cpp can offload to, with their memory. [] on a
    CPU-only build or when none is visible. Never raises."""
    try:
        raw = ggml_devices()
        if raw is not None:
            return pick_gpus(raw)
        # No registry access: only guess from outside when the build can use a GPU at all.
        if not _offload_supported():
            return []
        if sys.platform == "darwin":
            dev = macos_unified_memory()
            return [dev] if dev else []
        return nvidia_smi_devices() or []
    except Exception:
        return []


# --- how many layers to offload ----------------------------------------------------------------


@dataclass
class LayerPlan:
    # n_gpu_layers for llama.cpp: -1 = all, 0 = none, else that many (which current llama.cpp
    # counts with the output layer as the first: k = output + the last k-1 blocks)
    layers: int
    reason: str  # one line for the live view header / --json
    need_bytes: int  # weights + KV cache + compute buffer with everything on the GPU
    free_bytes: int | None


def _device_label(devices: Sequence[GPUDevice]) -> str:
    names = sorted({d.name for d in devices})
    if len(names) > 1:
        return f"{len(devices)} GPUs"
    return names[0] if len(devices) == 1 else f"{len(devices)}x {names[0]}"


def plan_layers(
    info: GGUFInfo | ModelMemory,
    n_ctx: int,
    *,
    devices: list[GPUDevice] | None = None,
    offload_supported: bool | None = None,
    headroom: float = 0.9,
) -> LayerPlan:
    """How many layers to offload for a context of n_ctx tokens ("auto").

    `info` may also be a ModelMemory already computed. `devices` / `offload_supported`
    default to what this machine reports. Only `headroom` of the free memory is planned
    for: other processes and allocator fragmentation take the rest."""
    mem = info if isinstance(info, ModelMemory) else model_memory(info)
    need = full_offload_bytes(mem, n_ctx)
    n = mem.n_layer
    if offload_supported is None:
        try:
            offload_supported = _offload_supported()
        except Exception:
            offload_supported = False
    if not offload_supported:
        return LayerPlan(0, "CPU only: this llama-cpp-python build has no GPU backend", need, None)
    if devices is None:
        devices = gpu_devices()
    known = [d for d in devices if d.free is not None]
    if not known:
        return LayerPlan(
            -1, f"all {n} layers requested: no GPU free-memory figure, so llama.cpp decides where they go", need, None
        )
    free = sum(d.free for d in known if d.free is not None)  # llama.cpp splits layers across GPUs by free memory
    budget = headroom * free
    where = f"{format_bytes(free)} free on {_device_label(known)}"
    if need <= budget:
        return LayerPlan(-1, f"all {n} layers fit: {format_bytes(need)} needed, {where}", need, free)
    k = 0
    for j in range(1, n + 1):  # the need grows with every layer: stop at the first miss
        if partial_offload_bytes(mem, n_ctx, j) > budget:
            break
        k = j
    what = f"weights + KV cache + compute buffer need {format_bytes(need)}, {where}"
    if k == 0:
        return LayerPlan(0, f"0 of {n} layers: not even one fits ({what})", need, free)
    return LayerPlan(k, f"{k} of {n} layers: {what}", need, free)
