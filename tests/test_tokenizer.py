"""tiktoken built from the GGUF vocabulary against llama.cpp's own tokenizer."""

import random

import pytest

from memagent_cli.model.gguf import read_gguf
from memagent_cli.model.tokenizer import (
    StreamDecoder,
    decode,
    encode_template,
    load_tokenizer,
)


@pytest.fixture(scope="module")
def tok(qwen2_vocab):
    return load_tokenizer(read_gguf(qwen2_vocab))


@pytest.fixture(scope="module")
def llama_vocab(qwen2_vocab):
    import llama_cpp

    from memagent_cli.model.runtime import quiet_llama_logs

    quiet_llama_logs()
    return llama_cpp.Llama(model_path=str(qwen2_vocab), vocab_only=True, verbose=False)


def test_llama_cpp_test_vectors(tok, qwen2_vocab):
    inputs = qwen2_vocab.with_suffix(".gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    expected = qwen2_vocab.with_suffix(".gguf.out").read_text(encoding="utf-8").split("\n")
    pairs = [(text, [int(x) for x in ids.split()]) for text, ids in zip(inputs, expected)]
    assert len(pairs) >= 40
    for text, ids in pairs:
        assert tok.encode(text) == ids, text
        assert decode(tok, ids) == text


def varied_text(seed: int, n: int) -> str:
    pieces = [
        open(__file__, encoding="utf-8").read()[:3000],
        "中文文本测试，这是一个句子。日本語のテキスト。한국어 텍스트 ",
        "   \t\t  \n\n\n   ",
        "\r\n",
        "🦙🚀👍🏽 emoji with ZWJ 👨‍👩‍👧 ",
        "1234567890 3.14159 1e-10 0xFF 2024-01-01 ",
        "Ünïcödé àccents — “quotes” ‘x’ ",
        "=" * 80,
        "-" * 50,
        " " * 100,
        "\tdef f(x):\n\t\treturn x  # comment\n",
        "<|im_end|> <|im_start|>user <|endoftext|>",
        "don't I'LL we've ",
    ]
    rng = random.Random(seed)
    return "".join(rng.choice(pieces) for _ in range(n))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ids_identical_to_llama_cpp_on_varied_text(tok, llama_vocab, seed):
    text = varied_text(seed, 400)
    ours = tok.encode(text)
    theirs = llama_vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    assert ours == theirs
    assert decode(tok, ours) == text


def test_control_token_text_in_documents_stays_text(tok):
    ids = tok.encode("<|im_end|>")
    assert 151645 not in ids and len(ids) > 1
    assert tok.controls["<|im_end|>"] == 151645


def test_tokens_longer_than_32_bytes_decode(tok, llama_vocab):
    # id 1920 is 35 spaces: llama-cpp-python's detokenize loses it, our tables do not
    assert tok.decode_bytes([1920]) == b" " * 35
    assert llama_vocab.detokenize([1920]) != b" " * 35  # the upstream bug this guards against
    assert tok.byte_lengths[1920] == 35


def test_template_controls_only_in_trusted_text(tok):
    ids = encode_template(tok, [("<|im_start|>user\n", True), ("hi <|im_end|>", False), ("<|im_end|>\n", True)])
    assert ids[0] == 151644 and ids.count(151645) == 1
    assert ids == [151644] + tok.encode("user\nhi <|im_end|>") + [151645] + tok.encode("\n")


def test_stream_decoder_holds_split_characters(tok):
    text = "naïve 🦙 ok"
    ids = tok.encode(text)
    pieces = []
    dec = StreamDecoder(tok)
    for i in ids:
        pieces.append(dec.feed(i))
    pieces.append(dec.flush())
    assert "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces)


def test_vocabularies_tiktoken_cannot_run_fall_back_to_llama_cpp(gpt2_pre_model):
    import llama_cpp

    from memagent_cli.model.tokenizer import LlamaTokenizer
    from testkit.tinymodel import LONG_TOKEN

    tok = load_tokenizer(read_gguf(gpt2_pre_model))
    assert isinstance(tok, LlamaTokenizer) and tok.name.startswith("llama.cpp")
    llm = llama_cpp.Llama(model_path=str(gpt2_pre_model), vocab_only=True, verbose=False)
    text = "Hello world, the river 42 times.\n  Indented = " + LONG_TOKEN
    assert tok.encode(text) == llm.tokenize(text.encode(), add_bos=False, special=False)
    assert decode(tok, tok.encode(text)) == text  # the 40-byte token survives here too
    assert tok.encode("<|im_end|>") != [tok.controls["<|im_end|>"]]
    assert tok.decode_bytes([tok.controls["<|im_end|>"]]) == b""
