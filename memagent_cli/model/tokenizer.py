"""Tokenizers built from a GGUF vocabulary: counting, chunking, prompt ids, decoding.

Chunks are slices of the model's own token ids, so counting must be exact, and a
multi-million-token document must tokenize in seconds. For byte-level BPE vocabularies
(Qwen2, Llama 3) we build a tiktoken Encoding from the GGUF at run time: the same ids as
llama.cpp, ~10x faster, no download. Anything else (SentencePiece, an unknown
pre-tokenizer) falls back to llama.cpp's own tokenizer on a vocabulary-only load.

Decoding never goes through llama-cpp-python's `detokenize`: it drops tokens longer than
32 bytes (abetlen/llama-cpp-python#2362); both tokenizers here decode from full tables.

Document text is encoded with control tokens disabled: a document containing the text
"<|im_end|>" must not end the model's turn.

Text is put in the normal form the model's own (Hugging Face) tokenizer applies before tokenizing:
NFC for Qwen's vocabularies, whose tokenizer.json has `"normalizer": {"type": "NFC"}`, so
"Cafe" + U+0301 gets the ids of "Café" that the model was trained on. A GGUF keeps no normalizer and
llama.cpp applies none; which vocabularies normalize is told from `tokenizer.ggml.pre`.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Iterable, Literal, Protocol, Sequence

from ..errors import MemagentError
from .gguf import TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_USER_DEFINED, GGUFInfo

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from llama_cpp import Llama

# Pre-tokenizer patterns, as llama.cpp applies them for each `tokenizer.ggml.pre`.
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_PATTERNS = {"qwen2": _QWEN2, "llama3": _LLAMA3, "llama-bpe": _LLAMA3, "smaug-bpe": _LLAMA3}

# The `tokenizer.ggml.pre` names llama.cpp's converter gives Qwen's byte-level BPE vocabularies, whose
# tokenizer.json normalizes to NFC: "qwen2" (Qwen1.5 to Qwen2.5, Qwen3; so MemAgent's, QwenLong-L1.5's
# and InfMem's models) and "qwen35" (Qwen3.5). Other vocabularies' text is tokenized as it is.
NFC_PRE_TOKENIZERS = frozenset({"qwen2", "qwen35"})

NormalForm = Literal["NFC"]


def normal_form(info: GGUFInfo) -> NormalForm | None:
    """The Unicode normal form the model's own tokenizer puts text in before tokenizing, or None."""
    if info.get("tokenizer.ggml.model") == "gpt2" and info.get("tokenizer.ggml.pre", "default") in NFC_PRE_TOKENIZERS:
        return "NFC"
    return None


class ByteLengths(Protocol):
    """Decoded byte lengths of ids, looked up by an array of ids: a numpy array indexed by id
    (the local tokenizers), or a table filled on demand (a served model's)."""

    def __getitem__(self, ids: npt.NDArray[np.int64], /) -> npt.NDArray[np.int64]: ...


class Tokenizer(Protocol):
    """What the rest of memagent needs from a tokenizer. Ids are the model's ids.

    The attributes are read-only here (properties), so an implementation may hold a narrower type.
    The local tokenizers also have `normal_form` and `normalize` (see `normalizer`)."""

    @property
    def name(self) -> str: ...

    @property
    def controls(self) -> dict[str, int]:
        """Control tokens (<|im_start|>, ...): their text -> id."""

    @property
    def byte_lengths(self) -> ByteLengths:
        """Decoded byte length of every id, to place tokens without decoding."""

    @property
    def unsplittable(self) -> re.Pattern[str] | None:
        """Text encoded as one token wherever it appears ([PAD151646]); never cut inside."""

    def encode(self, text: str) -> list[int]:
        """Plain text to ids, normalized first as the model's tokenizer does; control tokens are
        never recognised in it."""

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """Ids to raw bytes; control tokens decode to nothing."""


def normalizer(tokenizer: Tokenizer) -> Callable[[str], str] | None:
    """How the tokenizer normalizes text before encoding it (its `normalize`), or None where it takes
    text as it is. Only the local tokenizers have a normal form: a served model's tokenizer has none
    here, so the attribute is not part of the protocol."""
    if getattr(tokenizer, "normal_form", None) is None:
        return None
    normalize: Callable[[str], str] = getattr(tokenizer, "normalize")
    return normalize


def decode(tokenizer: Tokenizer, ids: Iterable[int]) -> str:
    # A slice of byte-level ids can cut a character in two; "replace" is what the
    # reference's decode does with such a slice, so chunks read exactly as they did there.
    return tokenizer.decode_bytes(ids).decode("utf-8", errors="replace")


class StreamDecoder:
    """Turns generated ids into text as they arrive, holding back a character whose
    bytes are split across tokens until it is whole."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_id: int) -> str:
        return self._utf8.decode(self._tokenizer.decode_bytes((token_id,)))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: GGUF stores byte-level tokens in this form."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


@lru_cache(maxsize=1)
def _unicode_to_latin1() -> dict[int, int]:
    # A str.translate table: each bytes_to_unicode character -> the character whose code is
    # its byte, so `.translate(t).encode("latin-1")` maps a whole token in C speed.
    return {ord(ch): b for ch, b in byte_decoder().items()}


def _token_bytes(token: bytes) -> bytes:
    text = token.decode("utf-8")
    try:
        return text.translate(_unicode_to_latin1()).encode("latin-1")
    except UnicodeEncodeError:  # not byte-level form: take the text as it is
        return token


class TiktokenTokenizer:
    """Byte-level BPE from a GGUF vocabulary, run by tiktoken."""

    def __init__(self, info: GGUFInfo):
        import tiktoken

        tokens: list[bytes] = info.get("tokenizer.ggml.tokens") or []
        types: list[int] = info.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        merges: list[bytes] = info.get("tokenizer.ggml.merges") or []
        pre = info.get("tokenizer.ggml.pre", "default")
        self.name = f"tiktoken ({pre})"
        self.normal_form = normal_form(info)

        self._bytes: list[bytes] = []
        specials: dict[str, int] = {}
        user_defined: set[str] = set()
        self.controls: dict[str, int] = {}
        for i, (tok, ttype) in enumerate(zip(tokens, types)):
            if ttype in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
                text = tok.decode("utf-8", errors="replace")
                specials[text] = i
                if ttype == TOKEN_CONTROL:
                    self.controls[text] = i
                    self._bytes.append(b"")
                else:
                    user_defined.add(text)
                    self._bytes.append(tok)
            elif ttype in (TOKEN_NORMAL, TOKEN_BYTE):
                self._bytes.append(_token_bytes(tok))
            else:  # unknown, unused: never produced by encoding, never shown
                self._bytes.append(b"")
        import numpy as np  # deferred: a command refused before any model loads never pays for it

        self.byte_lengths = np.fromiter(map(len, self._bytes), dtype=np.int64, count=len(self._bytes))

        ranks = _ranks_from_merges(self._bytes, merges)
        plain = (TOKEN_NORMAL, TOKEN_BYTE)
        self._identity = all(ranks[b] == i for i, b in enumerate(self._bytes) if b in ranks and types[i] in plain)
        if not self._identity:
            by_bytes = {b: i for i, b in enumerate(self._bytes) if types[i] in (TOKEN_NORMAL, TOKEN_BYTE) and b}
            self._rank_to_id = {r: by_bytes.get(b, 0) for b, r in ranks.items()}
            rank_of_special = {}
            next_rank = max(ranks.values()) + 1
            for text, i in specials.items():
                rank_of_special[text] = next_rank
                self._rank_to_id[next_rank] = i
                next_rank += 1
            specials = rank_of_special
        self._user_defined = frozenset(user_defined)
        self.unsplittable = _alternation(user_defined)
        self._enc = tiktoken.Encoding(
            name=f"gguf-{pre}", pat_str=PRE_PATTERNS[pre], mergeable_ranks=ranks, special_tokens=specials
        )

    def normalize(self, text: str) -> str:
        """The text as the model's own tokenizer sees it."""
        return unicodedata.normalize(self.normal_form, text) if self.normal_form else text

    def _ids(self, ranks: list[int]) -> list[int]:
        return ranks if self._identity else [self._rank_to_id[r] for r in ranks]

    def encode(self, text: str) -> list[int]:
        # User-defined tokens are split out even in plain text: llama.cpp does the same.
        text = self.normalize(text)
        return self._ids(self._enc.encode(text, allowed_special=self._user_defined, disallowed_special=()))

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        table = self._bytes
        return b"".join([table[i] for i in ids])


def _ranks_from_merges(token_bytes: list[bytes], merges: list[bytes]) -> dict[bytes, int]:
    """BPE priority of every reachable token: the 256 single bytes, then each merge's
    result in merge order (256 + rank). Single bytes keep their own ids when the vocabulary
    puts them first (as Qwen2 does), so ranks and ids coincide and need no mapping.
    tiktoken merges by the rank of the concatenation, which equals the merge order wherever
    a token has a single producing merge (true of real vocabularies)."""
    byte_ids = {b: i for i, b in enumerate(token_bytes[:256]) if len(b) == 1}
    if len(byte_ids) == 256:
        ranks = dict(byte_ids)
    else:
        ranks = {bytes([b]): b for b in range(256)}
    translate = _unicode_to_latin1()
    rank = 256
    for merge in merges:
        try:
            key = merge.replace(b" ", b"", 1).decode("utf-8").translate(translate).encode("latin-1")
        except (UnicodeDecodeError, UnicodeEncodeError):
            continue
        if key not in ranks:
            ranks[key] = rank
            rank += 1
    return ranks


class LlamaTokenizer:
    """llama.cpp's own tokenizer (vocabulary-only load) for vocabularies tiktoken cannot run."""

    def __init__(self, info: GGUFInfo):
        import ctypes

        from .runtime import llama_cpp_module

        llama_cpp = llama_cpp_module()
        self.name = f"llama.cpp ({info.get('tokenizer.ggml.model', '?')})"
        self.normal_form = normal_form(info)
        self._llm: Llama = llama_cpp.Llama(model_path=str(info.path), vocab_only=True, verbose=False)
        vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        types = info.get("tokenizer.ggml.token_type") or []
        tokens = info.get("tokenizer.ggml.tokens") or []
        self.controls = {tokens[i].decode("utf-8", errors="replace"): i for i, t in enumerate(types) if t == TOKEN_CONTROL}
        self.unsplittable = _alternation(
            tokens[i].decode("utf-8", errors="replace") for i, t in enumerate(types) if t == TOKEN_USER_DEFINED
        )
        buf = ctypes.create_string_buffer(256)
        self._bytes: list[bytes] = []
        for i in range(self._llm.n_vocab()):
            n = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, False)
            self._bytes.append(buf.raw[: max(n, 0)])
        import numpy as np  # deferred: a command refused before any model loads never pays for it

        self.byte_lengths = np.fromiter(map(len, self._bytes), dtype=np.int64, count=len(self._bytes))

    def normalize(self, text: str) -> str:
        """The text as the model's own tokenizer sees it."""
        return unicodedata.normalize(self.normal_form, text) if self.normal_form else text

    def encode(self, text: str) -> list[int]:
        return self._llm.tokenize(self.normalize(text).encode("utf-8"), add_bos=False, special=False)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join([self._bytes[i] for i in ids])


def _alternation(texts: Iterable[str]) -> re.Pattern[str] | None:
    texts = sorted({t for t in texts if t}, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, texts))) if texts else None


def load_tokenizer(info: GGUFInfo) -> Tokenizer:
    """The fastest exact tokenizer for this GGUF's vocabulary."""
    if not info.get("tokenizer.ggml.tokens"):
        raise MemagentError(f"{info.path} has no vocabulary.", "Use a GGUF converted with its tokenizer.")
    if info.get("tokenizer.ggml.model") == "gpt2" and info.get("tokenizer.ggml.pre", "default") in PRE_PATTERNS:
        return TiktokenTokenizer(info)
    return LlamaTokenizer(info)


def encode_template(tokenizer: Tokenizer, pieces: Sequence[tuple[str, bool]]) -> list[int]:
    """Ids for a rendered chat prompt given as (text, trusted) pieces.

    Control tokens are recognised only in trusted pieces (the chat template's own text),
    never in the user message. Plain text is tokenized in maximal runs between control
    tokens, so the ids equal those of tokenizing the whole prompt at once.
    """
    controls = tokenizer.controls
    alternatives = "|".join(re.escape(t) for t in sorted(controls, key=len, reverse=True))
    splitter = re.compile(f"({alternatives})") if controls else None
    ids: list[int] = []
    run: list[str] = []
    for text, trusted in pieces:
        parts = splitter.split(text) if trusted and splitter else [text]
        for k, part in enumerate(parts):
            if k % 2:  # odd parts of re.split with one group are the separators
                if run:
                    ids += tokenizer.encode("".join(run))
                    run = []
                ids.append(controls[part])
            elif part:
                run.append(part)
    if run:
        ids += tokenizer.encode("".join(run))
    return ids
