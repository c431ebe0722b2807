"""The tiny GGUF models of tinymodel.py load, tokenize and generate in real
llama.cpp (llama-cpp-python)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")
llama_cpp = pytest.importorskip("llama_cpp")

from testkit.tinymodel import (  # noqa: E402  (after the skip above)
    DEFAULT_CORPUS,
    LONG_TOKEN,
    QWEN2_PRETOKENIZE_PATTERN,
    QWEN25_CHAT_TEMPLATE,
    build_vocab,
    bytes_to_unicode,
    write_tiny_qwen2,
)

CONTROL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def load(path, **kw) -> "llama_cpp.Llama":
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=2, verbose=False, **kw)


def greedy_ids(llm, prompt_ids, n):
    """First n greedily generated ids (no stop on end-of-generation)."""
    out = []
    for tok in llm.generate(prompt_ids, temp=0.0, top_k=1):
        out.append(tok)
        if len(out) == n:
            break
    return out


def is_eog(llm, tok) -> bool:
    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok))


@pytest.fixture(scope="module")
def vocab():
    return build_vocab()


@pytest.fixture(scope="module")
def ids(vocab):
    return {**vocab.special, "LONG": vocab.tokens.index(LONG_TOKEN.encode())}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tinymodels")


@pytest.fixture(scope="module")
def default_path(model_dir, vocab):
    return write_tiny_qwen2(model_dir / "default.gguf", vocab=vocab)


@pytest.fixture(scope="module")
def llm(default_path):
    m = load(default_path)
    yield m
    m.close()


# --- vocabulary -----------------------------------------------------------


def test_vocab_layout(vocab, ids):
    byte_order = list(bytes_to_unicode())
    assert vocab.tokens[:256] == [bytes([b]) for b in byte_order]
    assert vocab.tokens[0] == b"!"  # GPT-2 order, as in Qwen2
    n_normal = 256 + len(vocab.merges)
    for rank, (a, b) in enumerate(vocab.merges):
        assert vocab.tokens[256 + rank] == a + b
    assert len(set(vocab.tokens)) == len(vocab.tokens)
    assert vocab.token_types == [1] * n_normal + [3, 3, 3]
    assert [vocab.tokens[vocab.special[n]] for n in CONTROL] == [n.encode() for n in CONTROL]
    assert list(vocab.special.values()) == [n_normal, n_normal + 1, n_normal + 2]
    assert len(LONG_TOKEN.encode()) > 32 and ids["LONG"] < n_normal
    assert len(vocab.merges) >= 300  # 300 learned + the "=" chain


def test_merges_stay_inside_pretokens(vocab):
    regex = pytest.importorskip("regex")
    pieces = [p.encode() for p in regex.findall(QWEN2_PRETOKENIZE_PATTERN, DEFAULT_CORPUS)]
    chain = {b"=" * n for n in (2, 4, 8, 16, 32, 40)}
    for a, b in vocab.merges:
        if a + b not in chain:
            assert any(a + b in p for p in pieces), (a, b)
    # real merges were learned, not just the byte alphabet
    assert b" the" in vocab.tokens and b"\n\n" in vocab.tokens


def test_gguf_metadata(default_path, vocab, ids):
    r = gguf.GGUFReader(default_path)
    f = {name: field.contents() for name, field in r.fields.items() if not name.startswith("GGUF.")}
    expected = {
        "general.architecture": "qwen2",
        "general.name": "tiny-qwen2-test",
        "qwen2.context_length": 32768,
        "qwen2.embedding_length": 64,
        "qwen2.block_count": 2,
        "qwen2.feed_forward_length": 128,
        "qwen2.attention.head_count": 4,
        "qwen2.attention.head_count_kv": 2,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.eos_token_id": ids["<|im_end|>"],
        "tokenizer.ggml.padding_token_id": ids["<|endoftext|>"],
        "tokenizer.ggml.bos_token_id": ids["<|endoftext|>"],
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": QWEN25_CHAT_TEMPLATE,
    }
    for key, value in expected.items():
        assert f[key] == value, key
    assert f["qwen2.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    assert f["qwen2.rope.freq_base"] == pytest.approx(1e6)
    # tokens/merges in GPT-2 bytes-to-unicode form; control tokens as text
    b2u = bytes_to_unicode()
    u2b = {c: b for b, c in b2u.items()}
    tokens = f["tokenizer.ggml.tokens"]
    assert tokens[ids["<|im_start|>"]] == "<|im_start|>"
    assert b"\n" in vocab.tokens and tokens[vocab.tokens.index(b"\n")] == "\u010a"  # "Ċ"
    assert tokens[vocab.tokens.index(b" the")] == "\u0120the"  # "Ġthe"
    normal = [bytes(u2b[c] for c in t) for t, ty in zip(tokens, f["tokenizer.ggml.token_type"]) if ty == 1]
    assert normal == vocab.tokens[: len(normal)]
    merges = f["tokenizer.ggml.merges"]
    assert len(merges) == len(vocab.merges)
    a, b = merges[0].split(" ")
    assert bytes(u2b[c] for c in a) + bytes(u2b[c] for c in b) == vocab.tokens[256]
    # tensors: untied output, q/k/v biases, numpy (out, in) orientation
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in r.tensors}  # GGML order
    n_vocab = len(vocab.tokens)
    assert shapes["token_embd.weight"] == (64, n_vocab)
    assert shapes["output.weight"] == (64, n_vocab)
    assert shapes["blk.0.attn_k.weight"] == (64, 32)
    assert shapes["blk.1.ffn_down.weight"] == (128, 64)
    assert shapes["blk.1.attn_v.bias"] == (32,)
    assert len(shapes) == 3 + 2 * 12
    assert default_path.stat().st_size < 1_000_000


# --- llama.cpp: loading and tokenizing ---------------------------------------


def test_loads_with_expected_vocab(llm, vocab, ids):
    assert llm.n_vocab() == len(vocab.tokens)
    assert llm.token_eos() == ids["<|im_end|>"]
    assert llm.metadata["tokenizer.chat_template"] == QWEN25_CHAT_TEMPLATE
    assert is_eog(llm, ids["<|im_end|>"]) and is_eog(llm, ids["<|endoftext|>"])
    assert not is_eog(llm, ids["<|im_start|>"])


def test_tokenize_roundtrip(llm, vocab):
    text = b"Hello world"
    toks = llm.tokenize(text, add_bos=False, special=False)
    assert 1 < len(toks) < len(text)  # merges applied
    assert llm.detokenize(toks) == text
    assert b"".join(vocab.tokens[t] for t in toks) == text
    para = DEFAULT_CORPUS[:600].encode()
    toks = llm.tokenize(para, add_bos=False, special=False)
    assert len(toks) < len(para) / 2
    assert b"".join(vocab.tokens[t] for t in toks) == para


def test_newline_and_non_ascii_survive(llm, vocab):
    text = "line one\n\n  indented — café 中文 🙂\n".encode()
    toks = llm.tokenize(text, add_bos=False, special=False)
    assert b"".join(vocab.tokens[t] for t in toks) == text


def test_long_token_is_one_id(llm, ids):
    assert llm.tokenize(LONG_TOKEN.encode(), add_bos=False, special=False) == [ids["LONG"]]
    # llama.cpp itself knows the full 40 bytes (a large enough buffer) ...
    buf = (llama_cpp.ctypes.c_char * 64)()
    n = llama_cpp.llama_token_to_piece(llm._model.vocab, ids["LONG"], buf, 64, 0, False)
    assert buf[:n] == LONG_TOKEN.encode()


def test_control_tokens(llm, ids):
    assert llm.tokenize(b"<|im_start|>", add_bos=False, special=True) == [ids["<|im_start|>"]]
    assert llm.tokenize(b"<|im_end|>", add_bos=False, special=True) == [ids["<|im_end|>"]]
    # without special=True, marker text in a document is ordinary text
    plain = llm.tokenize(b"<|im_start|>", add_bos=False, special=False)
    assert ids["<|im_start|>"] not in plain and len(plain) > 1


def test_tiktoken_with_rank_equal_id_matches_llama_cpp(llm, vocab):
    tiktoken = pytest.importorskip("tiktoken")
    enc = tiktoken.Encoding(
        name="tiny-qwen2",
        pat_str=QWEN2_PRETOKENIZE_PATTERN,
        mergeable_ranks={t: i for i, (t, ty) in enumerate(zip(vocab.tokens, vocab.token_types)) if ty == 1},
        special_tokens=vocab.special,
    )
    rng = random.Random(0)
    alphabet = list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;:'\"!?()[]{}=-_+*/\\\n\t  éüß—“”…中文🙂")
    words = DEFAULT_CORPUS.split()
    texts = DEFAULT_CORPUS.split("\n") + [DEFAULT_CORPUS, LONG_TOKEN, "=" * 100, " " * 50 + "x"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(300)]
    texts += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 20))) for _ in range(100)]
    for text in texts:
        assert enc.encode_ordinary(text) == llm.tokenize(text.encode(), add_bos=False, special=False), text


# --- llama.cpp: generation -----------------------------------------------------


def test_logits_match_numpy_reference(default_path):
    """The tensors mean what the writer intends: a plain numpy forward pass of
    Qwen2 over the GGUF's tensors reproduces llama.cpp's logits."""
    r = gguf.GGUFReader(default_path)
    T = {t.name: np.asarray(t.data, dtype=np.float64) for t in r.tensors}
    n_embd, n_head, n_kv, hd, eps = 64, 4, 2, 16, 1e-6
    m = load(default_path, logits_all=True)
    toks = m.tokenize(b"The quick brown fox jumps over the lazy dog.", add_bos=False, special=False)
    m.eval(toks)
    got = np.array(m.scores[: len(toks)])
    m.close()

    n = len(toks)
    ang = np.arange(n)[:, None] * 1e6 ** (-np.arange(0, hd, 2) / hd)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x):  # NEOX style (rotate halves), as llama.cpp uses for qwen2
        a, b = x[..., : hd // 2], x[..., hd // 2 :]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    h = T["token_embd.weight"][toks]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(2):
        p = f"blk.{i}."
        x = rms(h, T[p + "attn_norm.weight"])
        q = rope((x @ T[p + "attn_q.weight"].T + T[p + "attn_q.bias"]).reshape(n, n_head, hd))
        k = rope((x @ T[p + "attn_k.weight"].T + T[p + "attn_k.bias"]).reshape(n, n_kv, hd))
        v = (x @ T[p + "attn_v.weight"].T + T[p + "attn_v.bias"]).reshape(n, n_kv, hd)
        k, v = np.repeat(k, n_head // n_kv, 1), np.repeat(v, n_head // n_kv, 1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        h = h + np.einsum("hqk,khd->qhd", s, v).reshape(n, n_embd) @ T[p + "attn_output.weight"].T
        x = rms(h, T[p + "ffn_norm.weight"])
        g, u = x @ T[p + "ffn_gate.weight"].T, x @ T[p + "ffn_up.weight"].T
        h = h + (g / (1 + np.exp(-g)) * u) @ T[p + "ffn_down.weight"].T
    hn = rms(h, T["output_norm.weight"])
    want = hn @ T["output.weight"].T
    assert np.abs(got - want).max() < 0.02  # llama.cpp keeps K/V in f16
    assert (got.argmax(1) == want.argmax(1)).all()
    assert 1.0 < want.std(1).mean() < 5.0  # varied, not degenerate
    assert (hn[:, 0] > 0.85).all()  # bias channel: offset ~ bias value


def test_random_model_runs_to_max_tokens(llm, ids):
    prompt = llm.tokenize(b"The quick brown fox", add_bos=False, special=False)
    out = llm.create_completion(prompt, max_tokens=20, temperature=0.0, top_k=1)
    # Not exactly 20: llama-cpp-python skips its max_tokens check while the
    # text ends in an incomplete UTF-8 sequence (this model emits a lone
    # 0xF5 byte as token 19), so it may run up to 3 tokens past max_tokens.
    assert 20 <= out["usage"]["completion_tokens"] <= 23
    assert out["choices"][0]["finish_reason"] == "length"
    gen = greedy_ids(llm, prompt, 30)
    assert len(gen) == 30
    assert not any(is_eog(llm, t) for t in gen)
    assert not set(gen) & {ids[n] for n in CONTROL}
    assert len(set(gen)) >= 5  # not one token repeated


def test_seeds_give_different_models(model_dir, vocab, llm):
    other = load(write_tiny_qwen2(model_dir / "seed1.gguf", vocab=vocab, seed=1))
    prompt = llm.tokenize(b"The quick brown fox", add_bos=False, special=False)
    a, b = greedy_ids(llm, prompt, 20), greedy_ids(other, prompt, 20)
    other.close()
    assert len(a) == len(b) == 20
    assert a != b
    assert greedy_ids(llm, prompt, 20) == a  # greedy is deterministic


def test_random_model_positive_bias_always_wins(model_dir, vocab):
    target = vocab.tokens.index(b" the")
    m = load(write_tiny_qwen2(model_dir / "the.gguf", vocab=vocab, bias={target: 30.0}))
    prompt = m.tokenize(DEFAULT_CORPUS[:200].encode(), add_bos=False, special=False)
    assert greedy_ids(m, prompt, 12) == [target] * 12
    assert greedy_ids(m, prompt[:1], 4) == [target] * 4  # even after a 1-token prompt
    m.close()


def test_constant_model_emits_long_token_forever(model_dir, vocab, ids):
    path = write_tiny_qwen2(model_dir / "long.gguf", vocab=vocab, constant=True, bias={ids["LONG"]: 30.0})
    m = load(path)
    for prompt in (b"Hello", b"Some other prompt\nwith lines"):
        toks = m.tokenize(prompt, add_bos=False, special=False)
        assert greedy_ids(m, toks, 25) == [ids["LONG"]] * 25
    out = m.create_completion(m.tokenize(b"Hi", add_bos=False, special=False), max_tokens=5, temperature=0.0)
    assert out["usage"]["completion_tokens"] == 5  # runs on (text itself may be lost: >32-byte token)
    m.close()


def test_constant_model_with_im_end_bias_stops_at_once(model_dir, vocab, ids):
    path = write_tiny_qwen2(model_dir / "stop.gguf", vocab=vocab, constant=True, bias={ids["<|im_end|>"]: 30.0})
    m = load(path)
    toks = m.tokenize(b"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_bos=False, special=True)
    first = greedy_ids(m, toks, 1)
    assert first == [ids["<|im_end|>"]] and is_eog(m, first[0])
    out = m.create_completion(toks, max_tokens=20, temperature=0.0)
    assert out["usage"]["completion_tokens"] == 0
    assert out["choices"][0]["text"] == "" and out["choices"][0]["finish_reason"] == "stop"
    m.close()


# --- chat template -------------------------------------------------------------


def test_no_chat_template_key_when_none(model_dir, vocab):
    path = write_tiny_qwen2(model_dir / "notemplate.gguf", vocab=vocab, chat_template=None)
    fields = gguf.GGUFReader(path).fields
    assert "tokenizer.chat_template" not in fields
    assert "tokenizer.ggml.tokens" in fields
    m = load(path)
    assert "tokenizer.chat_template" not in m.metadata
    m.close()


def _render(messages, **kw):
    pytest.importorskip("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(QWEN25_CHAT_TEMPLATE).render(messages=messages, **kw)


def test_qwen25_template_renders_exactly():
    prompt = "You are presented with a problem.\n\n<problem> \nWhat?\n</problem>\n\nUpdated memory:\n"
    got = _render([{"role": "user", "content": prompt}], add_generation_prompt=True)
    assert got == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    )
    got = _render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], add_generation_prompt=False)
    assert got == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
    assert "# Tools" in _render([{"role": "user", "content": "U"}], tools=[{"name": "f"}])


def test_rendered_prompt_tokenizes_with_control_tokens(llm, ids):
    text = _render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    toks = llm.tokenize(text.encode(), add_bos=False, special=True)
    assert toks[0] == ids["<|im_start|>"]
    assert toks.count(ids["<|im_start|>"]) == 3 and toks.count(ids["<|im_end|>"]) == 2


def test_cli_writes_a_model(tmp_path):
    from testkit import tinymodel

    out = tmp_path / "cli.gguf"
    res = subprocess.run(
        [sys.executable, tinymodel.__file__, str(out), "--seed", "3"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert "wrote" in res.stdout
    assert gguf.GGUFReader(out).fields["general.architecture"].contents() == "qwen2"
