"""Model memory from the GGUF tensor table, GPU discovery and the layer-offload plan."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from memagent_cli.model import gpu, memory
from memagent_cli.model.gguf import GGUFInfo, TensorInfo, read_gguf
from memagent_cli.model.gpu import GPUDevice, RawDevice
from memagent_cli.model.memory import ModelMemory

GIB = 1024**3
MIB = 1024**2


def fake_info(n_layer=28, n_embd=3584, n_head=28, n_head_kv=4, tensors=(), file_size=0, **extra) -> GGUFInfo:
    """A GGUFInfo with Qwen2.5-7B's hyper-parameters (by default) and the given tensor table."""
    meta = {
        "general.architecture": "qwen2",
        "qwen2.block_count": n_layer,
        "qwen2.embedding_length": n_embd,
        "qwen2.attention.head_count": n_head,
        "qwen2.attention.head_count_kv": n_head_kv,
    }
    meta.update({f"qwen2.{k}": v for k, v in extra.items()})
    return GGUFInfo(path=Path("fake.gguf"), version=3, metadata=meta, tensors=list(tensors), file_size=file_size)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from testkit.tinymodel import write_tiny_qwen2

    return write_tiny_qwen2(tmp_path_factory.mktemp("gpu") / "tiny.gguf", n_layer=3, n_embd=64, n_head=4, n_head_kv=2)


# --- type sizes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "type_id, expected",
    [
        (0, (1, 4)),
        (1, (1, 2)),
        (2, (32, 18)),
        (3, (32, 20)),
        (8, (32, 34)),
        (9, (32, 36)),
        (10, (256, 84)),
        (12, (256, 144)),
        (13, (256, 176)),
        (14, (256, 210)),
        (23, (256, 136)),
        (30, (1, 2)),
        (34, (256, 54)),
        (39, (32, 17)),
    ],
)
def test_ggml_type_sizes_spot_checks(type_id, expected):
    assert memory.GGML_TYPE_SIZES[type_id] == expected


def test_type_table_matches_the_loaded_ggml_library():
    # ggml's own traits, from the libggml-base this llama-cpp-python ships
    try:
        g = gpu._GGML()
        blck = g.fn("ggml_blck_size", [ctypes.c_int], ctypes.c_int64)
        size = g.fn("ggml_type_size", [ctypes.c_int], ctypes.c_size_t)
    except AttributeError:
        pytest.skip("ggml type traits are not reachable in this build")
    # only ids up to the table's last: ggml indexes its traits array without a bounds check
    live = {}
    for type_id in range(max(memory.GGML_TYPE_SIZES) + 1):
        b, s = blck(type_id), size(type_id)
        if b > 0 and s > 0:  # removed types read 0
            live[type_id] = (b, s)
    assert live == memory.GGML_TYPE_SIZES


def test_tensor_bytes_counts_blocks_per_row():
    t = TensorInfo("blk.0.attn_q.weight", (3584, 3584), 12, 0)  # Q4_K
    assert memory.tensor_bytes(t) == 3584 // 256 * 144 * 3584
    assert memory.tensor_bytes(TensorInfo("x", (100, 3), 0, 0)) == 1200  # F32
    assert memory.tensor_bytes(TensorInfo("x", (40,), 2, 0)) == 2 * 18  # a partial block still takes a block
    with pytest.raises(ValueError, match="unknown ggml type 99"):
        memory.tensor_bytes(TensorInfo("x", (10,), 99, 0))


# --- model memory -------------------------------------------------------------------------------


def test_model_memory_of_a_written_model_matches_its_tensors_and_file(tiny):
    import gguf
    import numpy as np

    info = read_gguf(tiny)
    mem = memory.model_memory(info)
    reader = gguf.GGUFReader(str(tiny))
    expected = {t.name: int(np.asarray(t.data).nbytes) for t in reader.tensors}
    assert mem.weights_total == sum(expected.values())
    assert mem.n_layer == 3 and len(mem.per_layer) == 3
    assert mem.per_layer[0] == sum(v for k, v in expected.items() if k.startswith("blk.0."))
    assert mem.per_layer == [mem.per_layer[0]] * 3
    assert mem.non_layer == expected["token_embd.weight"] + expected["output.weight"] + expected["output_norm.weight"]
    assert mem.output_bytes == expected["output.weight"] + expected["output_norm.weight"]
    # the data section is the tensors plus alignment padding (at most 31 bytes each)
    data = info.file_size - reader.data_offset
    assert 0 <= data - mem.weights_total < 32 * len(info.tensors)
    # n_embd 64 / 4 heads = head dim 16; 2 KV heads; K and V; f16
    assert mem.kv_bytes_per_token == 3 * 2 * 2 * 16 * 2
    assert mem.n_vocab == len(info.get("tokenizer.ggml.tokens"))


def test_unknown_tensor_type_is_sized_from_the_file_layout():
    tensors = [
        TensorInfo("token_embd.weight", (64, 10), 0, 0),  # 2560 bytes
        TensorInfo("blk.0.attn_q.weight", (64, 64), 77, 2560),  # unknown: gap to the next
        TensorInfo("blk.0.ffn_up.weight", (64, 64), 1, 2560 + 5000),
        TensorInfo("output.weight", (64, 10), 78, 2560 + 5000 + 8192),
    ]  # unknown and last
    info = fake_info(n_layer=1, n_embd=64, n_head=4, n_head_kv=4, tensors=tensors, file_size=1_000_000)
    mem = memory.model_memory(info)
    assert mem.per_layer == [5000 + 8192]
    assert mem.non_layer == 2560 + 64 * 10 * 4  # the last one: the rest of the file, capped at 4 bytes/element
    assert mem.output_bytes == 64 * 10 * 4


def test_tied_embeddings_put_a_copy_of_token_embd_on_the_gpu():
    tensors = [TensorInfo("token_embd.weight", (64, 10), 0, 0), TensorInfo("output_norm.weight", (64,), 0, 2560)]
    mem = memory.model_memory(fake_info(n_layer=0, n_embd=64, n_head=4, tensors=tensors))
    assert mem.output_bytes == 2560 + 256 and mem.n_vocab == 10


def test_kv_cache_for_qwen25_7b_and_14b():
    mem7 = memory.model_memory(fake_info())
    assert mem7.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2
    assert memory.kv_cache_bytes(mem7, 8192) == 469_762_048
    mem14 = memory.model_memory(fake_info(n_layer=48, n_embd=5120, n_head=40, n_head_kv=8))
    assert memory.kv_cache_bytes(mem14, 8192) == 2 * 48 * 8 * 128 * 2 * 8192 == 1_610_612_736
    assert memory.kv_cache_bytes(mem14, 0) == 0


def test_kv_uses_key_and_value_length_and_per_layer_heads():
    mem = memory.model_memory(
        fake_info(
            n_layer=2, n_embd=1024, n_head=8, n_head_kv=[2, 0], **{"attention.key_length": 192, "attention.value_length": 128}
        )
    )
    assert mem.kv_per_layer == [(192 + 128) * 2 * 2, 0]  # a layer without KV heads (recurrent) costs nothing
    assert mem.kv_bytes_per_token == 1280


# --- devices ------------------------------------------------------------------------------------

NVIDIA_SMI = """NVIDIA GeForce RTX 4090, 24564, 23897
NVIDIA H100 80GB HBM3, 81559, [N/A]

"""


def test_parse_nvidia_smi():
    devices = gpu.parse_nvidia_smi(NVIDIA_SMI)
    assert devices == [
        GPUDevice("NVIDIA GeForce RTX 4090", 24564 * MIB, 23897 * MIB, "CUDA"),
        GPUDevice("NVIDIA H100 80GB HBM3", 81559 * MIB, None, "CUDA"),
    ]
    assert gpu.parse_nvidia_smi("") == []
    assert gpu.parse_nvidia_smi("No devices were found") == []


def test_parse_memsize():
    assert gpu.parse_memsize("34359738368\n") == 32 * GIB
    assert gpu.parse_memsize("sysctl: unknown oid") is None


def test_pick_gpus_prefers_dedicated_gpus_like_llama_cpp():
    cpu = RawDevice("CPU", "AMD EPYC", gpu.DEV_CPU, 0, 0, "CPU")
    blas = RawDevice("BLAS", "OpenBLAS", gpu.DEV_ACCEL, 0, 0, "BLAS")
    cuda = RawDevice("CUDA0", "NVIDIA GeForce RTX 4090", gpu.DEV_GPU, 20 * GIB, 24 * GIB, "CUDA")
    igpu = RawDevice("Vulkan1", "AMD Radeon Graphics", gpu.DEV_IGPU, 0, 0, "Vulkan")
    assert gpu.pick_gpus([cpu, blas, cuda, igpu]) == [GPUDevice("NVIDIA GeForce RTX 4090", 24 * GIB, 20 * GIB, "CUDA")]
    assert gpu.pick_gpus([cpu, igpu]) == [GPUDevice("AMD Radeon Graphics", None, None, "Vulkan")]  # 0 = unknown
    assert gpu.pick_gpus([cpu, blas]) == []


def test_gpu_devices_on_this_cpu_only_build():
    import llama_cpp

    devices = gpu.gpu_devices()
    assert isinstance(devices, list)
    raw = gpu.ggml_devices()
    assert raw is not None, "ggml's device registry should be reachable through ctypes"
    assert any(d.type == gpu.DEV_CPU for d in raw)
    if not llama_cpp.llama_supports_gpu_offload():
        assert devices == [] and gpu.registered_backends() == ["CPU"]


def test_gpu_devices_falls_back_to_nvidia_smi_and_never_raises(monkeypatch):
    monkeypatch.setattr(gpu, "ggml_devices", lambda **_: None)
    monkeypatch.setattr(gpu, "_offload_supported", lambda: True)
    monkeypatch.setattr(gpu.sys, "platform", "linux")
    monkeypatch.setattr(gpu, "nvidia_smi_devices", lambda: gpu.parse_nvidia_smi(NVIDIA_SMI))
    assert [d.name for d in gpu.gpu_devices()] == ["NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB HBM3"]
    monkeypatch.setattr(gpu, "_offload_supported", lambda: False)  # a CPU-only build uses no GPU
    assert gpu.gpu_devices() == []

    def boom(**_):
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(gpu, "ggml_devices", boom)
    assert gpu.gpu_devices() == []


# --- the plan -----------------------------------------------------------------------------------


def qwen7b_like() -> ModelMemory:
    """Qwen2.5-7B Q4_K_M in round numbers: 28 blocks of 150 MiB, a 450 MiB output layer."""
    kv = [2 * 4 * 128 * 2] * 28
    return ModelMemory(
        weights_total=28 * 150 * MIB + 750 * MIB,
        per_layer=[150 * MIB] * 28,
        non_layer=750 * MIB,
        n_layer=28,
        kv_bytes_per_token=sum(kv),
        output_bytes=450 * MIB,
        kv_per_layer=kv,
        n_vocab=152064,
    )


def test_cpu_only_build_plans_no_layers():
    plan = gpu.plan_layers(qwen7b_like(), 8192, devices=[GPUDevice("X", 24 * GIB, 24 * GIB, "CUDA")], offload_supported=False)
    assert plan.layers == 0 and plan.reason.startswith("CPU only") and plan.free_bytes is None


def test_everything_fits_in_plenty_of_memory():
    mem = qwen7b_like()
    plan = gpu.plan_layers(
        mem, 8192, devices=[GPUDevice("NVIDIA GeForce RTX 4090", 24 * GIB, 23 * GIB, "CUDA")], offload_supported=True
    )
    assert plan.layers == -1 and plan.free_bytes == 23 * GIB
    assert "all 28 layers fit" in plan.reason and "NVIDIA GeForce RTX 4090" in plan.reason
    kv = 469_762_048
    compute = memory.COMPUTE_BASE_BYTES + 512 * 152064 * 4
    assert plan.need_bytes == 28 * 150 * MIB + 450 * MIB + kv + compute  # token_embd stays on the CPU


def test_limited_memory_offloads_the_largest_number_of_layers_that_fits():
    mem = qwen7b_like()
    free = 4 * GIB
    plan = gpu.plan_layers(mem, 8192, devices=[GPUDevice("small", 6 * GIB, free, "CUDA")], offload_supported=True)
    budget = 0.9 * free
    # by hand: n_gpu_layers k = the output layer + k-1 blocks (each with its KV share) + compute buffer
    block = 150 * MIB + 469_762_048 // 28
    compute = memory.COMPUTE_BASE_BYTES + 512 * 152064 * 4
    expected = int((budget - compute - 450 * MIB) // block) + 1
    assert 0 < plan.layers == expected < 28
    assert (
        memory.partial_offload_bytes(mem, 8192, plan.layers) <= budget < memory.partial_offload_bytes(mem, 8192, plan.layers + 1)
    )
    assert plan.reason.startswith(f"{expected} of 28 layers") and "4.0 GiB free" in plan.reason


def test_partial_plan_also_fits_older_llama_cpp_that_counts_blocks_only():
    # blocks bigger than the output layer: older llama.cpp (k = the last k blocks) needs more
    kv = [1000] * 10
    mem = ModelMemory(
        weights_total=0,
        per_layer=[500 * MIB] * 10,
        non_layer=0,
        n_layer=10,
        kv_bytes_per_token=sum(kv),
        output_bytes=10 * MIB,
        kv_per_layer=kv,
        n_vocab=1000,
    )
    plan = gpu.plan_layers(mem, 1024, devices=[GPUDevice("g", 4 * GIB, 3 * GIB, "CUDA")], offload_supported=True)
    assert plan.layers * (500 * MIB + 1000 * 1024) + memory.compute_buffer_bytes(mem) <= 0.9 * 3 * GIB
    assert (plan.layers + 1) * (500 * MIB + 1000 * 1024) + memory.compute_buffer_bytes(mem) > 0.9 * 3 * GIB


def test_nothing_fits_plans_zero_layers():
    plan = gpu.plan_layers(qwen7b_like(), 8192, devices=[GPUDevice("tiny", GIB, 300 * MIB, "Vulkan")], offload_supported=True)
    assert plan.layers == 0 and plan.reason.startswith("0 of 28 layers")


def test_multiple_gpus_add_up_their_free_memory():
    devices = [GPUDevice("A", 8 * GIB, 4 * GIB, "CUDA"), GPUDevice("A", 8 * GIB, 4 * GIB, "CUDA")]
    plan = gpu.plan_layers(qwen7b_like(), 8192, devices=devices, offload_supported=True)
    assert plan.layers == -1 and plan.free_bytes == 8 * GIB and "2x A" in plan.reason


@pytest.mark.parametrize("devices", [[], [GPUDevice("Apple GPU (unified memory)", 32 * GIB, None, "Metal")]])
def test_no_free_memory_figure_leaves_it_to_llama_cpp(devices):
    plan = gpu.plan_layers(qwen7b_like(), 8192, devices=devices, offload_supported=True)
    assert plan.layers == -1 and "llama.cpp decides" in plan.reason and plan.free_bytes is None


def test_plan_from_a_real_file(tiny):
    info = read_gguf(tiny)
    plan = gpu.plan_layers(info, 4096, devices=[GPUDevice("G", 8 * GIB, 8 * GIB, "CUDA")], offload_supported=True)
    assert plan.layers == -1 and "all 3 layers fit" in plan.reason
    import llama_cpp

    here = gpu.plan_layers(info, 4096)  # this machine's build and devices
    assert here.need_bytes == plan.need_bytes
    if not llama_cpp.llama_supports_gpu_offload():
        assert here.layers == 0 and here.reason.startswith("CPU only")


def test_format_bytes():
    assert memory.format_bytes(int(4.68e9)) == "4.4 GiB"
    assert memory.format_bytes(512 * MIB) == "512 MiB"
    assert memory.format_bytes(None) == "?"


# --- flash attention ------------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "expected"), [(None, False), (True, True), (False, False)])
def test_flash_attention_reaches_llama_cpp_and_is_off_on_a_cpu_by_default(tiny, flag, expected):
    """B4 measured flash attention faster on a GPU and it measured slower on this CPU: the default
    follows the device, the option overrides it, and llama.cpp's context gets the choice."""
    import llama_cpp

    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(tiny)
    engine = LlamaEngine(
        info, load_tokenizer(info), ChatFormat.from_gguf(info), n_ctx=256, options=EmbeddedOptions(gpu_layers=0, flash_attn=flag)
    )
    try:
        assert engine.flash_attn is expected
        want = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if expected else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        assert engine._model().context_params.flash_attn_type == want
        assert ("flash attention" in engine.description) is expected
    finally:
        engine.close()


def test_ask_flash_attn_option_shows_in_the_device(tiny, tmp_path):
    import json

    from helpers import run_memagent

    doc = tmp_path / "doc.txt"
    doc.write_text("the river flooded the old mill in spring\n" * 20, encoding="utf-8")
    base = ["ask", str(doc), "What flooded?", "-m", str(tiny), "--json", "--no-trace", "--memory-tokens", "8"]
    on = run_memagent(*base, "--answer-tokens", "4", "--flash-attn")
    off = run_memagent(*base, "--answer-tokens", "4", "--no-flash-attn")  # the default is on with a GPU
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert json.loads(on.stdout)["device"].endswith("flash attention)")
    assert "flash attention" not in json.loads(off.stdout)["device"]


def test_default_threads_are_the_free_cores(monkeypatch):
    """B7: on an idle machine every core generates faster; beside busy processes the threads
    must not outnumber the free cores (2 threads beside one busy process ran at 0.58x of 1).
    Busy means now (the CPU clocks sampled), not the 1-minute load average (tests/test_threads.py)."""
    from memagent_cli.model import runtime

    monkeypatch.setattr(runtime, "available_cores", lambda: 8)
    assert runtime.default_threads(0.1) == 8
    assert runtime.default_threads(2.6) == 5
    assert runtime.default_threads(30.0) == 1
    assert runtime.default_threads(sample=lambda: 0.0) == 8
    assert 1 <= runtime.default_threads() <= 8


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libstdc++ and the dynamic linker's scopes are Linux's")
def test_the_model_package_puts_libstdcxx_in_the_global_scope():
    """The CUDA build's SIGSEGV (PERFORMANCE.md, B4): numpy loads libstdc++ privately, so libllama's
    stream calls bound to libggml-cuda's own copy. After importing memagent_cli.model, a process that
    imported numpy first must find libstdc++'s stream symbol in the global scope, where the dynamic
    linker looks before any library's own dependencies."""
    probe = (
        "import ctypes, numpy\n"
        "symbol = '_ZNSo9_M_insertIlEERSoT_'  # std::ostream::_M_insert<long>, what print_info called\n"
        "before = hasattr(ctypes.CDLL(None), symbol)\n"
        "import memagent_cli.model\n"
        "print(before, hasattr(ctypes.CDLL(None), symbol))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_batched_sequences_shrink_until_every_layer_stays_on_the_gpu():
    """`ask --each` on a GPU batches runs in one context: as many as fit with all layers offloaded."""
    mem = qwen7b_like()
    per_sequence = 8192
    roomy = [GPUDevice("big", 80 * GIB, 78 * GIB, "CUDA")]
    kept, plan = gpu.fit_sequences(mem, per_sequence, 8, devices=roomy, offload_supported=True)
    assert kept == 8 and plan.layers == -1 and "sequences" not in plan.reason
    # 7 GiB free: one sequence's cache fits with the weights, eight do not
    small = [GPUDevice("small", 8 * GIB, 7 * GIB, "CUDA")]
    assert gpu.plan_layers(mem, per_sequence * 8, devices=small, offload_supported=True).layers != -1
    kept, plan = gpu.fit_sequences(mem, per_sequence, 8, devices=small, offload_supported=True)
    assert 1 <= kept < 8 and plan.layers == -1 and f"{kept} of 8 sequences batched" in plan.reason
    assert gpu.plan_layers(mem, per_sequence * kept * 2, devices=small, offload_supported=True).layers != -1  # the most that fit
    # a CPU-only build keeps what was asked (batching there is the user's choice)
    kept, plan = gpu.fit_sequences(mem, per_sequence, 4, devices=small, offload_supported=False)
    assert kept == 4 and plan.layers == 0
