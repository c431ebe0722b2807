"""What GPUs there are, and how many layers to offload.

This module owns the devices and the plan behind `n_gpu_layers`: the GPUs this
llama-cpp-python build can use with their free memory, and the choice of how many layers
fit, from the sizes `model.memory` computes. `memagent doctor` and the engine read them;
nothing here loads a model.

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
import dataclasses
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .gguf import GGUFInfo
from .memory import MIB, ModelMemory, format_bytes, full_offload_bytes, model_memory, partial_offload_bytes

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
    """ggml's backend registry through ctypes: the very libraries libllama runs on.

    On Linux and macOS the symbols are looked up through libllama's own handle, which finds them
    in the ggml libraries it links. Loading `libggml.so` by name would map a second copy: a wheel
    holds `libggml.so`, `.so.0` and `.so.0.x` as three files, not links, and libllama links
    `.so.0`. A second copy has its own registry, so on a CUDA build the device query made a second
    CUDA context (about 500 MiB of GPU memory) and logged "ggml_cuda_init: found 1 CUDA devices"
    to the terminal through a logger memagent never set (seen on an H200). Windows' GetProcAddress
    does not search a DLL's dependencies, and there a DLL loaded again by name is the same one:
    the ggml DLLs are asked in turn."""

    def __init__(self) -> None:
        from .runtime import llama_cpp_module

        llama_cpp = llama_cpp_module()  # loads libllama and the ggml libraries it links

        handles: list[ctypes.CDLL] = []
        lib = getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)
        if lib is not None:
            handles.append(lib)
        if sys.platform == "win32" or lib is None:
            handles.extend(self._by_name(Path(llama_cpp.__file__).resolve().parent / "lib"))
        self.handles = handles

    @staticmethod
    def _by_name(libdir: Path) -> list[ctypes.CDLL]:
        try:
            from llama_cpp._ctypes_extensions import load_shared_library
        except ImportError:  # older llama-cpp-python: everything may be in libllama
            return []
        handles = []
        for name in ("ggml-base", "ggml"):
            try:
                handles.append(load_shared_library(name, libdir))
            except (OSError, RuntimeError):
                pass
        return handles

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


def fit_sequences(
    info: GGUFInfo | ModelMemory,
    n_ctx: int,
    sequences: int,
    *,
    devices: list[GPUDevice] | None = None,
    offload_supported: bool | None = None,
) -> tuple[int, LayerPlan]:
    """How many sequences (runs batched in one context, each with `n_ctx` tokens of KV cache) to
    keep, and the layer plan for them ("auto"): as many as let every layer stay on the GPU, halving
    down to one; a layer left on the CPU costs every sequence more than batching saves. On a build
    that cannot offload the sequences stay as asked."""
    mem = info if isinstance(info, ModelMemory) else model_memory(info)
    if devices is None and offload_supported is not False:
        devices = gpu_devices()
    plan = plan_layers(mem, n_ctx * sequences, devices=devices, offload_supported=offload_supported)
    if plan.reason.startswith("CPU only"):
        return sequences, plan
    asked = sequences
    while plan.layers != -1 and sequences > 1:
        sequences = max(1, sequences // 2)
        plan = plan_layers(mem, n_ctx * sequences, devices=devices, offload_supported=offload_supported)
    if sequences != asked:
        plan = dataclasses.replace(plan, reason=f"{plan.reason}; {sequences} of {asked} sequences batched, to keep it so")
    return sequences, plan
