"""The server's own tokenizer: the `Tokenizer` protocol over the tokenize/detokenize endpoints of
vLLM, llama-server and llama-cpp-python's server, for a served model when no GGUF of its
vocabulary is at hand (`--tokenizer`) to count and cut chunks with.

Its requests wait for the server as the engine's do, by the same http.Connection: `timeout`
seconds of silence at most per attempt (http.DEFAULT_TIMEOUT unless the caller says otherwise;
pass the run's --timeout), retried with backoff. A tokenize request can wait behind the replies a
busy server is generating, so it gets the same patience.

Few requests: chunking needs each token's byte length (`byte_lengths`) and each chunk's text
(`decode_bytes`), and asking the server for them token by token cost hundreds of requests for a
one-page PDF. Instead each token's bytes come with its id where the server can send them (vLLM's
`return_token_strs`, llama-server's `with_pieces`; what each answers is in `_Dialect.pieces`), and a
chunk whose tokens' bytes are all known is decoded here: they are joined, as the local tokenizers do.
Where the server cannot (llama-cpp-python's /extras/tokenize, or an older llama-server), the ids not
yet known are detokenized together in one request, a separator token between each two, and the
answer is split at the separators (`_joined_lengths`): exact, because those servers' detokenize is the
plain concatenation of each token's bytes. So chunking a document costs one tokenize request per
block of text (chunking.MIN_BLOCK_CHARS), and without pieces one detokenize per block more, two per
distinct token that is a fragment of a character (llama-cpp-python cannot decode those together)
and one per chunk that holds one.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from ...display import clip
from ...errors import MemagentError
from ..tokenizer import byte_decoder
from .http_engine import normalize_base_url, server_root
from .transport import Connection, Fault, post_json, with_retries

if TYPE_CHECKING:
    import httpx2


@dataclass(frozen=True)
class _Dialect:
    """How one kind of server spells tokenize and detokenize."""

    name: str
    tokenize_path: str
    detokenize_path: str
    text_key: str  # the detokenize answer's field holding the text
    pieces_flag: str | None  # the tokenize field that asks for each token's text with its id
    joins: bool  # detokenize answers the concatenation of each id's bytes, nothing more

    def tokenize_body(self, text: str, model: str | None, pieces: bool = False) -> dict[str, Any]:
        if self.name == "vLLM":
            body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        elif self.name == "llama-server":
            # parse_special false: document text saying "<|im_end|>" stays text, as the local tokenizers do.
            body = {"content": text, "add_special": False, "parse_special": False}
            model = None
        else:
            body = {"input": text}
        if pieces and self.pieces_flag:
            body[self.pieces_flag] = True
        if model:
            body["model"] = model
        return body

    def detokenize_body(self, ids: list[int], model: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"tokens": ids}
        if model and self.name != "llama-server":
            body["model"] = model
        return body

    def sent_pieces(self, answer: dict[str, Any]) -> bool:
        """Whether a tokenize answer to a body that asked for pieces has them (a server that does
        not know the flag ignores it)."""
        if self.name == "vLLM":
            return answer.get("token_strs") is not None
        tokens = answer.get("tokens") or []
        return not tokens or isinstance(tokens[0], dict)

    def pieces(self, answer: dict[str, Any], text: str) -> list[bytes] | None:
        """Each token's bytes from a tokenize answer to a body that asked for them, in the order of
        its ids; None where the answer has none (an older server ignores the flag) or they cannot be
        trusted to be the tokens' bytes.

        llama-server (tools/server, the /tokenize handler) answers with_pieces with
        `{"tokens": [{"id": 9707, "piece": "Hello"}, ...]}`, each piece common_token_to_piece's bytes,
        the very function its /detokenize joins: a string when they are valid UTF-8, else the list of
        the byte values (a token that is part of a character). Exact as they come.

        vLLM (entrypoints/openai/serving_tokenization.py) answers return_token_strs with
        `"token_strs": tokenizer.convert_ids_to_tokens(ids)`: the vocabulary's own strings, which
        for a byte-level BPE vocabulary (Qwen, Llama 3) write each byte as one character of GPT-2's
        bytes-to-unicode alphabet ("Ġworld" for b" world"). They are read that way only when the
        bytes so read join to the text the server tokenized (as given, or in NFC, which Qwen's
        tokenizer puts text in first); a vocabulary of another kind (SentencePiece's "▁world") fails
        that, and its tokens' lengths are asked for as before."""
        if self.name == "llama-server":
            tokens = answer.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, dict) and "piece" in t for t in tokens):
                return None
            found: list[bytes] = []
            for token in tokens:
                piece = token["piece"]
                if isinstance(piece, str):
                    found.append(piece.encode("utf-8", errors="surrogatepass"))
                elif isinstance(piece, list) and all(isinstance(b, int) and 0 <= b < 256 for b in piece):
                    found.append(bytes(piece))
                else:
                    return None
            return found
        if self.name == "vLLM":
            strs = answer.get("token_strs")
            if not isinstance(strs, list) or not all(isinstance(s, str) for s in strs):
                return None
            table = byte_decoder()
            try:
                read = [bytes([table[ch] for ch in s]) for s in strs]
            except KeyError:  # a character outside the byte-level alphabet: not that kind of vocabulary
                return None
            joined = b"".join(read)
            for form in (text, unicodedata.normalize("NFC", text)):
                if joined == form.encode("utf-8", errors="surrogatepass"):
                    return read
        return None


# Probed in this order. vLLM's body first: llama-server answers a body without "content" with no
# tokens (not an error), which the probe reads as "not this one"; vLLM answers llama-server's body
# with 400 (no "prompt"); only llama-cpp-python's server has /extras.
DIALECTS = (
    # vLLM's /detokenize is the Hugging Face tokenizer's decode, which may strip or clean up spaces
    # (SentencePiece's first "▁", clean_up_tokenization_spaces): not a plain join.
    _Dialect("vLLM", "/tokenize", "/detokenize", "prompt", "return_token_strs", joins=False),
    # llama-server's /detokenize joins common_token_to_piece of each id (tokens_to_str).
    _Dialect("llama-server", "/tokenize", "/detokenize", "content", "with_pieces", joins=True),
    # llama-cpp-python's Llama.detokenize joins llama_token_to_piece of each id (control tokens as
    # nothing, a piece over 32 bytes as nothing too, abetlen/llama-cpp-python#2362), then decodes the
    # whole strictly. One exception: ids that begin with the BOS lose a space after it, which only a
    # chunk that begins with the BOS's text in a document (read as the BOS there) could meet.
    _Dialect("llama-cpp-python", "/extras/tokenize", "/extras/detokenize", "text", None, joins=True),
)
_PROBE_TEXT = "Hello world"
# Characters tried, in turn, as the separator of a joined detokenize: one token that decodes to one
# character that no other token's text holds (checked on every answer: the split must give one part
# per id). Control characters first: no real text token contains them.
_SEPARATORS = ("\x00", "\x1f", "\x7f", "\n")
_JOINED_MAX = 4096  # ids detokenized in one request at most
_DECODE_FAILED_AT = re.compile(r"can't decode bytes? (?:0x[0-9a-f]+ )?in position (\d+)")
_ALONE = 3  # a group of this many ids or fewer that cannot be joined is asked for one by one


class _ByteLengths:
    """`byte_lengths` for a tokenizer whose vocabulary we do not hold: indexed like the numpy array
    the local tokenizers have (`byte_lengths[np.asarray(ids)]`), filled as lengths are learnt
    (`learn`) and, for ids still unknown, by asking the server, so no vocabulary-wide download is
    needed."""

    def __init__(self, fetch: Callable[[list[int]], list[int]]):
        self._fetch = fetch
        self._table = np.full(0, -1, dtype=np.int64)
        self._lock = threading.Lock()

    def learn(self, ids: Sequence[int], lengths: Sequence[int]) -> None:
        if not ids:
            return
        index = np.asarray(ids, dtype=np.int64)
        with self._lock:
            self._grow(int(index.max()))
            self._table[index] = np.asarray(lengths, dtype=np.int64)

    def _grow(self, top: int) -> None:
        if top >= len(self._table):
            grown = np.full(max(top + 1, 2 * len(self._table)), -1, dtype=np.int64)
            grown[: len(self._table)] = self._table
            self._table = grown

    def __getitem__(self, index: npt.ArrayLike) -> Any:
        ids = np.asarray(index, dtype=np.int64)
        if ids.size:
            if int(ids.min()) < 0:
                raise IndexError("token ids are never negative")
            with self._lock:
                self._grow(int(ids.max()))
                missing = np.unique(ids[self._table[ids] < 0])
            if missing.size:
                wanted = [int(i) for i in missing]
                self.learn(wanted, self._fetch(wanted))
        found = self._table[ids]
        return int(found) if found.ndim == 0 else found


class RemoteTokenizer:
    """The `Tokenizer` protocol through a server's tokenize/detokenize endpoints.

    `controls` is empty and `unsplittable` None: the servers expose neither their control tokens nor
    their user-defined ones. Neither is needed to cut chunks: documents are encoded without control
    tokens, and a user-defined token that spans a block cut only moves a chunk boundary by a token.
    `byte_lengths` of a token that is part of a character (a byte-level BPE fragment) is its bytes'
    where the server sends them (vLLM's token_strs, llama-server's pieces), else that of the
    replacement character the server decodes it to; they only place tokens among sources.

    vLLM's and llama-cpp-python's tokenize endpoints read control-token text in a document
    ("<|im_end|>") as the control token, with no switch to turn that off (llama-server's
    parse_special is set false). Those servers read the rendered prompt the same way, so the chunk
    counts still match what the served model sees.
    """

    def __init__(self, client: httpx2.Client, base_url: str, dialect: _Dialect, connection: Connection):
        self._client = client
        self.base_url = normalize_base_url(base_url)
        self.root = server_root(base_url)
        self.dialect = dialect
        self.connection = connection
        self.name = f"{dialect.name} tokenizer at {self.root}"
        self.controls: dict[str, int] = {}
        self.unsplittable = None
        self.byte_lengths = _ByteLengths(self._lengths)
        self._prefix: list[int] = []  # ids the server adds to every text (a BOS it will not leave out)
        self._known: dict[int, bytes] = {}  # each id's bytes, where the server said them exactly
        self._ask_pieces = dialect.pieces_flag is not None  # until a server shows it ignores the flag
        self._separator: tuple[int, str] | None = None  # (id, its character), once found
        self._sought = False  # whether a separator was looked for
        self._lock = threading.Lock()

    def close(self) -> None:
        self._client.close()

    def _post(self, url: str, body: dict[str, Any]) -> Any:
        """One request, asked again as the connection says; raises Fault."""
        return with_retries(lambda: post_json(self._client, self.base_url, url, body, self.connection.timeout), self.connection)

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.root + path
        try:
            answer = self._post(url, body)
        except Fault as fault:
            raise fault.error() from None
        if not isinstance(answer, dict):
            raise MemagentError(
                f"The server at {self.base_url} answered {url} with {clip(str(answer), 80)}",
                "Pass --tokenizer with the model's GGUF instead.",
            )
        return answer

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        pieces = self._ask_pieces
        answer = self._call(self.dialect.tokenize_path, self.dialect.tokenize_body(text, self.connection.model, pieces))
        ids = [int(t["id"]) if isinstance(t, dict) else int(t) for t in answer.get("tokens") or []]
        found = None
        if pieces:
            if self.dialect.sent_pieces(answer):
                found = self.dialect.pieces(answer, text)
            else:
                self._ask_pieces = False  # a server that ignores the flag: stop asking
        if found is not None and len(found) != len(ids):
            found = None
        if self._prefix and ids[: len(self._prefix)] == self._prefix:
            if found is not None:
                found = found[len(self._prefix) :]
            ids = ids[len(self._prefix) :]
        if found is not None:
            self._learn(ids, found)
        return ids

    def _learn(self, ids: list[int], pieces: list[bytes]) -> None:
        """Keeps what the server said each id's bytes are."""
        with self._lock:
            self._known.update(zip(ids, pieces))
        self.byte_lengths.learn(ids, [len(p) for p in pieces])

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        id_list = [int(i) for i in ids]
        if not id_list:
            return b""
        known = self._known
        if all(i in known for i in id_list):
            # Every token's bytes are known: joined, as the local tokenizers do. The server's detokenize
            # would give the same, but for a chunk cut inside a character, whose broken end it writes
            # as U+FFFD (and vLLM's tokenizer may clean up spaces where a local one does not).
            return b"".join([known[i] for i in id_list])
        return self._decode(id_list).encode("utf-8")

    def _detokenize(self, ids: list[int]) -> str | None:
        """The server's text for `ids`; None when it cannot decode them (llama-cpp-python, ids that
        begin or end inside a character)."""
        return self._detokenize_at(ids)[0]

    def _detokenize_at(self, ids: list[int]) -> tuple[str | None, int | None]:
        """The server's text for `ids`, or None and the byte of their bytes at which the server's
        UTF-8 decode failed, where its error says (llama-cpp-python passes on Python's
        "'utf-8' codec can't decode byte 0xe4 in position 12: ...")."""
        url = self.root + self.dialect.detokenize_path
        body = self.dialect.detokenize_body(ids, self.connection.model)
        try:
            answer = self._post(url, body)
        except Fault as fault:
            if fault.undecodable:
                where = _DECODE_FAILED_AT.search(fault.reason)
                return None, int(where.group(1)) if where else None
            raise fault.error() from None
        text = answer.get(self.dialect.text_key) if isinstance(answer, dict) else None
        if not isinstance(text, str):
            raise MemagentError(
                f"The server at {self.base_url} answered {url} without its text",
                "Pass --tokenizer with the model's GGUF instead.",
            )
        return text, None

    def _decode(self, ids: list[int]) -> str:
        text = self._detokenize(ids)
        if text is not None:
            return text
        # A slice of a document can only be broken at its ends (a chunk cut inside a character, up
        # to 3 ids of it on each side): drop the fewest end ids that make the rest decodable, and
        # write each dropped end as one replacement character, as a lenient UTF-8 decode would.
        n = len(ids)
        for dropped in range(1, 7):
            for head in range(max(0, dropped - 3), min(dropped, 3) + 1):
                tail = dropped - head
                if head + tail >= n:
                    continue
                text = self._detokenize(ids[head : n - tail])
                if text is not None:
                    return "\ufffd" * bool(head) + text + "\ufffd" * bool(tail)
        if n == 1:
            return "\ufffd"
        # Broken inside too (ids that are no slice of a text): decode the halves apart.
        return self._decode(ids[: n // 2]) + self._decode(ids[n // 2 :])

    def _lengths(self, ids: list[int]) -> list[int]:
        """The byte lengths of ids the tokenize answers did not give: joined where the server's
        detokenize joins, else one id per request (a decode cannot be split back into tokens), a
        few at a time."""
        separator = self._find_separator() if self.dialect.joins and len(ids) > 1 else None
        if separator is None:
            return self._single_lengths(ids)
        mark, char = separator
        lengths = {mark: len(char.encode())}  # the separator's own text would split its part in two
        others = [token for token in ids if token != mark]
        for start in range(0, len(others), _JOINED_MAX):
            part = others[start : start + _JOINED_MAX]
            lengths.update(zip(part, self._joined_lengths(part, separator)))
        return [lengths[token] for token in ids]

    def _single_lengths(self, ids: list[int]) -> list[int]:
        if len(ids) == 1:
            return [self._single_length(ids[0])]
        with ThreadPoolExecutor(max_workers=min(8, len(ids))) as pool:
            return list(pool.map(self._single_length, ids))

    def _single_length(self, token: int) -> int:
        """One id's byte length as its own detokenize gives it: that of a replacement character
        where the server cannot decode it alone."""
        text = self._decode([token])
        if self.dialect.joins and "\ufffd" not in text:
            self._keep([token], [text])
        return len(text.encode("utf-8"))

    def _keep(self, ids: list[int], texts: list[str]) -> None:
        """Keeps each id's text as a joining server gave it alone, so chunks of them decode here."""
        with self._lock:
            self._known.update((token, text.encode("utf-8")) for token, text in zip(ids, texts))

    def _joined_lengths(self, ids: list[int], separator: tuple[int, str]) -> list[int]:
        """The byte lengths of `ids` from detokenizing them together, the separator between each two:
        the server's text splits at the separator into each id's own text. That is exact when it
        splits into one part per id: a token holding the separator's character would add a part, a
        server's replacement of invalid UTF-8 that swallowed a separator would lose one. A part with a
        replacement character in it (llama-server's, for a token that is not whole UTF-8 alone) is
        asked for alone.

        llama-cpp-python cannot decode them together when one of them is not whole UTF-8 alone (a
        byte-level BPE fragment of a character): its answer is an HTTP 500 saying at which byte its
        UTF-8 decode failed. Asked again with two separators between each two ids, the decode fails
        in the same token, as many bytes further as there are ids before it: which id that is follows,
        two requests per such id, and the ids before it are whole. Such an id's length is that of the
        replacement character its own detokenize would be written as. Where the answer says no byte,
        each half is asked again, and a few ids one by one."""
        lengths: dict[int, int] = {}
        whole: list[int] = []  # ids seen to decode alone, not yet in an answer
        rest = ids
        while rest:
            if len(rest) <= _ALONE:
                lengths.update(zip(rest, self._single_lengths(rest)))
                break
            text, failed_at = self._joined(rest, separator, 1)
            if text is not None:
                lengths.update(zip(rest, self._split_lengths(rest, text, separator)))
                break
            again_at = self._joined(rest, separator, 2)[1] if failed_at is not None else None
            k = again_at - failed_at if failed_at is not None and again_at is not None else -1
            if not 0 <= k < len(rest):
                lengths.update(zip(rest, self._halves(rest, separator)))
                break
            whole += rest[:k]
            lengths[rest[k]] = len("\ufffd".encode())
            rest = rest[k + 1 :]
        if whole:
            lengths.update(zip(whole, self._joined_lengths(whole, separator)))
        return [lengths[token] for token in ids]

    def _joined(self, ids: list[int], separator: tuple[int, str], copies: int) -> tuple[str | None, int | None]:
        """Detokenizes `ids` with `copies` separators between each two: the text, or None and the byte
        at which the server's decode failed (None where it did not say)."""
        mark = separator[0]
        joined: list[int] = []
        for token in ids:
            joined += (token, *(mark,) * copies)
        return self._detokenize_at(joined[:-copies])

    def _split_lengths(self, ids: list[int], text: str, separator: tuple[int, str]) -> list[int]:
        """Each id's length from the text of `ids` joined by one separator each (see _joined_lengths)."""
        parts = text.split(separator[1])
        if len(parts) != len(ids):
            return self._halves(ids, separator)
        whole = [k for k, part in enumerate(parts) if "\ufffd" not in part]
        self._keep([ids[k] for k in whole], [parts[k] for k in whole])
        lengths = [len(part.encode("utf-8")) for part in parts]
        broken = [k for k in range(len(ids)) if "\ufffd" in parts[k]]
        if broken:
            for k, length in zip(broken, self._single_lengths([ids[k] for k in broken])):
                lengths[k] = length
        return lengths

    def _halves(self, ids: list[int], separator: tuple[int, str]) -> list[int]:
        half = len(ids) // 2
        return self._joined_lengths(ids[:half], separator) + self._joined_lengths(ids[half:], separator)

    def _find_separator(self) -> tuple[int, str] | None:
        """A token that the server decodes to one character alone (asked once per tokenizer)."""
        with self._lock:
            if self._sought:
                return self._separator
        found: tuple[int, str] | None = None
        for char in _SEPARATORS:
            for token in self.encode(char):
                if self._detokenize([token]) == char:
                    found = (token, char)
                    break
            if found is not None:
                break
        with self._lock:
            self._separator, self._sought = found, True
        return found


def remote_tokenizer(base_url: str, connection: Connection = Connection()) -> RemoteTokenizer:
    """The tokenizer of the model behind `base_url`, through whichever tokenize endpoints the server
    has, asked as `connection` says (its `timeout`: the longest silence from the server, in seconds,
    before a request is asked again)."""
    client = connection.client()
    base = normalize_base_url(base_url)
    root = server_root(base_url)
    tried: list[str] = []
    for dialect in DIALECTS:
        url = root + dialect.tokenize_path

        def probe(dialect: _Dialect = dialect, url: str = url) -> Any:
            return post_json(client, base, url, dialect.tokenize_body(_PROBE_TEXT, connection.model), connection.timeout)

        try:
            answer = with_retries(probe, connection)
        except Fault as fault:
            if fault.status is None:  # not reachable at all: no other dialect will do better
                client.close()
                raise fault.error() from None
            tried.append(f"{dialect.name} {dialect.tokenize_path}: HTTP {fault.status}")
            continue
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not tokens or not all(isinstance(t, int) for t in tokens):
            tried.append(f"{dialect.name}: no tokens")
            continue
        tokenizer = RemoteTokenizer(client, base, dialect, connection)
        if dialect.name == "llama-cpp-python":
            # Its /extras/tokenize adds the model's BOS when the GGUF asks for one, with no switch to
            # turn it off: find what it adds to an empty text and take it off every encode.
            tokenizer._prefix = _added_ids(tokenizer)
        try:
            # The server's own detokenize, even where the pieces would do: a chunk with a token whose
            # bytes are not known is decoded there.
            round_trip = tokenizer._decode(tokenizer.encode(_PROBE_TEXT)) == _PROBE_TEXT
        except MemagentError:  # a tokenize endpoint without its detokenize twin
            round_trip = False
        if not round_trip:
            tried.append(f"{dialect.name}: tokenize and detokenize do not round-trip")
            continue
        return tokenizer
    client.close()
    raise MemagentError(
        f"The server at {base} has no tokenize endpoint memagent can use ({'; '.join(tried)})",
        "Pass --tokenizer with the model's GGUF: memagent counts and cuts chunks with it.",
    )


def _added_ids(tokenizer: RemoteTokenizer) -> list[int]:
    """The ids a server puts before every text: its answer for the empty text."""
    try:
        answer = tokenizer._call(tokenizer.dialect.tokenize_path, tokenizer.dialect.tokenize_body("", tokenizer.connection.model))
    except MemagentError:
        return []
    return [int(t) for t in answer.get("tokens") or [] if isinstance(t, int)]
