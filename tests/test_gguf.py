"""The GGUF header reader on real files and on broken ones."""

import pytest

from memagent_cli.errors import MemagentError
from memagent_cli.model.gguf import read_gguf


def test_reads_metadata_and_tensors_of_a_model(models):
    info = read_gguf(models["random"])
    assert info.architecture == "qwen2" and info.name == "tiny-qwen2-test"
    assert info.arch_get("block_count") == 2 and info.has_weights
    assert len(info.get("tokenizer.ggml.tokens")) == len(info.get("tokenizer.ggml.token_type"))
    assert isinstance(info.get("tokenizer.ggml.tokens")[0], bytes)
    assert "<|im_start|>" in info.chat_template
    assert {t.name for t in info.tensors} >= {"token_embd.weight", "output.weight", "blk.1.ffn_down.weight"}


def test_vocabulary_only_file_has_no_tensors(qwen2_vocab):
    info = read_gguf(qwen2_vocab)
    assert not info.has_weights and len(info.get("tokenizer.ggml.merges")) > 150_000


@pytest.mark.parametrize("cut", [30, 2000, -100])
def test_truncated_files_are_refused_in_one_line(models, tmp_path, cut):
    data = models["random"].read_bytes()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(data[:cut] if cut > 0 else data[: len(data) // 40])
    with pytest.raises(MemagentError, match="truncated or damaged GGUF"):
        read_gguf(broken)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "not a GGUF model file"),
        (b"PK\x03\x04" + b"\0" * 100, "not a GGUF model file"),
    ],
)
def test_other_files_are_refused(tmp_path, content, message):
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(MemagentError, match=message):
        read_gguf(path)
    with pytest.raises(MemagentError, match="not found"):
        read_gguf(tmp_path / "missing.gguf")
    with pytest.raises(MemagentError, match="directory"):
        read_gguf(tmp_path)
