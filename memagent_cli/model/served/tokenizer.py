"""The server's own tokenizer: the `Tokenizer` protocol over the tokenize/detokenize endpoints of
vLLM, llama-server and llama-cpp-python's server, for a served model when no GGUF of its
vocabulary is at hand (`--tokenizer`) to count and cut chunks with.

Its requests wait for the server as the engine's do, by the same http.Connection: `timeout`
seconds of silence at most per attempt (http.DEFAULT_TIMEOUT unless the caller says otherwise;
pass the run's --timeout), retried with backoff. A tokenize request can wait behind the replies a
busy server is generating, so it gets the same patience.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np
import numpy.typing as npt

from ...errors import MemagentError
from .engine import normalize_base_url, server_root
from .http import Connection, Fault, post_json, shorten, with_retries

if TYPE_CHECKING:
    import httpx2


@dataclass(frozen=True)
class _Dialect:
    """How one kind of server spells tokenize and detokenize."""

    name: str
    tokenize_path: str
    detokenize_path: str
    text_key: str  # the detokenize answer's field holding the text

    def tokenize_body(self, text: str, model: str | None) -> dict[str, Any]:
        if self.name == "vLLM":
            body: dict[str, Any] = {"prompt": text, "add_special_tokens": False}
        elif self.name == "llama-server":
            # parse_special false: document text saying "<|im_end|>" stays text, as the local tokenizers do.
            return {"content": text, "add_special": False, "parse_special": False}
        else:
            body = {"input": text}
        if model:
            body["model"] = model
        return body

    def detokenize_body(self, ids: list[int], model: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"tokens": ids}
        if model and self.name != "llama-server":
            body["model"] = model
        return body


# Probed in this order. vLLM's body first: llama-server answers a body without "content" with no
# tokens (not an error), which the probe reads as "not this one"; vLLM answers llama-server's body
# with 400 (no "prompt"); only llama-cpp-python's server has /extras.
DIALECTS = (
    _Dialect("vLLM", "/tokenize", "/detokenize", "prompt"),
    _Dialect("llama-server", "/tokenize", "/detokenize", "content"),
    _Dialect("llama-cpp-python", "/extras/tokenize", "/extras/detokenize", "text"),
)
_PROBE_TEXT = "Hello world"


class _ByteLengths:
    """`byte_lengths` for a tokenizer whose vocabulary we do not hold: indexed like the numpy array
    the local tokenizers have (`byte_lengths[np.asarray(ids)]`), filled on demand by asking the
    server for the ids not seen before, so no vocabulary-wide download is needed."""

    def __init__(self, fetch: Callable[[list[int]], list[int]]):
        self._fetch = fetch
        self._table = np.full(0, -1, dtype=np.int64)

    def __getitem__(self, index: npt.ArrayLike) -> Any:
        ids = np.asarray(index, dtype=np.int64)
        if ids.size:
            if int(ids.min()) < 0:
                raise IndexError("token ids are never negative")
            top = int(ids.max())
            if top >= len(self._table):
                grown = np.full(max(top + 1, 2 * len(self._table)), -1, dtype=np.int64)
                grown[: len(self._table)] = self._table
                self._table = grown
            missing = np.unique(ids[self._table[ids] < 0])
            if missing.size:
                self._table[missing] = self._fetch([int(i) for i in missing])
        found = self._table[ids]
        return int(found) if found.ndim == 0 else found


class RemoteTokenizer:
    """The `Tokenizer` protocol through a server's tokenize/detokenize endpoints.

    `controls` is empty and `unsplittable` None: the servers expose neither their control tokens nor
    their user-defined ones. Neither is needed to cut chunks: documents are encoded without control
    tokens, and a user-defined token that spans a block cut only moves a chunk boundary by a token.
    `byte_lengths` of a token that is part of a character (a byte-level BPE fragment) counts the
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
                f"The server at {self.base_url} answered {url} with {shorten(str(answer), 80)}",
                "Pass --tokenizer with the model's GGUF instead.",
            )
        return answer

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        answer = self._call(self.dialect.tokenize_path, self.dialect.tokenize_body(text, self.connection.model))
        ids = [int(t["id"]) if isinstance(t, dict) else int(t) for t in answer.get("tokens") or []]
        if self._prefix and ids[: len(self._prefix)] == self._prefix:
            ids = ids[len(self._prefix) :]
        return ids

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        id_list = [int(i) for i in ids]
        return self._decode(id_list).encode("utf-8") if id_list else b""

    def _detokenize(self, ids: list[int]) -> str | None:
        """The server's text for `ids`; None when it cannot decode them (llama-cpp-python, ids that
        begin or end inside a character)."""
        url = self.root + self.dialect.detokenize_path
        body = self.dialect.detokenize_body(ids, self.connection.model)
        try:
            answer = self._post(url, body)
        except Fault as fault:
            if fault.undecodable:
                return None
            raise fault.error() from None
        text = answer.get(self.dialect.text_key) if isinstance(answer, dict) else None
        if not isinstance(text, str):
            raise MemagentError(
                f"The server at {self.base_url} answered {url} without its text",
                "Pass --tokenizer with the model's GGUF instead.",
            )
        return text

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
        # One id per request (a joined decode cannot be split back into tokens), a few at a time.
        if len(ids) == 1:
            return [len(self._decode(ids).encode("utf-8"))]
        with ThreadPoolExecutor(max_workers=min(8, len(ids))) as pool:
            return list(pool.map(lambda i: len(self._decode([i]).encode("utf-8")), ids))


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
            round_trip = tokenizer.decode_bytes(tokenizer.encode(_PROBE_TEXT)) == _PROBE_TEXT.encode()
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
