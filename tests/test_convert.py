"""`memagent models convert`: safetensors -> GGUF with our own code, checked against llama.cpp's converter.

The oracle: tests/data/make_convert_reference.py ran llama.cpp's own convert_hf_to_gguf.py (with torch
and transformers) on checkpoints that tests/hfcheckpoint.py makes from a seed, and recorded what it
wrote (every key, every tensor's bytes) and the logits transformers computes from the checkpoint
itself. These tests make the same checkpoints, convert them with memagent, and compare.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, run_memagent, shared_path, words

from memagent_cli.errors import MemagentError
from memagent_cli.model.convert.checkpoint import open_checkpoint
from memagent_cli.model.convert.writer import convert, write_vocabulary
from memagent_cli.model.gguf import read_gguf
from testkit.hfcheckpoint import TINY, Shape, read_tensor, tensor_shapes, write_checkpoint

DATA = Path(__file__).parent / "data"
REFERENCE = json.loads((DATA / "convert-reference.json").read_text())
SEED = REFERENCE["made_with"]["checkpoint"]["seed"]
ARCHS = ("qwen2", "qwen3", "qwen3moe")


@pytest.fixture(scope="session")
def tokenizer_folder() -> Path:
    return shared_path("fixtures", "hf", "qwen2.5")


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory, tokenizer_folder):
    """The oracle's checkpoints, made again from their seeds (bf16, two shards, the real tokenizer), in
    folders named as the oracle's were: the converter takes general.name from the folder name."""
    out = {}
    for arch in ARCHS:
        shape = Shape(**REFERENCE[arch]["shape"])
        folder = tmp_path_factory.mktemp("ckpt") / arch
        out[arch] = write_checkpoint(folder, shape, seed=SEED, dtype="BF16", shards=2, tokenizer=tokenizer_folder)
    return out


@pytest.fixture(scope="session")
def converted(checkpoints, tmp_path_factory):
    """memagent's conversions of each checkpoint, at f16 and f32."""
    out = tmp_path_factory.mktemp("converted")
    result = {}
    for arch, folder in checkpoints.items():
        checkpoint = open_checkpoint(folder)
        for outtype in ("f16", "f32"):
            result[arch, outtype] = convert(checkpoint, out / f"{arch}-{outtype}.gguf", outtype)
    return result


def gguf_record(path: Path) -> dict:
    """What make_convert_reference.py records of a GGUF: every key (long arrays by digest), every
    tensor (type, ggml shape, offset, digest of its bytes) and the whole file's digest."""
    import gguf

    reader = gguf.GGUFReader(path)
    kvs = []
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        value = field.contents()
        entry = {"key": name, "type": field.types[0].name}
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            entry["element_type"] = field.types[-1].name
            entry["length"] = len(value)
            if len(value) > 64:
                canonical = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
                entry["sha256"] = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
            else:
                entry["value"] = value
        else:
            entry["value"] = value
        kvs.append(entry)
    tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(d) for d in t.shape],
            "n_bytes": int(t.n_bytes),
            "offset": int(t.data_offset - reader.data_offset),
            "sha256": hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest(),
        }
        for t in reader.tensors
    ]
    return {"kv": kvs, "tensors": tensors, "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_checkpoints_are_the_ones_the_oracle_converted(checkpoints):
    """numpy must make the same bytes from the seed, or nothing below compares like with like."""
    for arch, folder in checkpoints.items():
        recorded = REFERENCE[arch]["checkpoint"]
        for name, digest in {**recorded["files"], **recorded["json_files"]}.items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, (arch, name)


@pytest.mark.parametrize("outtype", ["f16", "f32"])
@pytest.mark.parametrize("arch", ARCHS)
def test_the_gguf_equals_llama_cpp_converters(arch, outtype, converted):
    """Byte for byte; when not, key for key and tensor for tensor (type, shape, place, bytes) says where."""
    theirs = REFERENCE[arch][f"gguf_{outtype}"]
    if _sha256(converted[arch, outtype]) == theirs["file_sha256"]:
        return
    ours = gguf_record(converted[arch, outtype])  # slow (GGUFReader on 152K tokens): only to explain a failure
    assert [kv["key"] for kv in ours["kv"]] == [kv["key"] for kv in theirs["kv"]]
    for mine, reference in zip(ours["kv"], theirs["kv"]):
        assert mine == reference, reference["key"]
    assert [t["name"] for t in ours["tensors"]] == [t["name"] for t in theirs["tensors"]]
    for mine, reference in zip(ours["tensors"], theirs["tensors"]):
        assert mine == reference, reference["name"]
    assert ours["file_sha256"] == theirs["file_sha256"]


def test_vocabulary_equals_llama_cpp_converter_on_qwen25s_real_tokenizer(tokenizer_folder, tmp_path):
    """The real Qwen2.5 tokenizer files against what llama.cpp's converter made of them with --vocab-only:
    every key and value (tokens with [PAD…] rows, types, merges, special ids, add_bos, template, hparams)."""
    ours = read_gguf(write_vocabulary(tokenizer_folder, tmp_path / "vocab.gguf")).metadata
    theirs = read_gguf(shared_path("fixtures", "qwen2.5-vocab-llamacpp.gguf")).metadata
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        assert ours[key] == theirs[key], key
    tokens = ours["tokenizer.ggml.tokens"]
    assert len(tokens) == 152064 and tokens[151664] == b"<|file_sep|>" and tokens[151665] == b"[PAD151665]"


@pytest.mark.parametrize("arch", ARCHS)
def test_llama_cpp_logits_from_our_file_match_the_checkpoints_own(arch, converted):
    """llama.cpp running our f32 conversion reproduces transformers' logits on the checkpoint itself
    (float32 KV cache: llama.cpp's default f16 cache alone costs ~5e-3, see CONVERT-REFERENCE.md). For
    qwen3moe this holds only if llama.cpp routes every token to the experts transformers chose."""
    logits = np.load(DATA / "convert-logits.npz")
    subset = logits["vocab_subset"]
    prompts = [logits[f"{arch}_p{i}_ids"] for i in range(len(REFERENCE["made_with"]["prompts"]))]
    for i, got in enumerate(llama_logits(converted[arch, "f32"], prompts)):
        assert np.array_equal(got.argmax(axis=1), logits[f"{arch}_p{i}_argmax_hf"])
        assert np.abs(got[:, subset] - logits[f"{arch}_p{i}_logits_hf"]).max() < 1e-4


def llama_logits(model: Path, prompts: list[np.ndarray]) -> list[np.ndarray]:
    """llama.cpp's logits at every position of each prompt (one load of the model)."""
    proc = subprocess.run(
        [sys.executable, "-c", _LOGITS_SCRIPT, str(model), json.dumps([p.tolist() for p in prompts])],
        capture_output=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    flat = np.frombuffer(proc.stdout, dtype=np.float32)
    rows = flat.reshape(sum(len(p) for p in prompts), -1)
    return np.split(rows, np.cumsum([len(p) for p in prompts])[:-1])


# llama.cpp in a child process: its logits for every position of each prompt, as raw float32 on stdout.
_LOGITS_SCRIPT = """
import json, sys
import numpy as np
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=256, logits_all=True, n_threads=2, type_k=0, type_v=0, verbose=False)
for ids in json.loads(sys.argv[2]):
    llm.reset()
    llm.eval(ids)
    sys.stdout.buffer.write(np.asarray(llm.scores[: len(ids)], dtype=np.float32).tobytes())
"""


def test_bf16_output_keeps_the_checkpoints_bits(checkpoints, tmp_path):
    path = convert(open_checkpoint(checkpoints["qwen2"]), tmp_path / "bf16.gguf", "bf16")
    types = {t.name: t.ggml_type for t in read_gguf(path).tensors}
    _, shape, values = read_tensor(checkpoints["qwen2"], "model.layers.1.mlp.down_proj.weight")
    assert types["blk.1.ffn_down.weight"] == 30  # BF16
    stored = _tensor_data(path)["blk.1.ffn_down.weight"]
    widened = (np.frombuffer(stored, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(widened.reshape(shape), values)
    assert types["blk.1.ffn_norm.weight"] == 0  # F32: norms stay float32, as llama.cpp's do


@pytest.mark.parametrize("outtype", ["f16", "f32"])
def test_converting_never_holds_a_whole_tensor(outtype, checkpoints, tmp_path, monkeypatch):
    """Windows of at most _WINDOW source bytes, each released once written: the 19 MB embedding goes
    in several pieces, through the bf16 -> f16 table and through gguf's own widening alike."""
    from memagent_cli.model.convert import writer

    monkeypatch.setattr(writer, "_WINDOW", 1 << 20)
    windows = []
    real = writer._release

    def spy(mm, start, stop):
        windows.append(stop - start)
        return real(mm, start, stop)

    monkeypatch.setattr(writer, "_release", spy)
    path = convert(open_checkpoint(checkpoints["qwen2"]), tmp_path / "w.gguf", outtype)
    assert max(windows) <= 1 << 20 and len(windows) > 40
    # The windows join up exactly: the file is llama.cpp's converter's to the byte.
    assert _sha256(path) == REFERENCE["qwen2"][f"gguf_{outtype}"]["file_sha256"]


# -- mixture of experts (qwen3moe: Qwen3-30B-A3B, QwenLong-L1.5) ------------------------------


def test_a_layers_experts_become_one_stacked_tensor_each(checkpoints, converted):
    """What llama.cpp's converter does, read back from our file: expert e's rows are the e-th slice of
    ffn_{gate,up,down}_exps (torch.stack), the router stays float32 (ffn_gate_inp), and the MoE keys say
    8 experts, 2 per token, width 32."""
    data = _tensor_data(converted["qwen3moe", "f32"])
    folder = checkpoints["qwen3moe"]
    for hf, ours in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
        expected = np.stack([read_tensor(folder, f"model.layers.1.mlp.experts.{e}.{hf}.weight")[2] for e in range(8)])
        assert np.array_equal(np.frombuffer(data[f"blk.1.{ours}.weight"], np.float32).reshape(expected.shape), expected)
    router = read_tensor(folder, "model.layers.0.mlp.gate.weight")[2]
    assert np.array_equal(np.frombuffer(data["blk.0.ffn_gate_inp.weight"], np.float32).reshape(8, 64), router)
    f16 = read_gguf(converted["qwen3moe", "f16"])
    types = {t.name: t.ggml_type for t in f16.tensors}
    assert types["blk.0.ffn_gate_inp.weight"] == 0 and types["blk.0.ffn_down_exps.weight"] == 1  # F32, F16
    assert {t.name: t.shape for t in f16.tensors}["blk.0.ffn_down_exps.weight"] == (32, 64, 8)  # ggml order
    assert not any(".experts." in t.name for t in f16.tensors)
    keys = {k: f16.arch_get(k) for k in ("expert_count", "expert_used_count", "expert_feed_forward_length")}
    assert keys == {"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 32}
    assert f16.get("general.size_label") == "8x20M"  # as the converter counts: shared + one expert's share


def _reshard(folder: Path, dest: Path, second: Callable[[str], bool]) -> Path:
    """The checkpoint again in two shards, with an index: the tensors `second` names in the second."""
    import shutil

    dest.mkdir()
    for p in folder.iterdir():
        if p.suffix == ".json" and p.name != "model.safetensors.index.json":
            shutil.copyfile(p, dest / p.name)
    entries = {}
    for shard in sorted(folder.glob("*.safetensors")):
        raw = shard.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        for name, meta in json.loads(raw[8 : 8 + n]).items():
            if name != "__metadata__":
                start, end = meta["data_offsets"]
                entries[name] = (meta["dtype"], meta["shape"], raw[8 + n + start : 8 + n + end])
    groups = [[n for n in entries if not second(n)], [n for n in entries if second(n)]]
    weight_map = {}
    for k, group in enumerate(groups):
        filename = f"model-{k + 1:05d}-of-00002.safetensors"
        header, offset = {}, 0
        for name in group:
            dtype, shape, data = entries[name]
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
            weight_map[name] = filename
        head = json.dumps(header).encode()
        head += b" " * (-len(head) % 8)
        (dest / filename).write_bytes(len(head).to_bytes(8, "little") + head + b"".join(entries[n][2] for n in group))
    (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dest


def test_experts_of_a_layer_split_over_two_shards_merge_the_same(checkpoints, tmp_path):
    """Layer 0's experts 4-7 alone in a second file (a 61 GB checkpoint's 16 shards split layers too):
    each merged tensor is the same bytes, written where the converter writes it, when the layer's last
    expert weight comes by: after everything in the first file."""
    moved = re.compile(r"model\.layers\.0\.mlp\.experts\.[4-7]\.")
    folder = _reshard(checkpoints["qwen3moe"], tmp_path / "qwen3moe", lambda name: bool(moved.match(name)))
    path = convert(open_checkpoint(folder), tmp_path / "split.gguf", "f16")
    reference = {t["name"]: t["sha256"] for t in REFERENCE["qwen3moe"]["gguf_f16"]["tensors"]}
    ours = {name: hashlib.sha256(data).hexdigest() for name, data in _tensor_data(path).items()}
    assert ours == reference
    assert list(ours)[-3:] == [f"blk.0.ffn_{w}_exps.weight" for w in ("down", "gate", "up")]


def _tensor_data(path: Path) -> dict[str, bytes]:
    """Each tensor's bytes, in file order, by memagent's own header reader (gguf's GGUFReader takes
    seconds on a 152K-token vocabulary): the data section ends the file, each tensor padded to the
    alignment, so it starts where the last tensor's padded end puts it."""
    from memagent_cli.model.memory import tensor_bytes

    info = read_gguf(path)
    align = int(info.get("general.alignment", 32))
    raw = path.read_bytes()
    last = max(info.tensors, key=lambda t: t.offset)
    start = len(raw) - (last.offset + -(-tensor_bytes(last) // align) * align)
    return {t.name: raw[start + t.offset : start + t.offset + tensor_bytes(t)] for t in info.tensors}


def test_q4_k_m_quantizes_a_qwen3moe_and_llama_cpp_runs_it(converted, tmp_path):
    from memagent_cli.model.convert.quantize import quantize

    path = quantize(converted["qwen3moe", "f16"], tmp_path / "q4.gguf", "q4_k_m")
    info = read_gguf(path)
    assert info.architecture == "qwen3moe" and info.get("general.file_type") == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    types = {t.name: t.ggml_type for t in info.tensors}
    assert types["blk.0.ffn_gate_inp.weight"] == 0  # the router stays F32, as llama.cpp's quantizer keeps it
    # Rows of 64 and 32 are not whole 256-blocks: llama.cpp falls back to Q5_0 / Q5_1 / Q8_0 for them.
    assert types["blk.0.ffn_gate_exps.weight"] not in (0, 1)
    logits = np.load(DATA / "convert-logits.npz")
    (got,) = llama_logits(path, [logits["qwen3moe_p0_ids"]])
    # Still the same network: 0.976 correlated with transformers' float32 logits when measured.
    assert np.corrcoef(got[:, logits["vocab_subset"]].ravel(), logits["qwen3moe_p0_logits_hf"].ravel())[0, 1] > 0.9


def test_inspect_and_doctor_size_a_qwen3moe_kv_cache(converted, memagent_home, tmp_path):
    """K and V of 2 KV heads of 32 (key_length, value_length), f16, in 2 layers: 512 bytes a token."""
    from memagent_cli.install.doctor import diagnose

    info = read_gguf(converted["qwen3moe", "f16"])
    per_token = info.arch_get("block_count") * info.arch_get("attention.head_count_kv") * (32 + 32) * 2
    assert per_token == 512 and info.arch_get("attention.key_length") == 32
    doc = tmp_path / "doc.txt"
    doc.write_text(words(300), encoding="utf-8")
    proc = run_memagent("inspect", doc, "--model", converted["qwen3moe", "f16"], "--question", "What?", "--json")
    assert proc.returncode == 0, proc.stderr
    context = json.loads(proc.stdout)["context"]
    assert context["kv_cache_assumes"] is None and context["kv_cache_bytes"] == context["tokens"] * per_token
    # its speed follows what one token reads: the shared tensors and 2 of the 4 experts (gguf's own sizes)
    from gguf import GGUFReader

    from memagent_cli.core.inspection import model_shape

    experts = sum(int(t.n_bytes) for t in GGUFReader(converted["qwen3moe", "f16"]).tensors if "_exps." in t.name)
    n, used = info.arch_get("expert_count"), info.arch_get("expert_used_count")
    read = info.file_size - round(experts * (1 - used / n))
    estimate = json.loads(proc.stdout)["estimate"]
    assert 0 < read < info.file_size and model_shape(info) == (read, per_token, model_shape(info)[2])
    assert f"{used} of {n} experts" in estimate["assumes"] and estimate["model_bytes"] == info.file_size
    report = diagnose(models=[("moe", converted["qwen3moe", "f16"])], n_ctx=4096)
    (entry,) = report["models"]
    assert entry["architecture"] == "qwen3moe" and entry["layers"] == 2 and entry["kv_bytes"] == 4096 * per_token


def test_a_qwen3moe_config_with_dense_layers_is_refused(checkpoints, tmp_path):
    folder = _copy_checkpoint(checkpoints["qwen3moe"], tmp_path / "dense")
    config = json.loads((folder / "config.json").read_text())
    config["mlp_only_layers"] = [1]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(MemagentError, match=r"asks for dense layers \[1\], which llama.cpp's qwen3moe has no place for"):
        open_checkpoint(folder)


def test_a_qwen3moe_missing_an_expert_is_refused(checkpoints):
    import dataclasses

    from memagent_cli.model.convert.writer import plan

    checkpoint = open_checkpoint(checkpoints["qwen3moe"])
    tensors = dict(checkpoint.tensors)
    del tensors["model.layers.1.mlp.experts.3.up_proj.weight"]
    with pytest.raises(MemagentError, match="has 23 of the 24 expert tensors of layer 1"):
        plan(dataclasses.replace(checkpoint, tensors=tensors), "f16")


def test_qwenlong_l15_30b_plans_as_llama_cpp_lays_it_out():
    """QwenLong-L1.5-30B-A3B's exact tensors (18,867, 30.5B parameters), planned without any data:
    48 layers of three [128, 768, 2048] expert tensors, each written from 128 sources of 3 MiB (the
    most a conversion ever holds of one is a window of those), ~61 GB of f16 out."""
    from memagent_cli.model.convert.checkpoint import Checkpoint, Tensor, architecture_of
    from memagent_cli.model.convert.writer import plan
    from testkit.hfcheckpoint import QWENLONG_L15_30B, config_json

    shapes = tensor_shapes(QWENLONG_L15_30B)
    assert len(shapes) == 18867 and sum(int(np.prod(s)) for s in shapes.values()) == 30_532_122_624
    config = config_json(QWENLONG_L15_30B)
    assert config["rope_theta"] == 1e7 and config["max_position_embeddings"] == 262144 and config["head_dim"] == 128
    tensors, offset = {}, 0
    for name in sorted(shapes):  # one shard, in the order the converter reads it
        n = int(np.prod(shapes[name])) * 2
        tensors[name] = Tensor(name, "BF16", shapes[name], Path("model.safetensors"), offset, n)
        offset += n
    checkpoint = Checkpoint(Path("QwenLong-L1.5-30B-A3B"), config, architecture_of(config), tensors, ())
    planned = plan(checkpoint, "f16")
    assert len(planned) == 3 + 48 * 12  # 18867 tensors less 48 x (384 - 3) merged
    merged = [p for p in planned if p.name.endswith("_exps.weight")]
    assert len(merged) == 144 and {p.shape for p in merged} == {(128, 768, 2048), (128, 2048, 768)}
    assert all(len(p.sources) == 128 and max(s.nbytes for s in p.sources) == 768 * 2048 * 2 for p in merged)
    # f16, but float32 (2 more bytes each) for the routers and the norms
    f32_elements = 48 * (128 * 2048 + 2 * 2048 + 2 * 128) + 2048
    assert sum(p.nbytes for p in planned) == 2 * 30_532_122_624 + 2 * f32_elements


# -- the command ------------------------------------------------------------------------------


def _leftovers(home: Path) -> list[str]:
    """Files a failed conversion must not leave: models, partial files, intermediates."""
    if not home.exists():
        return []
    return sorted(
        str(p.relative_to(home))
        for p in home.rglob("*")
        if p.is_file() and (p.suffix in (".gguf", ".partial") or ".staging" in p.parts)
    )


def test_convert_a_folder_to_q8_0_then_ask(checkpoints, memagent_home, tmp_path):
    proc = run_memagent("models", "convert", checkpoints["qwen2"], "--quant", "q8_0", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["name"] == "qwen2:q8_0" and record["quantization"] == "q8_0"
    assert "needs" in proc.stderr and "free disk" in proc.stderr and "installed qwen2:q8_0" in proc.stderr
    for stage in ("convert", "quantize"):
        assert f"{stage} 100%" in proc.stderr  # piped: a line per tenth of each stage
    assert list((memagent_home / "models" / ".staging").iterdir()) == []  # the conversion's own folder removed
    info = read_gguf(Path(record["path"]))
    assert info.get("general.file_type") == 7 and info.architecture == "qwen2"
    assert run_memagent("models", "path", "qwen2:q8_0").stdout.strip() == record["path"]
    doc = tmp_path / "doc.txt"
    doc.write_text(words(200), encoding="utf-8")
    asked = run_memagent(
        "ask",
        doc,
        "What is it about?",
        "--model",
        "qwen2:q8_0",
        "--json",
        "--temperature",
        "0",
        "--chunk-tokens",
        "200",
        "--memory-tokens",
        "8",
        "--answer-tokens",
        "8",
    )
    assert asked.returncode == 0, asked.stderr
    result = json.loads(asked.stdout)
    assert result["model"]["path"] == record["path"] and len(result["steps"]) >= 2
    assert all(step["generated_tokens"] > 0 for step in result["steps"])


def test_convert_f16_writes_the_result_directly_with_a_name(checkpoints, memagent_home):
    proc = run_memagent("models", "convert", checkpoints["qwen3"], "--quant", "f16", "--name", "mine", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["name"] == "mine" and record["quantization"] == "f16" and record["architecture"] == "qwen3"
    assert "quantize" not in proc.stderr
    # Installed under its own name, the file is llama.cpp's converter's to the byte.
    assert _sha256(Path(record["path"])) == REFERENCE["qwen3"]["gguf_f16"]["file_sha256"]


def _copy_checkpoint(src: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(src, dest)
    return dest


def _bad_input(folder: Path, memagent_home: Path, expected: str, *extra: str) -> None:
    proc = run_memagent("models", "convert", folder, "--quant", "q8_0", *extra)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(run_memagent("models", "list", "--json").stdout)["installed"] == []
    assert _leftovers(memagent_home) == []


def test_a_truncated_shard_is_refused(checkpoints, tmp_path, memagent_home):
    folder = _copy_checkpoint(checkpoints["qwen2"], tmp_path / "cut")
    shard = folder / "model-00002-of-00002.safetensors"
    os.truncate(shard, shard.stat().st_size - 1000)
    _bad_input(folder, memagent_home, "model-00002-of-00002.safetensors is truncated")


def test_an_index_naming_a_missing_shard_is_refused(checkpoints, tmp_path, memagent_home):
    folder = _copy_checkpoint(checkpoints["qwen2"], tmp_path / "missing")
    (folder / "model-00001-of-00002.safetensors").unlink()
    _bad_input(folder, memagent_home, "names model-00001-of-00002.safetensors, which is missing")


def test_a_missing_tokenizer_file_is_refused(checkpoints, tmp_path, memagent_home):
    folder = _copy_checkpoint(checkpoints["qwen2"], tmp_path / "notok")
    (folder / "tokenizer.json").unlink()
    _bad_input(folder, memagent_home, "has no tokenizer.json")


def test_an_unsupported_architecture_is_refused(checkpoints, tmp_path, memagent_home):
    folder = _copy_checkpoint(checkpoints["qwen2"], tmp_path / "mistral")
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["MistralForCausalLM"]
    (folder / "config.json").write_text(json.dumps(config))
    _bad_input(folder, memagent_home, "architecture is MistralForCausalLM, which memagent cannot convert")


def test_a_dtype_it_cannot_read_is_refused(tmp_path, memagent_home, tokenizer_folder):
    folder = write_checkpoint(tmp_path / "fp8", TINY, seed=1, shards=1, tokenizer=tokenizer_folder)
    shard = folder / "model.safetensors"
    raw = shard.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    name = "model.layers.0.mlp.up_proj.weight"
    start, end = header[name]["data_offsets"]
    header[name]["dtype"] = "F8_E4M3"  # one byte a value: the same tensor needs half the bytes
    header[name]["data_offsets"] = [start, start + (end - start) // 2]
    new = json.dumps(header).encode()
    new += b" " * (-len(new) % 8)
    shard.write_bytes(len(new).to_bytes(8, "little") + new + raw[8 + n :])
    _bad_input(folder, memagent_home, "has dtype F8_E4M3, which memagent cannot read")


def test_too_little_disk_is_refused_before_writing(checkpoints, memagent_home, monkeypatch):
    import shutil

    from memagent_cli.install import pulling

    plan = pulling.plan_convert(str(checkpoints["qwen2"]), quant="q8_0")
    assert plan.peak_disk > plan.result_bytes > 0
    real = shutil.disk_usage
    monkeypatch.setattr(pulling.shutil, "disk_usage", lambda p: real(p)._replace(free=plan.peak_disk // 2))
    with pytest.raises(MemagentError, match="Not enough disk space"):
        pulling.execute(plan)
    assert _leftovers(memagent_home) == []
    assert not (memagent_home / "models" / "registry.json").exists()


def test_tensor_shapes_match_a_real_qwen25_7b():
    """The benchmark's checkpoint has Qwen2.5-7B-Instruct's exact tensors (28 layers, 339 tensors)."""
    from testkit.hfcheckpoint import QWEN25_7B

    shapes = tensor_shapes(QWEN25_7B)
    assert len(shapes) == 339
    assert shapes["model.embed_tokens.weight"] == (152064, 3584)
    assert shapes["model.layers.27.self_attn.k_proj.weight"] == (512, 3584)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (3584, 18944)
    assert sum(int(np.prod(s)) for s in shapes.values()) == 7_615_616_512  # Qwen2.5-7B's parameter count
