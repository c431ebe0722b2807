"""`memagent doctor`'s report on this (CPU-only) build, on models good and broken, and its rendering."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pytest
from helpers import run_memagent, words
from rich.console import Console

from memagent_cli.cli.views.reports import render_doctor
from memagent_cli.install import doctor

PIP_TAIL = "install --force-reinstall --no-cache-dir llama-cpp-python"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from testkit.tinymodel import write_tiny_qwen2

    return write_tiny_qwen2(tmp_path_factory.mktemp("doctor") / "tiny.gguf")


@pytest.fixture(scope="module")
def offload() -> bool:
    import llama_cpp

    return bool(llama_cpp.llama_supports_gpu_offload())


def rendered(report: dict) -> str:
    console = Console(record=True, width=400, color_system=None)
    console.print(render_doctor(report))
    return console.export_text()


def test_report_on_this_build(offload):
    import llama_cpp

    report = doctor.diagnose()
    assert report["python"] == platform.python_version()
    assert report["llama_cpp_python"] == llama_cpp.__version__
    assert "CPU" in report["backends"]
    assert report["gpu"]["offload_supported"] is offload
    threads = report["threads"]
    assert threads["available_cores"] >= 1 and 1 <= threads["default_generation_threads"] <= threads["available_cores"]
    assert report["models"] == []
    json.dumps(report)
    if not offload:  # this machine's build
        assert report["gpu"]["devices"] == []
        assert PIP_TAIL in report["gpu"]["reinstall"] and report["gpu"]["reinstall_note"]
        if platform.system() != "Darwin":
            assert "CMAKE_ARGS" in report["gpu"]["reinstall"]
        assert report["gpu"]["gpu_visible"] is doctor.gpu_visible()
        # what the view leads the reinstall with follows whether a GPU is there to enable
        for visible, lead in ((False, "For a GPU fitted later, reinstall"), (True, "To enable it, reinstall")):
            shown = rendered({**report, "gpu": {**report["gpu"], "gpu_visible": visible}})
            assert lead in shown and report["gpu"]["reinstall"] in shown
    else:  # pragma: no cover - GPU builds
        assert report["gpu"]["reinstall"] is None


def test_models_good_broken_and_missing(tmp_path, tiny, offload):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny.read_bytes()[:3000])
    report = doctor.diagnose(models=[("tiny", tiny), ("broken", broken), ("gone", tmp_path / "gone.gguf")], n_ctx=4096)
    good, bad, gone = report["models"]
    assert good["name"] == "tiny" and good["architecture"] == "qwen2" and good["layers"] == 2
    assert good["kv_bytes"] == 2 * 2 * 2 * 16 * 2 * 4096  # 2 layers, K+V, 2 KV heads, head dim 16, f16
    assert 0 < good["weights_bytes"] <= good["size"] == tiny.stat().st_size
    assert good["plan"]["need_bytes"] > good["weights_bytes"]
    if not offload:
        assert good["fits_gpu"] is None and good["plan"]["layers"] == 0
    assert bad["name"] == "broken" and "truncated or damaged" in bad["error"] and "plan" not in bad
    assert "not found" in gone["error"]
    assert json.loads(json.dumps(report))["models"][0]["plan"]["reason"] == good["plan"]["reason"]


def test_render_mentions_versions_backends_reinstall_and_models(tmp_path, tiny, offload):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model at all, just text" * 10)
    report = doctor.diagnose(models=[("tiny", tiny), ("broken", broken)])
    report["paths"] = {"data": "/home/u/.local/share/memagent", "config": "/home/u/.config/memagent/config.toml"}
    text = rendered(report)
    for needle in (
        "Python & llama-cpp-python",
        report["llama_cpp_python"],
        "CPU",
        "GPU",
        "Paths",
        "/home/u/.config/memagent/config.toml",
        "tiny",
        "qwen2",
        "not a GGUF model file",
    ):
        assert needle in text, needle
    if not offload:
        assert report["gpu"]["reinstall"] in text


def test_render_of_a_gpu_machine():
    report = {
        "python": "3.11.7",
        "platform": "Linux",
        "llama_cpp_python": "0.3.36",
        "backends": ["CUDA", "CPU"],
        "gpu": {
            "offload_supported": True,
            "reinstall": None,
            "devices": [{"name": "NVIDIA H100 80GB HBM3", "total": 80 * 1024**3, "free": 79 * 1024**3, "backend": "CUDA"}],
        },
        "threads": {"available_cores": 16, "default_generation_threads": 8},
        "n_ctx": 8192,
        "models": [
            {
                "name": "qwen2.5-7b",
                "path": "/m/7b.gguf",
                "size": 4_683_073_536,
                "architecture": "qwen2",
                "layers": 28,
                "weights_bytes": 4_680_000_000,
                "kv_bytes": 469_762_048,
                "fits_gpu": True,
                "plan": {
                    "layers": -1,
                    "reason": "all 28 layers fit: 5.4 GiB needed, 79.0 GiB free on NVIDIA H100",
                    "need_bytes": 5_800_000_000,
                    "free_bytes": 79 * 1024**3,
                },
            }
        ],
    }
    text = rendered(report)
    assert "CUDA, CPU" in text and "79.0 GiB free of 80.0 GiB" in text
    assert "all 28 layers fit" in text and "448 MiB" in text  # the KV cache column
    assert "pip" not in text and "not supported" not in text


def test_reinstall_hints_per_platform():
    pip = "python -m pip"
    cmd, note = doctor.reinstall_hint(system="Linux", has_nvidia_smi=True, has_rocm_smi=False, pip=pip)
    assert cmd == f'CMAKE_ARGS="-DGGML_CUDA=on" python -m pip {PIP_TAIL}' and "CUDA" in note
    cmd, _ = doctor.reinstall_hint(system="Windows", has_nvidia_smi=True, has_rocm_smi=False, pip=pip)
    assert cmd == f'$env:CMAKE_ARGS="-DGGML_CUDA=on"; python -m pip {PIP_TAIL}'
    cmd, note = doctor.reinstall_hint(system="Darwin", has_nvidia_smi=False, has_rocm_smi=False, pip=pip)
    assert cmd == f"python -m pip {PIP_TAIL}" and "Metal" in note
    cmd, note = doctor.reinstall_hint(system="Linux", has_nvidia_smi=False, has_rocm_smi=False, pip=pip)
    assert "-DGGML_VULKAN=on" in cmd and "Vulkan SDK" in note
    cmd, _ = doctor.reinstall_hint(system="Linux", has_nvidia_smi=False, has_rocm_smi=True, pip=pip)
    assert "-DGGML_HIP=on" in cmd
    # a server with no GPU at all: the CPU build is what it needs, said before any reinstall
    _, note = doctor.reinstall_hint(system="Linux", has_nvidia_smi=False, has_rocm_smi=False, pip=pip, any_gpu=False)
    assert note.startswith("No GPU is visible on this machine") and "the CPU build is the one it needs" in note


def test_a_gpu_is_visible_by_its_device_nodes(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor.platform, "system", lambda: "Linux")
    assert doctor.gpu_visible(tmp_path) is False  # no /dev/dri at all: a VM or a container without one
    (tmp_path / "dri").mkdir()
    (tmp_path / "dri" / "card0").touch()
    assert doctor.gpu_visible(tmp_path) is False  # a display-only card node is not a GPU that computes
    (tmp_path / "dri" / "renderD128").touch()
    assert doctor.gpu_visible(tmp_path) is True
    for node in ("nvidia0", "kfd"):  # NVIDIA's device, ROCm's: each alone is enough
        dev = tmp_path / f"dev-{node}"
        dev.mkdir()
        assert doctor.gpu_visible(dev) is False
        (dev / node).touch()
        assert doctor.gpu_visible(dev) is True
    monkeypatch.setattr(doctor.platform, "system", lambda: "Darwin")
    assert doctor.gpu_visible(tmp_path) is None


def test_reinstall_uses_the_pip_of_this_interpreter(monkeypatch, tmp_path):
    import sys

    # the rebuild must land where memagent runs: another environment's pip would not do
    monkeypatch.setattr(doctor.shutil, "which", lambda name: str(tmp_path / "elsewhere" / name))
    assert f"{sys.executable} -m pip install" in doctor.reinstall_hint(system="Linux", has_nvidia_smi=True)[0]
    monkeypatch.setattr(doctor.shutil, "which", lambda name: str(Path(sys.executable).parent / name))
    assert doctor.reinstall_hint(system="Linux", has_nvidia_smi=True)[0] == f'CMAKE_ARGS="-DGGML_CUDA=on" pip {PIP_TAIL}'


def test_backends_parsed_from_system_info():
    cuda = (
        "CUDA : ARCHS = 500,610,700,750,800,860,890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | "
        "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | LLAMAFILE = 1 | OPENMP = 1 | "
    )
    assert doctor.parse_system_info_backends(cuda) == ["CUDA", "CPU"]
    import llama_cpp

    here = llama_cpp.llama_print_system_info().decode()
    assert "CPU" in doctor.parse_system_info_backends(here)
    assert doctor.parse_system_info_backends("") == []


def test_doctor_import_is_cheap():
    import subprocess
    import sys

    code = "import sys, memagent_cli.install.doctor; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_gpu_this_build_cannot_use_is_said_once_per_machine(tmp_path, models, memagent_home):
    """A CPU-only llama-cpp-python (this machine's) and an NVIDIA driver that sees a GPU (a real
    `nvidia-smi` program on PATH, answering as the driver does): the first `ask` says so, with the
    reinstall command, in --json and on stderr; later runs, and --quiet ones, do not."""
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python can offload: the hint is for a CPU-only build")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559, 80000'\n")
    smi.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    doc = tmp_path / "doc.txt"
    doc.write_text(words(200), encoding="utf-8")
    args = ["ask", doc, "Where?", "-m", models["random"], "--chunk-tokens", "200", "--memory-tokens", "4", "--answer-tokens", "4"]
    quiet = run_memagent(*args, "--quiet", env=env)
    assert quiet.returncode == 0 and "NVIDIA" not in quiet.stderr  # never in --quiet output, and not spent there
    refused = run_memagent("ask", "/dev/zero", *args[2:], "--json", env=env)
    assert refused.returncode == 2 and refused.stdout == ""  # a run that never answered does not spend it either
    first = run_memagent(*args, "--json", "--fresh", env=env)  # read: an answer given again loads no model
    hint = json.loads(first.stdout)["gpu"]["hint"]
    assert hint.startswith("NVIDIA H100 80GB HBM3 is here, but this llama-cpp-python runs on the CPU only. To use the GPU: ")
    assert 'CMAKE_ARGS="-DGGML_CUDA=on"' in hint and "--force-reinstall" in hint
    again = run_memagent(*args, env=env)
    assert again.returncode == 0 and "NVIDIA" not in again.stderr  # once per machine
    (memagent_home / "gpu-hint-shown").unlink()
    plain = run_memagent(*args, "--fresh", env=env)
    assert f"note: {hint}" in plain.stderr


def test_doctor_checks_each_model_at_the_context_its_protocol_makes(tmp_path, tiny):
    """A qwenlong model's runs read 32K-token chunks with a 15K memory: doctor sizes its KV cache for
    that context, and a memagent model's for its own (~8K), unless --ctx says otherwise."""
    import shutil

    from memagent_cli.install import registry

    for name in ("plain", "ql"):
        shutil.copyfile(tiny, tmp_path / f"{name}.gguf")
    registry.add(tmp_path / "plain.gguf", "mine")
    registry.add(tmp_path / "ql.gguf", "qwenlong-l1.5-30b-a3b:q4_k_m", source="hub")
    done = run_memagent("doctor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    models = {m["name"]: m for m in report["models"]}
    plain, ql = models["mine"], models["qwenlong-l1.5-30b-a3b:q4_k_m"]
    assert report["n_ctx"] is None
    assert 5000 + 3 * 1024 < plain["n_ctx"] < 10_000  # chunk, memory in (x2) and out, the prompt
    assert 32768 + 3 * 15360 < ql["n_ctx"] < 82_000
    per_token = 2 * 2 * 2 * 16 * 2  # 2 layers, K+V, 2 KV heads, head dim 16, f16
    assert (plain["kv_bytes"], ql["kv_bytes"]) == (per_token * plain["n_ctx"], per_token * ql["n_ctx"])
    fixed = json.loads(run_memagent("doctor", "--ctx", "4096", "--json").stdout)
    assert {m["n_ctx"] for m in fixed["models"]} == {4096} and fixed["n_ctx"] == 4096
    text = run_memagent("doctor").stdout
    assert "each at the context its runs make" in text and f"{ql['n_ctx']:,}" in text
