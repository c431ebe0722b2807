"""Tiny random-weight Qwen2 GGUF models for tests.

The files written here load in real llama.cpp (through llama-cpp-python) and
generate text, so tests can exercise the real engine without downloading a
model.  They are a few hundred KB and take well under a second to write.

What a model holds:

* a byte-level BPE vocabulary laid out like Qwen2's: ids 0..255 are the 256
  single bytes in GPT-2 ``bytes_to_unicode`` order, then one token per merge
  with ``id == 256 + merge rank``, then the control tokens ``<|endoftext|>``,
  ``<|im_start|>`` and ``<|im_end|>``.  The merges are learned by running BPE
  training on a small built-in corpus pre-tokenized with Qwen2's regex, plus a
  chain of ``=`` merges so that :data:`LONG_TOKEN` (40 bytes) is one token.
  Token strings and merges are stored in GPT-2's bytes-to-unicode rendering,
  as real Qwen2 GGUFs store them, so ``tiktoken`` built from the vocabulary
  (rank = id) reproduces llama.cpp's ids.
* random weights (fixed numpy seed) with hidden dimension 0 reserved as a
  "bias channel": every token embedding holds a constant in dim 0, no layer
  reads or writes dim 0, and ``output.weight[:, 0]`` therefore acts as a
  per-token logit offset (see ``bias`` in :func:`write_tiny_qwen2`).

Run ``python tests/tinymodel.py OUT.gguf`` to write a default model by hand.
"""

from __future__ import annotations

import collections
import sys
from dataclasses import dataclass
from pathlib import Path

try:  # tiktoken depends on `regex`, so it is normally present
    import regex as _re

    _HAVE_REGEX = True
except ImportError:  # pragma: no cover - approximation without \p classes
    import re as _re

    _HAVE_REGEX = False

__all__ = [
    "QWEN25_CHAT_TEMPLATE",
    "LONG_TOKEN",
    "QWEN2_PRETOKENIZE_PATTERN",
    "DEFAULT_CORPUS",
    "TinyVocab",
    "build_vocab",
    "add_qwen2_hparams",
    "bytes_to_unicode",
    "write_qwen2_gguf",
    "write_tiny_qwen2",
]

# ---------------------------------------------------------------------------
# Constants

# Qwen2.5-Instruct's chat template, byte for byte as shipped in the
# "chat_template" field of Qwen2.5's tokenizer_config.json (trailing newline
# included).  Raw string: the backslash sequences belong to the Jinja source.
QWEN25_CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# One vocabulary token longer than 32 bytes: llama-cpp-python's detokenize
# returns b"" for such tokens (32-byte buffer), so the project must decode ids
# itself.
LONG_TOKEN = "=" * 40

# Qwen2's pre-tokenizer regex (the same one llama.cpp uses for pre = "qwen2").
QWEN2_PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

if _HAVE_REGEX:
    _PRETOKENIZER = _re.compile(QWEN2_PRETOKENIZE_PATTERN)
else:  # pragma: no cover - \p{L} ~ [^\W\d_], \p{N} ~ \d
    _PRETOKENIZER = _re.compile(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\w]?[^\W\d_]+|\d"
        r"| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    )

CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Default training text: prose, dialogue, code, numbers, white-space runs,
# and some non-ASCII (accents, typographic punctuation, CJK, emoji).
DEFAULT_CORPUS = """\
The quick brown fox jumps over the lazy dog. The dog did not move; it was far
too lazy, and the afternoon was warm. Somewhere in the distance a train
whistled, and the fox stopped to listen before it ran on into the forest.

Memory is what remains when the details are gone. A good memory keeps the
names, the numbers and the reasons, and it forgets the rest. When you read a
long document in pieces, you must decide after every piece what is worth
keeping: the question tells you what matters, and the memory tells you what
you already know.

"Where were you on the night of the 14th?" asked the detective.
"At home," she said. "I was reading. I read every night until eleven."
"And you heard nothing?" "Nothing at all. The house was quiet."
He wrote it down in his notebook, closed it, and looked out of the window.

In 1969, Apollo 11 landed on the Moon. Neil Armstrong and Buzz Aldrin spent
about 21 hours on the surface, while Michael Collins stayed in orbit. The
mission returned 21.5 kg of lunar samples to Earth on July 24, 1969.
Population figures: Paris 2,102,650; Berlin 3,878,100; Madrid 3,332,035.
Prices went up by 3.5% in March, 4.25% in April and 0.75% in May.
Call 555-0199 before 9:30 or after 17:45. Order #4711 ships in 3-5 days.
The special magic number for the blue door is 7391820.
The special magic number for the red house is 4401263.

def fibonacci(n: int) -> list[int]:
    \"\"\"Return the first n Fibonacci numbers.\"\"\"
    result = [0, 1]
    while len(result) < n:
        result.append(result[-1] + result[-2])
    return result[:n]


class Memory:
    def __init__(self, text: str = "No previous memory") -> None:
        self.text = text
        self.history = []

    def update(self, new_text: str) -> None:
        if new_text == self.text:
            return
        self.history.append(self.text)
        self.text = new_text.strip()

for i in range(10):
    if i % 2 == 0:
        print(f"{i} is even")
    else:
        print(f"{i} is odd")

    x = {"key": "value", "count": 42, "items": [1, 2, 3]}
    total = sum(x["items"]) * 2 + 7

SELECT name, age FROM users WHERE age >= 18 ORDER BY name;
git commit -m "Fix the tokenizer" && git push origin main

Tabs\tand\tspaces:    four spaces,        eight spaces,\t\ttwo tabs.
Lines end here.   
Blank lines follow.



Then the text goes on after three empty lines.

<problem>
What is the capital of France?
</problem>

<memory>
The answer so far: Paris is the capital and the largest city of France.
</memory>

Café, naïve, résumé, façade, jalapeño, Straße, Zürich, São Paulo, Ångström.
Les élèves étudient à l'école ; ils préfèrent les mathématiques et l'été.
Über den Wolken muss die Freiheit wohl grenzenlos sein, sagte er — und lächelte.
“Quoted text” and ‘single quotes’… with an ellipsis, a dash – and a bullet •.
中文文本：我们读一份很长的文件。日本語のテキスト。한국어 텍스트.
Emoji: 🙂 🚀 ✅ — temperatures of 21°C, π ≈ 3.14159, and 5 × 3 = 15.

Once upon a time there was a small town by the sea. The people of the town
were fishermen, and every morning they went out in their boats before the sun
came up. They came back in the evening with their nets full of fish, and the
whole town came down to the harbour to meet them. The children ran along the
water and the old men sat on the wall and talked about the weather, the
prices of fish, and the boats that had not come back.

Question: Which city hosted the 2012 Summer Olympics?
Answer: London hosted the 2012 Summer Olympics, its third time as host city.
Question: How many legs does a spider have? Answer: A spider has eight legs.
Therefore, the answer is \\boxed{42}.
"""


# ---------------------------------------------------------------------------
# Byte-level BPE


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character table.

    The dict's insertion order (printable bytes first) is also the id order
    of the 256 single-byte tokens in Qwen2's vocabulary.
    """
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_BYTE_TO_UNICODE = bytes_to_unicode()


def _render(token: bytes) -> str:
    """Bytes-to-unicode rendering of a normal token, as stored in the GGUF."""
    return "".join(_BYTE_TO_UNICODE[b] for b in token)


def _pretokenize(text: str) -> list[str]:
    return _PRETOKENIZER.findall(text)


@dataclass
class TinyVocab:
    tokens: list[bytes]  # raw bytes of every token, id order (specials as UTF-8 text)
    token_types: list[int]  # llama.cpp token types: 1 normal, 3 control, 4 user-defined (an added token)
    merges: list[tuple[bytes, bytes]]  # BPE merges in rank order (raw bytes)
    special: dict[str, int]  # "<|endoftext|>", "<|im_start|>", "<|im_end|>" -> id

    def gguf_tokens(self) -> list[str]:
        """Token strings as written to ``tokenizer.ggml.tokens``: control and added tokens as their
        text (llama.cpp reads them so), the others in bytes-to-unicode rendering."""
        return [tok.decode("utf-8") if ttype in (3, 4) else _render(tok) for tok, ttype in zip(self.tokens, self.token_types)]

    def gguf_merges(self) -> list[str]:
        """Merges as written to ``tokenizer.ggml.merges`` ("A B")."""
        return [f"{_render(a)} {_render(b)}" for a, b in self.merges]

    def token_id(self, token: bytes | str) -> int:
        """Id of a token given by its bytes (or text)."""
        if isinstance(token, str):
            token = token.encode("utf-8")
        return self.tokens.index(token)


def _train_bpe(corpus: str, n_merges: int) -> list[tuple[bytes, bytes]]:
    """Plain BPE training on pre-tokens (merges never cross pre-token
    boundaries).  Ties are broken by the smaller (left, right) byte pair, so
    the result is deterministic.  Stops early when no pair occurs twice."""
    word_counts = collections.Counter(w.encode("utf-8") for w in _pretokenize(corpus))
    words = [[bytes([b]) for b in w] for w in word_counts]
    counts = list(word_counts.values())
    known = {bytes([b]) for b in range(256)}
    merges: list[tuple[bytes, bytes]] = []
    while len(merges) < n_merges:
        pairs: collections.Counter[tuple[bytes, bytes]] = collections.Counter()
        for syms, cnt in zip(words, counts):
            for pair in zip(syms, syms[1:]):
                pairs[pair] += cnt
        # A pair whose concatenation is already a token would give a second
        # merge for one token (ids could no longer be 256 + rank): skip it.
        candidates = [(-c, p) for p, c in pairs.items() if c >= 2 and p[0] + p[1] not in known]
        if not candidates:
            break
        _, (a, b) = min(candidates)
        merged = a + b
        merges.append((a, b))
        known.add(merged)
        for syms in words:
            i = 0
            while i < len(syms) - 1:
                if syms[i] == a and syms[i + 1] == b:
                    syms[i : i + 2] = [merged]
                i += 1
    return merges


def _bpe_apply(word: bytes, merges: list[tuple[bytes, bytes]]) -> list[bytes]:
    """Merge-list BPE of one pre-token as llama.cpp does it: repeatedly merge
    the adjacent pair with the lowest merge rank (leftmost on ties)."""
    ranks = {pair: r for r, pair in enumerate(merges)}
    syms = [bytes([b]) for b in word]
    while len(syms) > 1:
        best = min(
            ((ranks[p], i) for i, p in enumerate(zip(syms, syms[1:])) if p in ranks),
            default=None,
        )
        if best is None:
            break
        i = best[1]
        syms[i : i + 2] = [syms[i] + syms[i + 1]]
    return syms


def _long_token_merges(merges: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Extra merges so that LONG_TOKEN ("=" * 40) is built as one token:
    1+1 -> 2, 2+2 -> 4, 4+4 -> 8, 8+8 -> 16, 16+16 -> 32, 32+8 -> 40.
    Applied in rank order to 40 "=" these give 20x"==", 10x"====", then
    5x"="*8 -> 2x"="*16 + "="*8 -> "="*32 + "="*8 -> "="*40."""
    existing = {a + b for a, b in merges}
    extra = []
    for left, right in ((1, 1), (2, 2), (4, 4), (8, 8), (16, 16), (32, 8)):
        a, b = b"=" * left, b"=" * right
        if a + b in existing:
            continue
        extra.append((a, b))
        existing.add(a + b)
    return extra


def build_vocab(corpus: str | None = None, n_merges: int = 300) -> TinyVocab:
    """Train a byte-level BPE vocabulary (Qwen2 layout) on ``corpus``
    (default: :data:`DEFAULT_CORPUS`).

    ``n_merges`` merges are learned (fewer if the corpus runs out of pairs
    that occur at least twice); up to six ``=`` merges for :data:`LONG_TOKEN`
    follow, then the three control tokens.
    """
    if corpus is None:
        corpus = DEFAULT_CORPUS
    if len(_pretokenize(LONG_TOKEN)) != 1:  # pragma: no cover - sanity
        raise AssertionError("LONG_TOKEN must be a single pre-token")
    merges = _train_bpe(corpus, n_merges)
    merges += _long_token_merges(merges)
    if _bpe_apply(LONG_TOKEN.encode(), merges) != [LONG_TOKEN.encode()]:
        raise ValueError("this corpus's '=' merges keep LONG_TOKEN from being one token")

    tokens = [bytes([b]) for b in _BYTE_TO_UNICODE]  # GPT-2 order
    tokens += [a + b for a, b in merges]  # id = 256 + rank
    if len(set(tokens)) != len(tokens):  # pragma: no cover - guarded above
        raise AssertionError("duplicate token in BPE vocabulary")
    token_types = [1] * len(tokens)
    special = {}
    for name in CONTROL_TOKENS:
        special[name] = len(tokens)
        tokens.append(name.encode("utf-8"))
        token_types.append(3)
    return TinyVocab(tokens=tokens, token_types=token_types, merges=merges, special=special)


_DEFAULT_VOCAB: TinyVocab | None = None


def _default_vocab() -> TinyVocab:
    global _DEFAULT_VOCAB
    if _DEFAULT_VOCAB is None:
        _DEFAULT_VOCAB = build_vocab()
    return _DEFAULT_VOCAB


# ---------------------------------------------------------------------------
# Weights and GGUF


# Dim 0 of the residual stream is the bias channel.  Every embedding holds
# _BIAS_CHANNEL there, the attention/FFN norms give it weight 0 (layers never
# read it), attn_output/ffn_down rows 0 are 0 (layers never write it), and
# output_norm scales it by 1/sqrt(n_embd), so after the final RMSNorm it holds
#     x0 = _BIAS_CHANNEL / sqrt(_BIAS_CHANNEL**2 + |rest of hidden|**2)  (0 < x0 <= 1)
# and output.weight[t, 0] = bias[t] adds bias[t] * x0 to token t's logit:
# exactly bias[t] for a constant model (rest = 0); for the default random
# model x0 measured 0.92..0.99 (|rest| ~ 1..2), while the random logits have
# std ~2.4 and max - mean <= ~7, so +-30 decides the choice.
_BIAS_CHANNEL = 5.0
_DEFAULT_CONTROL_BIAS = -30.0


def _make_tensors(
    *,
    n_vocab: int,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
    seed: int,
    bias: dict[int, float],
    constant: bool,
):
    import numpy as np

    if n_embd % n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    if n_head % n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    head_dim = n_embd // n_head
    n_embd_kv = head_dim * n_head_kv
    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    # Numpy shapes are (out_features, in_features) like PyTorch/HF; GGUF
    # stores them reversed (ne0 = in_features), as llama.cpp expects.
    t: dict[str, "np.ndarray"] = {}
    if constant:
        embd = np.zeros((n_vocab, n_embd), dtype=np.float32)
    else:
        embd = normal((n_vocab, n_embd), 1.0 / np.sqrt(n_embd - 1))
    embd[:, 0] = _BIAS_CHANNEL
    t["token_embd.weight"] = embd

    norm = np.ones(n_embd, dtype=np.float32)
    norm[0] = 0.0  # layers never read the bias channel
    for i in range(n_layer):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = norm.copy()
        t[p + "attn_q.weight"] = normal((n_embd, n_embd), 0.25)
        t[p + "attn_q.bias"] = normal((n_embd,), 0.1)
        t[p + "attn_k.weight"] = normal((n_embd_kv, n_embd), 0.25)
        t[p + "attn_k.bias"] = normal((n_embd_kv,), 0.1)
        t[p + "attn_v.weight"] = normal((n_embd_kv, n_embd), 0.25)
        t[p + "attn_v.bias"] = normal((n_embd_kv,), 0.1)
        attn_out = normal((n_embd, n_embd), 0.03)
        t[p + "ffn_norm.weight"] = norm.copy()
        t[p + "ffn_gate.weight"] = normal((n_ff, n_embd), 0.25)
        t[p + "ffn_up.weight"] = normal((n_ff, n_embd), 0.25)
        ffn_down = normal((n_embd, n_ff), 0.04)
        if constant:  # every position keeps its (identical) embedding
            attn_out[:] = 0.0
            ffn_down[:] = 0.0
        attn_out[0, :] = 0.0  # layers never write the bias channel
        ffn_down[0, :] = 0.0
        t[p + "attn_output.weight"] = attn_out
        t[p + "ffn_down.weight"] = ffn_down

    out_norm = np.ones(n_embd, dtype=np.float32)
    out_norm[0] = 1.0 / np.sqrt(n_embd)
    t["output_norm.weight"] = out_norm
    output = normal((n_vocab, n_embd), 0.6)
    output[:, 0] = 0.0
    for tok, value in bias.items():
        if not 0 <= tok < n_vocab:
            raise ValueError(f"bias for token id {tok} outside the vocabulary")
        output[tok, 0] = value
    t["output.weight"] = output
    return t


def write_tiny_qwen2(
    path,
    *,
    vocab: TinyVocab | None = None,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    context_length: int = 32768,
    seed: int = 0,
    chat_template: str | None = QWEN25_CHAT_TEMPLATE,
    bias: dict[int, float] | None = None,
    constant: bool = False,
    pre: str = "qwen2",
    arch: str = "qwen2",
) -> Path:
    """Write a tiny random qwen2 GGUF (F32) to ``path`` and return the path.

    ``arch``: the architecture it is written as; "llama" gives the same layers under llama's name
    (llama.cpp takes the q/k/v biases as optional there), a model that is not Qwen.

    ``bias``: {token id: value}; adds about ``value`` to that token's logit at
    every position (exactly ``value`` when ``constant``; 0.9-1.0x for a
    random model).  -30 / +30 makes a token never / always chosen.  ``None``
    means -30 on the three control tokens, so a random model runs to
    max_tokens.  A given ``bias`` replaces that default entirely.

    ``constant``: all token embeddings are identical and no layer writes to
    the residual stream, so every position has the same hidden state and the
    logits equal ``bias`` (0 for other tokens): greedy output is the
    highest-biased token, forever.

    ``chat_template``: stored as ``tokenizer.chat_template``; ``None`` omits
    the key.
    """
    if vocab is None:
        vocab = _default_vocab()
    if bias is None:
        bias = {vocab.special[name]: _DEFAULT_CONTROL_BIAS for name in CONTROL_TOKENS}
    tensors = _make_tensors(
        n_vocab=len(vocab.tokens),
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        seed=seed,
        bias=bias,
        constant=constant,
    )
    return write_qwen2_gguf(
        path,
        vocab=vocab,
        tensors=tensors,
        n_head=n_head,
        n_head_kv=n_head_kv,
        context_length=context_length,
        chat_template=chat_template,
        pre=pre,
        arch=arch,
    )


def add_qwen2_hparams(w, n_embd, n_layer, n_ff, n_head, n_head_kv, context_length=32768, rope_freq_base=1e6) -> None:
    """The hyper-parameters llama.cpp requires of a qwen2 GGUF, on a gguf.GGUFWriter."""
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(rope_freq_base)


def write_qwen2_gguf(
    path,
    *,
    vocab: TinyVocab,
    tensors: dict,
    n_head: int,
    n_head_kv: int,
    context_length: int = 32768,
    rope_freq_base: float = 1e6,
    chat_template: str | None = QWEN25_CHAT_TEMPLATE,
    pre: str = "qwen2",
    name: str = "tiny-qwen2-test",
    arch: str = "qwen2",
) -> Path:
    """Write a qwen2 GGUF (F32) from ``tensors`` ({GGUF tensor name: numpy array shaped
    (out_features, in_features) as in PyTorch}); the other dimensions are read off them."""
    import gguf

    n_embd = tensors["token_embd.weight"].shape[1]
    n_layer = sum(1 for key in tensors if key.endswith(".attn_norm.weight"))
    n_ff = tensors["blk.0.ffn_gate.weight"].shape[0]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)  # writes general.architecture; the keys below are under it
    w.add_name(name)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    add_qwen2_hparams(w, n_embd, n_layer, n_ff, n_head, n_head_kv, context_length, rope_freq_base)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)  # another llama.cpp pre-tokenizer name tests the tokenizer fallback
    w.add_token_list(vocab.gguf_tokens())
    w.add_token_types(vocab.token_types)
    w.add_token_merges(vocab.gguf_merges())
    w.add_eos_token_id(vocab.special["<|im_end|>"])
    w.add_pad_token_id(vocab.special["<|endoftext|>"])
    w.add_bos_token_id(vocab.special["<|endoftext|>"])
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    for tensor_name, array in tensors.items():
        w.add_tensor(tensor_name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Write a tiny random qwen2 GGUF for tests.")
    ap.add_argument("path", help="output .gguf file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--constant", action="store_true", help="same hidden state at every position")
    ap.add_argument(
        "--bias",
        action="append",
        default=[],
        metavar="ID=VALUE",
        help="logit bias for a token id (repeatable); replaces the default -30 on control tokens",
    )
    ap.add_argument("--no-chat-template", action="store_true", help="omit tokenizer.chat_template")
    args = ap.parse_args(argv)
    bias = None
    if args.bias:
        bias = {int(k): float(v) for k, v in (item.split("=", 1) for item in args.bias)}
    vocab = _default_vocab()
    out = write_tiny_qwen2(
        args.path,
        vocab=vocab,
        seed=args.seed,
        constant=args.constant,
        bias=bias,
        chat_template=None if args.no_chat_template else QWEN25_CHAT_TEMPLATE,
    )
    print(
        f"wrote {out} ({out.stat().st_size} bytes): {len(vocab.tokens)} tokens, "
        f"specials {vocab.special}, LONG_TOKEN id {vocab.token_id(LONG_TOKEN)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
