"""The data behind `memagent doctor`: what this machine and this llama-cpp-python build can do.

`diagnose()` gathers a JSON-able report (versions, compiled backends, GPU offload and
devices, threads, and for each given model its memory needs and offload plan); `render()`
turns it into a readable summary. Neither raises for a broken model or a broken
llama-cpp-python: a doctor has to work when nothing else does. Paths and installed-model
discovery belong to the caller, which may add report["paths"] before rendering.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from ..model.gpu import GPUDevice

_PIP_FLAGS = "install --force-reinstall --no-cache-dir llama-cpp-python"


def parse_system_info_backends(text: str) -> list[str]:
    """Backend names in llama_print_system_info(): each backend with features prints
    "NAME : FEATURE = v | FEATURE = v | ", e.g. "CUDA : ARCHS = 890 | ... | CPU : SSE3 = 1 | ..."."""
    names = []
    for part in text.split("|"):
        m = re.match(r"\s*([A-Za-z][\w\-]*)\s+:\s", part)
        if m and m.group(1) not in names:
            names.append(m.group(1))
    return names


def _pip() -> str:
    """pip of the Python running memagent: `pip` when the one on PATH sits beside this
    interpreter, else `<this python> -m pip` (a bare `pip` may belong to another
    environment: pipx, uv tool, a venv not activated)."""
    exe = sys.executable or "python"
    on_path = shutil.which("pip")
    if on_path and sys.executable and Path(on_path).parent == Path(sys.executable).parent:
        return "pip"
    if sys.platform == "win32":
        return subprocess.list2cmdline([exe]) + " -m pip"
    import shlex

    return shlex.quote(exe) + " -m pip"


def gpu_visible(dev: Path = Path("/dev")) -> bool | None:
    """Whether Linux shows a GPU here at all: a render node (/dev/dri/renderD*: Intel, AMD, NVIDIA
    with their drivers), NVIDIA's or ROCm's device; None off Linux, where this is not known."""
    if platform.system() != "Linux":
        return None
    return any((dev / "dri").glob("renderD*")) or (dev / "nvidia0").exists() or (dev / "kfd").exists()


def reinstall_hint(
    *,
    system: str | None = None,
    has_nvidia_smi: bool | None = None,
    has_rocm_smi: bool | None = None,
    pip: str | None = None,
    any_gpu: bool | None = None,
) -> tuple[str, str]:
    """(command, note) that rebuilds llama-cpp-python with a GPU backend for this platform.
    The keyword arguments default to this machine; tests pass them."""
    system = system or platform.system()
    pip = pip or _pip()
    if has_nvidia_smi is None:
        has_nvidia_smi = shutil.which("nvidia-smi") is not None
    if has_rocm_smi is None:
        has_rocm_smi = shutil.which("rocm-smi") is not None
    if any_gpu is None and system == "Linux":
        any_gpu = gpu_visible()
    if system == "Darwin":
        return (
            f"{pip} {_PIP_FLAGS}",
            "Metal is on by default on macOS (Apple silicon): a plain reinstall builds it; "
            "an Intel Mac has no supported GPU backend.",
        )
    if has_nvidia_smi:
        flags, note = "-DGGML_CUDA=on", "nvidia-smi found: build with CUDA (needs the CUDA toolkit, nvcc)."
    elif has_rocm_smi:
        flags, note = "-DGGML_HIP=on", "rocm-smi found: build with ROCm/HIP (needs the ROCm toolkit)."
    else:
        flags = "-DGGML_VULKAN=on"
        if any_gpu is False:  # a server or VM with no GPU: the CPU build is the right one
            note = (
                "No GPU is visible on this machine (no render device, no NVIDIA or ROCm device), so the CPU build "
                "is the one it needs. Where one is fitted, install its driver first; Vulkan (needs the Vulkan SDK) "
                "works with most GPUs, -DGGML_CUDA=on with NVIDIA's."
            )
        else:
            note = (
                "No NVIDIA driver found: Vulkan works with most GPUs (needs the Vulkan SDK); "
                "with an NVIDIA GPU install its driver and use -DGGML_CUDA=on instead."
            )
    if system == "Windows":  # PowerShell: VAR=value before a command is POSIX shell syntax only
        return f'$env:CMAKE_ARGS="{flags}"; {pip} {_PIP_FLAGS}', note
    return f'CMAKE_ARGS="{flags}" {pip} {_PIP_FLAGS}', note


def unused_gpu_hint() -> str | None:
    """One line when a GPU is here that this llama-cpp-python build cannot use (a CPU-only build,
    what a plain `pip install` gives, on a machine whose NVIDIA driver sees a GPU), with the
    reinstall command `doctor` gives; None otherwise."""
    if _llama_cpp_state()["offload"]:
        return None
    from ..model import gpu

    seen = gpu.nvidia_smi_devices()
    if not seen:
        return None
    command, _ = reinstall_hint(has_nvidia_smi=True)
    return f"{seen[0].name} is here, but this llama-cpp-python runs on the CPU only. To use the GPU: {command}"


def gpu_hint_due() -> str | None:
    """unused_gpu_hint(), until a run has shown it on this machine (remember_gpu_hint)."""
    from ..paths import gpu_hint_marker

    return None if gpu_hint_marker().exists() else unused_gpu_hint()


def remember_gpu_hint(hint: str) -> None:
    """The hint was shown with a finished run: not again (a run that failed before its answer, on a
    bad file say, leaves it due)."""
    from ..paths import gpu_hint_marker

    marker = gpu_hint_marker()
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(hint + "\n", encoding="utf-8")
    except OSError:  # a read-only data directory: the hint comes again next time, no worse
        pass


def _llama_cpp_state() -> dict[str, Any]:
    """Version, backends, system info and offload support of the installed llama-cpp-python."""
    try:
        from ..model.runtime import llama_cpp_module

        llama_cpp = llama_cpp_module()
    except Exception as exc:  # not installed, or its shared library does not load
        return {"version": None, "error": f"{type(exc).__name__}: {exc}", "backends": [], "system_info": "", "offload": False}
    from ..model import gpu

    try:
        system_info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip()
    except Exception:
        system_info = ""
    backends = gpu.registered_backends() or parse_system_info_backends(system_info)
    try:
        offload = bool(llama_cpp.llama_supports_gpu_offload())
    except Exception:
        offload = False
    return {
        "version": getattr(llama_cpp, "__version__", None),
        "error": None,
        "backends": backends,
        "system_info": system_info,
        "offload": offload,
    }


def _model_entry(name: str, path: Path, n_ctx: int, devices: list[GPUDevice], offload: bool) -> dict[str, Any]:
    from ..model import gpu, memory
    from ..model.gguf import read_gguf

    entry: dict[str, Any] = {"name": name, "path": str(path)}
    try:
        info = read_gguf(path)
        if not info.has_weights:
            entry["error"] = "holds only a vocabulary, no weights"
            return entry
        mem = memory.model_memory(info)
        plan = gpu.plan_layers(mem, n_ctx, devices=devices, offload_supported=offload)
    except Exception as exc:  # MemagentError for a bad file; anything else is reported too
        entry["error"] = str(exc) or type(exc).__name__
        return entry
    entry.update(
        {
            "n_ctx": n_ctx,
            "size": info.file_size,
            "architecture": info.architecture,
            "layers": mem.n_layer,
            "weights_bytes": mem.weights_total,
            "kv_bytes": memory.kv_cache_bytes(mem, n_ctx),
            # None: cannot tell (no offload, or free memory unknown)
            "fits_gpu": None if plan.free_bytes is None else plan.layers == -1,
            "plan": asdict(plan),
        }
    )
    return entry


def diagnose(
    *, models: Iterable[tuple[str, Path]] = (), n_ctx: int | None = 8192, contexts: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """A JSON-able report on this machine and the given models. Never raises for a broken
    model (its entry carries "error"). Each model is checked at `n_ctx`, or, where `n_ctx` is None,
    at its own entry in `contexts` (the context its protocol's runs make; 8192 when missing)."""
    from ..model import gpu
    from ..model.runtime import available_cores, default_threads

    state = _llama_cpp_state()
    offload = state["offload"]
    devices = gpu.gpu_devices() if offload else []
    gpu_section: dict[str, Any] = {
        "offload_supported": offload,
        "devices": [asdict(d) for d in devices],
        "reinstall": None,
        "reinstall_note": None,
    }
    if not offload:
        gpu_section["gpu_visible"] = visible = gpu_visible()
        gpu_section["reinstall"], gpu_section["reinstall_note"] = reinstall_hint(any_gpu=visible)
        # GPUs the driver sees although this build cannot use them: why the reinstall helps
        seen = gpu.nvidia_smi_devices()
        if seen:
            gpu_section["system_devices"] = [asdict(d) for d in seen]
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "llama_cpp_python": state["version"],
        "backends": state["backends"],
        "system_info": state["system_info"],
        "gpu": gpu_section,
        "threads": {"available_cores": available_cores(), "default_generation_threads": default_threads()},
        "n_ctx": n_ctx,
        "models": [
            _model_entry(name, Path(path), n_ctx or (contexts or {}).get(name, 8192), devices, offload) for name, path in models
        ],
    }
    if state["error"]:
        report["llama_cpp_error"] = state["error"]
    return report
