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
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, run_memagent, shared_path, words
from hfcheckpoint import TINY, Shape, tensor_shapes, write_checkpoint

from memagent_cli.errors import MemagentError
from memagent_cli.model.convert.checkpoint import open_checkpoint
from memagent_cli.model.convert.writer import convert, write_vocabulary
from memagent_cli.model.gguf import read_gguf

DATA = Path(__file__).parent / "data"
REFERENCE = json.loads((DATA / "convert-reference.json").read_text())
SEED = REFERENCE["made_with"]["checkpoint"]["seed"]
ARCHS = ("qwen2", "qwen3")


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
    (float32 KV cache: llama.cpp's default f16 cache alone costs ~5e-3, see CONVERT-REFERENCE.md)."""
    logits = np.load(DATA / "convert-logits.npz")
    subset = logits["vocab_subset"]
    for i in range(len(REFERENCE["made_with"]["prompts"])):
        ids = logits[f"{arch}_p{i}_ids"]
        proc = subprocess.run(
            [sys.executable, "-c", _LOGITS_SCRIPT, str(converted[arch, "f32"]), json.dumps(ids.tolist())],
            capture_output=True,
            timeout=300,
            cwd=REPO,
        )
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        got = np.frombuffer(proc.stdout, dtype=np.float32).reshape(len(ids), -1)
        assert np.array_equal(got.argmax(axis=1), logits[f"{arch}_p{i}_argmax_hf"])
        assert np.abs(got[:, subset] - logits[f"{arch}_p{i}_logits_hf"]).max() < 1e-4


# llama.cpp in a child process: its logits for every position, as raw float32 on stdout.
_LOGITS_SCRIPT = """
import json, sys
import numpy as np
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=256, logits_all=True, n_threads=2, type_k=0, type_v=0, verbose=False)
ids = json.loads(sys.argv[2])
llm.eval(ids)
sys.stdout.buffer.write(np.asarray(llm.scores[: len(ids)], dtype=np.float32).tobytes())
"""


def test_bf16_output_keeps_the_checkpoints_bits(checkpoints, tmp_path):
    from hfcheckpoint import read_tensor

    path = convert(open_checkpoint(checkpoints["qwen2"]), tmp_path / "bf16.gguf", "bf16")
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    _, shape, values = read_tensor(checkpoints["qwen2"], "model.layers.1.mlp.down_proj.weight")
    stored = tensors["blk.1.ffn_down.weight"]
    assert stored.tensor_type.name == "BF16"
    widened = (np.frombuffer(stored.data.tobytes(), dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(widened.reshape(shape), values)
    assert tensors["blk.1.ffn_norm.weight"].tensor_type.name == "F32"  # norms stay float32, as llama.cpp's do


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
    assert not (memagent_home / "models" / ".staging").exists() or not any((memagent_home / "models" / ".staging").iterdir())
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
    from hfcheckpoint import QWEN25_7B

    shapes = tensor_shapes(QWEN25_7B)
    assert len(shapes) == 339
    assert shapes["model.embed_tokens.weight"] == (152064, 3584)
    assert shapes["model.layers.27.self_attn.k_proj.weight"] == (512, 3584)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (3584, 18944)
    assert sum(int(np.prod(s)) for s in shapes.values()) == 7_615_616_512  # Qwen2.5-7B's parameter count
