"""The served engine (memagent_cli/model/served/http_engine.py), against real sockets on 127.0.0.1.

Two kinds of peer: llama-cpp-python's real OpenAI-compatible server running a tiny model (the
replies, the sampling body, the tokenizer endpoints), and small stdlib HTTP peers that misbehave on
purpose (fail, cut, stall, refuse) or speak another server's tokenizer dialect.
"""

from __future__ import annotations

import http.server
import json
import threading
import time

import numpy as np
import pytest
from fakeserver import FakeServer
from helpers import free_port, llama_server, words, write_clean_model

from memagent_cli.core.chunking import IngestStats, Piece, blocks, iter_chunks
from memagent_cli.errors import MemagentError
from memagent_cli.ingest.base import Source
from memagent_cli.model.chat_template import ChatFormat
from memagent_cli.model.engine import CompletionDone, Retrying, Sampling, TextDelta
from memagent_cli.model.gguf import read_gguf
from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
from memagent_cli.model.served.body import NEUTRAL_SAMPLING
from memagent_cli.model.served.http_engine import OpenAIEngine, count_margin, normalize_base_url
from memagent_cli.model.served.server_tokenizer import DIALECTS, remote_tokenizer
from memagent_cli.model.served.transport import DEFAULT_TIMEOUT, Connection, longest_wait
from memagent_cli.model.tokenizer import load_tokenizer

GREEDY = Sampling(temperature=0.0)
MESSAGE = "Problem: who wrote the letter?\nMemory: nothing yet."


# --- llama-cpp-python's server -------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_model(tmp_path_factory):
    return write_clean_model(tmp_path_factory.mktemp("served") / "clean.gguf")


@pytest.fixture(scope="module")
def local(clean_model):
    info = read_gguf(clean_model)
    return info, load_tokenizer(info)


@pytest.fixture(scope="module")
def server(clean_model, tmp_path_factory):
    """`python -m llama_cpp.server` on a free port; yields its base URL (…/v1)."""
    with llama_server(clean_model, tmp_path_factory.mktemp("server")) as base:
        yield base


@pytest.fixture(scope="module")
def embedded(local):
    info, tokenizer = local
    engine = LlamaEngine(
        info, tokenizer, ChatFormat.from_gguf(info), n_ctx=2048, options=EmbeddedOptions(gpu_layers=0, threads=1)
    )
    yield engine
    engine.close()


def _run(engine, message: str, max_tokens: int, sampling: Sampling = GREEDY) -> tuple[list, CompletionDone]:
    items = list(engine.complete(message, max_tokens, sampling))
    assert isinstance(items[-1], CompletionDone)
    return items, items[-1]


def test_greedy_reply_equals_the_embedded_engine(server, embedded, clean_model):
    import httpx2

    engine = OpenAIEngine(server)  # no model named: the one GET /v1/models lists
    try:
        assert engine.model == str(clean_model)
        assert engine.description == f"served: {clean_model} at {server}"
        items, served = _run(engine, MESSAGE, 32)
    finally:
        engine.close()
    _, local = _run(embedded, MESSAGE, 32)
    assert local.finish_reason == "length" and local.completion_tokens == 32
    assert served.text == local.text
    assert served.text == "".join(i.text for i in items if isinstance(i, TextDelta))
    # The neutral parameters are what makes them equal: with the server's own defaults (repeat
    # penalty 1.1, applied even at temperature 0) the greedy reply is another text.
    plain = httpx2.post(
        f"{server}/chat/completions",
        timeout=60,
        json={"messages": [{"role": "user", "content": MESSAGE}], "max_tokens": 32, "temperature": 0},
    )
    assert plain.status_code == 200
    assert plain.json()["choices"][0]["message"]["content"] != local.text


def test_usage_counts_and_length_finish(server, local):
    _, tokenizer = local
    counted = OpenAIEngine(server, count_tokens=lambda text: len(tokenizer.encode(text)))
    bare = OpenAIEngine(server)
    try:
        _, done = _run(counted, MESSAGE, 16)
        items, plain = _run(bare, MESSAGE, 16)
    finally:
        counted.close()
        bare.close()
    # llama-cpp-python sends no usage when streaming: the counts are ours.
    assert done.finish_reason == "length"
    assert done.max_tokens == 16
    assert done.prompt_tokens == len(tokenizer.encode(MESSAGE))
    assert done.completion_tokens == len(tokenizer.encode(done.text)) > 0
    assert done.cached_tokens == 0
    assert done.prompt_seconds > 0 and done.generate_seconds >= 0
    # Without a tokenizer a content delta stands for a token, and the prompt is unknown.
    assert plain.text == done.text
    assert plain.completion_tokens == sum(isinstance(i, TextDelta) for i in items) > 0
    assert plain.prompt_tokens == 0 and plain.finish_reason == "length"


def test_request_body_carries_the_neutral_sampling_values(server):
    lines: list[str] = []
    engine = OpenAIEngine(server, Connection(log=lines.append))
    try:
        _run(engine, MESSAGE, 4, Sampling(temperature=0.7, top_p=0.95, seed=1234))
    finally:
        engine.close()
    assert len(lines) == 1
    method, url, shown = lines[0].split(" ", 2)
    assert (method, url) == ("POST", f"{server}/chat/completions")
    body = json.loads(shown)
    assert MESSAGE not in lines[0]
    assert body["messages"] == f"<1 user message, {len(MESSAGE)} chars>"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["top_p"], body["seed"], body["max_tokens"]) == (0.7, 0.95, 1234, 4)
    assert body["top_k"] == 1 << 30 and body["min_p"] == 0.0
    assert body["repeat_penalty"] == 1.0 and body["repetition_penalty"] == 1.0
    assert body["presence_penalty"] == 0.0 and body["frequency_penalty"] == 0.0
    assert {k: body[k] for k in NEUTRAL_SAMPLING} == NEUTRAL_SAMPLING


def test_remote_tokenizer_matches_the_local_one(server, local):
    _, tokenizer = local
    remote = remote_tokenizer(server)
    try:
        assert remote.dialect.name == "llama-cpp-python"
        texts = [
            "Hello world",
            "The quick brown fox.\nJumps over 12 lazy dogs!",
            "  Document 1:\nreport.txt\n\tend  ",
            "café naïve 中文",
        ]
        for text in texts:
            ids = remote.encode(text)
            assert ids == tokenizer.encode(text)
            assert remote.decode_bytes(ids) == text.encode("utf-8")
        assert remote.encode("") == [] and remote.decode_bytes([]) == b""
        # byte_lengths, indexed as chunking.py indexes it, for tokens that are whole characters.
        ids = np.asarray(tokenizer.encode(texts[1] + texts[2]), dtype=np.int64)
        assert remote.byte_lengths[ids].tolist() == tokenizer.byte_lengths[ids].tolist()
        assert remote.byte_lengths[ids.reshape(1, -1)].shape == (1, len(ids))
        assert remote.byte_lengths[int(ids[0])] == int(tokenizer.byte_lengths[ids[0]])
        # A slice that ends inside a character (a chunk cut there): the server cannot decode it, the
        # broken end reads as a replacement character, as a lenient UTF-8 decode would give it.
        han = tokenizer.encode("中")
        assert len(han) > 1
        assert remote.decode_bytes(han) == "中".encode()
        head = tokenizer.encode("Hi ") + han + tokenizer.encode(" and ") + han[:1]
        assert remote.decode_bytes(head) == "Hi 中 and \ufffd".encode()
        tail = han[1:] + tokenizer.encode(" ok ") + han
        assert remote.decode_bytes(tail) == "\ufffd ok 中".encode()
        # A fragment alone decodes to a replacement character: its byte length is that of U+FFFD.
        assert remote.byte_lengths[np.asarray(han)].tolist() == [3] * len(han)
    finally:
        remote.close()


def test_remote_lengths_take_a_few_requests_of_llama_cpp_python(server, local):
    """The ids' lengths come from one detokenize of them all, split at a separator token; each
    fragment of a character among them (which the server cannot decode) costs two requests more,
    found at the byte where the real server's UTF-8 decode says it failed."""
    _, tokenizer = local
    remote = remote_tokenizer(server)
    sent: list[str] = []
    post = remote._post
    remote._post = lambda url, body: sent.append(url) or post(url, body)  # type: ignore[method-assign]
    try:
        text = "Hi 中 and café, naïve: “quoted” – ok. " + words(300, seed=4)
        ids = remote.encode(text)
        assert ids == tokenizer.encode(text)
        fragments = {i for i in set(ids) if not _whole(tokenizer.decode_bytes([i]))}
        assert len(fragments) >= 4
        expected = [3 if i in fragments else int(tokenizer.byte_lengths[i]) for i in ids]
        assert remote.byte_lengths[np.asarray(ids)].tolist() == expected
        detokenized = sent.count(f"{remote.root}/extras/detokenize")
        assert detokenized <= 1 + 2 * len(fragments) + 2 < len(set(ids)) // 3  # was one per distinct id
        # A slice of whole tokens is now decoded here, from what the server said; one that holds a
        # fragment is still the server's.
        before = len(sent)
        whole = [i for i in ids[-40:] if i not in fragments]
        assert remote.decode_bytes(whole) == tokenizer.decode_bytes(whole) and len(sent) == before
        assert remote.decode_bytes(tokenizer.encode("Hi 中 ok")) == "Hi 中 ok".encode() and len(sent) > before
    finally:
        remote.close()


def _whole(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --- scripted peers ------------------------------------------------------------------------


class Peer:
    """An HTTP peer on 127.0.0.1; `script(n, handler, body)` answers its n-th request (from 1)."""

    def __init__(self, script):
        self.script = script
        self.requests: list[tuple[str, str, dict, bytes]] = []  # method, path, headers, body
        self.release = threading.Event()  # ends a stalled answer
        peer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                peer.requests.append((self.command, self.path, dict(self.headers), body))
                peer.script(len(peer.requests), self, body)
                self.close_connection = True

            do_GET = do_POST = _any

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        # A short poll so shutdown() does not wait the default half second.
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def send_json(handler, status: int, payload, headers: dict | None = None) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.send_header("Connection", "close")  # the peer closes after each answer: no reuse of a dead connection
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)


def _event(payload) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


WHOLE_REPLY = [
    _chunk({"role": "assistant"}),
    _chunk({"reasoning_content": "Let me think."}),  # a reasoning parser's field: not the reply
    _chunk({"content": "Hello"}),
    _chunk({"content": " world"}),
    _chunk({}, "stop"),
    {
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {
            "prompt_tokens": 42,
            "completion_tokens": 2,
            "total_tokens": 44,
            "prompt_tokens_details": {"cached_tokens": 40},
        },
    },
    "[DONE]",
]
CUT_REPLY = [_chunk({"role": "assistant"}), _chunk({"content": "Hel"})]


def send_sse(handler, events, *, chunked: bool = False) -> None:
    """An event stream. Without `chunked` the body ends when the connection closes (so a stream
    without [DONE] ends cleanly, just early); with it, closing before the last chunk is a broken body."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    if chunked:
        handler.send_header("Transfer-Encoding", "chunked")
    else:
        handler.send_header("Connection", "close")
    handler.end_headers()
    for event in events:
        data = _event(event)
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
        handler.wfile.flush()


def _complete_until_it_fails(url: str) -> tuple[list, pytest.ExceptionInfo[MemagentError], float]:
    """One completion on an engine with a 0.5 s timeout and one retry, expected to end in an
    error: the items it gave, the error, and how long it took."""
    engine = OpenAIEngine(url, Connection(model="m", timeout=0.5, retries=1, backoff=0.01))
    items = []
    started = time.monotonic()
    with pytest.raises(MemagentError) as caught:
        for item in engine.complete("hi", 8, GREEDY):
            items.append(item)
    elapsed = time.monotonic() - started
    engine.close()
    return items, caught, elapsed


def _kinds(items) -> list[str]:
    return [type(i).__name__ for i in items]


def test_server_errors_are_retried_then_the_reply_comes():
    def script(n, handler, body):
        if n <= 2:
            send_json(handler, 500, {"error": {"message": "engine overloaded", "code": 500}})
        else:
            send_sse(handler, WHOLE_REPLY)

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", retries=2, backoff=0.01))
        items = list(engine.complete("hi", 8, GREEDY))
        engine.close()
    assert _kinds(items) == ["Retrying", "Retrying", "TextDelta", "TextDelta", "CompletionDone"]
    first, second = items[0], items[1]
    assert (first.attempt, first.attempts, second.attempt) == (2, 3, 3)
    assert (first.delay, second.delay) == (0.01, 0.02)
    assert first.reason == f"The server at {peer.url} answered HTTP 500: engine overloaded"
    done = items[-1]
    assert done.text == "Hello world" and done.finish_reason == "stop"
    assert (done.prompt_tokens, done.completion_tokens, done.cached_tokens, done.max_tokens) == (42, 2, 40, 8)
    assert len(peer.requests) == 3
    sent = json.loads(peer.requests[-1][3])
    assert sent["messages"] == [{"role": "user", "content": "hi"}] and sent["model"] == "m"


def test_retry_after_is_honoured():
    def script(n, handler, body):
        if n == 1:
            send_json(handler, 429, {"error": {"message": "queue full"}}, {"Retry-After": "0"})
        else:
            send_sse(handler, WHOLE_REPLY)

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", retries=1, backoff=30.0))
        started = time.monotonic()
        items = list(engine.complete("hi", 8, GREEDY))
        engine.close()
    assert time.monotonic() - started < 5  # not the 30 s backoff
    assert isinstance(items[0], Retrying) and items[0].delay == 0.0 and "HTTP 429: queue full" in items[0].reason
    assert items[-1].text == "Hello world"


def test_a_reply_cut_mid_stream_is_asked_again():
    def script(n, handler, body):
        send_sse(handler, CUT_REPLY if n == 1 else WHOLE_REPLY)

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", retries=2, backoff=0.01))
        items = list(engine.complete("hi", 8, GREEDY))
        engine.close()
    assert _kinds(items) == ["TextDelta", "Retrying", "TextDelta", "TextDelta", "CompletionDone"]
    assert items[0].text == "Hel"  # streamed, then voided by the Retrying item that follows
    assert items[1].reason == f"The server at {peer.url} cut the reply off mid-stream"
    assert items[-1].text == "Hello world"


def test_a_reply_dropped_with_done_is_not_taken_as_finished():
    """llama-cpp-python's server drops a streaming reply when another request comes in: it
    sends [DONE] with no finish reason. That reply is void, never an (empty) memory."""

    def script(n, handler, body):
        send_sse(handler, [_chunk({"role": "assistant"}), "[DONE]"] if n == 1 else WHOLE_REPLY)

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", retries=2, backoff=0.01))
        items = list(engine.complete("hi", 8, GREEDY))
        engine.close()
    assert _kinds(items) == ["Retrying", "TextDelta", "TextDelta", "CompletionDone"]
    assert items[0].reason == f"The server at {peer.url} ended a reply without finishing it"
    assert items[-1].text == "Hello world"


def test_a_server_that_keeps_cutting_fails_with_the_cause():
    def script(n, handler, body):
        send_sse(handler, CUT_REPLY, chunked=True)  # and close inside the chunked body

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", retries=2, backoff=0.01))
        items = []
        with pytest.raises(MemagentError) as caught:
            for item in engine.complete("hi", 8, GREEDY):
                items.append(item)
        engine.close()
    assert _kinds(items) == ["TextDelta", "Retrying", "TextDelta", "Retrying", "TextDelta"]
    assert caught.value.message.startswith(f"The server at {peer.url} cut the reply off mid-stream")
    assert caught.value.message.endswith("(3 attempts)")
    assert "log" in caught.value.hint
    assert len(peer.requests) == 3


def test_unauthorized_is_not_retried():
    def script(n, handler, body):
        send_json(handler, 401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", api_key="wrong-key", retries=3, backoff=0.01))
        items = []
        with pytest.raises(MemagentError) as caught:
            for item in engine.complete("hi", 8, GREEDY):
                items.append(item)
        engine.close()
    assert items == []
    assert caught.value.message == f"The server at {peer.url} answered HTTP 401: Invalid API key"
    assert "--api-key" in caught.value.hint
    assert len(peer.requests) == 1
    assert peer.requests[0][2]["Authorization"] == "Bearer wrong-key"
    assert peer.requests[0][1] == "/v1/chat/completions"


def test_nothing_listening_is_refused_then_an_error():
    url = f"http://127.0.0.1:{free_port()}"
    engine = OpenAIEngine(url, Connection(model="m", retries=2, backoff=0.01))
    items = []
    with pytest.raises(MemagentError) as caught:
        for item in engine.complete("hi", 8, GREEDY):
            items.append(item)
    engine.close()
    assert _kinds(items) == ["Retrying", "Retrying"]
    assert [i.attempt for i in items] == [2, 3]
    assert caught.value.message == f"The server at {url}/v1 refused the connection (3 attempts)"
    assert "running" in caught.value.hint and "--base-url" in caught.value.hint


@pytest.mark.parametrize("starts", [False, True], ids=["no-headers", "headers-then-silence"])
def test_a_server_that_never_answers_times_out(starts):
    """A server that takes the request and then sends nothing more, before its headers or after
    them and the first event: each attempt ends after `timeout` s, the run within longest_wait."""

    def script(n, handler, body):
        if starts:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.wfile.write(_event(_chunk({"role": "assistant"})))
            handler.wfile.flush()
        peer.release.wait(10)  # hold the request unanswered until the test ends

    with Peer(script) as peer:
        items, caught, elapsed = _complete_until_it_fails(peer.url)
    assert _kinds(items) == ["Retrying"]
    assert items[0].reason == f"The server at {peer.url} timed out: it sent nothing for 0.5 s"
    assert caught.value.message == f"The server at {peer.url} timed out: it sent nothing for 0.5 s (2 attempts)"
    assert "--timeout" in caught.value.hint and "log" in caught.value.hint
    assert longest_wait(0.5, 1, 0.01) == pytest.approx(1.01)
    assert 1.0 <= elapsed < longest_wait(0.5, 1, 0.01) + 1.0
    assert len(peer.requests) == 2


def test_model_lookup_and_base_urls():
    assert normalize_base_url("http://h:8000") == "http://h:8000/v1"
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000/v1"
    assert normalize_base_url("h:8000") == "http://h:8000/v1"

    def script(n, handler, body):
        send_json(
            handler,
            200,
            {"object": "list", "data": [{"id": "qwen2.5-7b"}, {"id": "other"}]} if n == 1 else {"object": "list", "data": []},
        )

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url.removesuffix("/v1") + "/")
        assert engine.model == "qwen2.5-7b"
        assert engine.description == f"served: qwen2.5-7b at {peer.url}"
        engine.close()
        with pytest.raises(MemagentError, match="lists no models"):
            OpenAIEngine(peer.url)
    assert [(r[0], r[1]) for r in peer.requests] == [("GET", "/v1/models"), ("GET", "/v1/models")]


# --- tokenizer dialects --------------------------------------------------------------------


def _dialect_peer(kind: str) -> Peer:
    """A server whose tokens are the characters' code points, speaking one tokenizer dialect."""

    def script(n, handler, raw):
        body = json.loads(raw or b"{}")
        if kind == "vllm" and handler.path == "/tokenize":
            if "prompt" not in body:
                return send_json(handler, 400, {"object": "error", "message": "Field required: prompt", "code": 400})
            assert body["add_special_tokens"] is False
            return send_json(handler, 200, {"count": 1, "max_model_len": 9, "tokens": [ord(c) for c in body["prompt"]]})
        if kind == "vllm" and handler.path == "/detokenize":
            return send_json(handler, 200, {"prompt": "".join(map(chr, body["tokens"]))})
        if kind == "llama-server" and handler.path == "/tokenize":
            if "content" not in body:
                return send_json(handler, 200, {"tokens": []})
            assert body["add_special"] is False and body["parse_special"] is False
            return send_json(handler, 200, {"tokens": [ord(c) for c in body["content"]]})
        if kind == "llama-server" and handler.path == "/detokenize":
            return send_json(handler, 200, {"content": "".join(map(chr, body["tokens"]))})
        send_json(handler, 404, {"detail": "Not Found"})

    return Peer(script)


@pytest.mark.parametrize("kind, name", [("vllm", "vLLM"), ("llama-server", "llama-server")])
def test_remote_tokenizer_finds_the_dialect(kind, name):
    with _dialect_peer(kind) as peer:
        remote = remote_tokenizer(peer.url, Connection(model="m", retries=0))
        assert remote.dialect.name == name
        assert remote.encode("naïve") == [110, 97, 239, 118, 101]
        assert remote.decode_bytes([110, 97, 239]) == "naï".encode()
        assert remote.byte_lengths[np.asarray([239, 97, 239])].tolist() == [2, 1, 2]
        remote.close()
        sent = [json.loads(r[3]) for r in peer.requests if r[1] == "/tokenize"]
    # The first text is asked with its pieces; this peer, like a server older than the flag, ignores
    # it, and later texts are asked without.
    flag = "return_token_strs" if kind == "vllm" else "with_pieces"
    assert [body.get("prompt", body.get("content")) for body in sent if flag in body] == ["Hello world"]
    last = [body for body in sent if body.get("prompt", body.get("content")) == "naïve"]
    if kind == "vllm":
        assert last == [{"prompt": "naïve", "add_special_tokens": False, "model": "m"}]
    else:
        assert last == [{"content": "naïve", "add_special": False, "parse_special": False}]


def test_remote_tokenizer_without_endpoints_says_what_to_do():
    with _dialect_peer("none") as peer:
        with pytest.raises(MemagentError) as caught:
            remote_tokenizer(peer.url, Connection(retries=0))
    assert "no tokenize endpoint" in caught.value.message
    assert "--tokenizer" in caught.value.hint


def _document(ascii_only: bool) -> list[Piece]:
    """Two sources of some 5,000 tokens of the clean model's vocabulary in all; with characters that
    vocabulary writes as fragments of one character per token (each byte its own token) unless
    `ascii_only`."""
    first, second = words(1000, seed=21), words(800, seed=22)
    if not ascii_only:
        first = first.replace("river", "rivière").replace("city", "city 中文")
        second = second.replace("mills", "mills — “old”").replace("fox", "fox 🦊")
    return [Piece("Document 1:\n"), Piece(first, 0), Piece("\n\nDocument 2:\n"), Piece(second, 1)]


def _chunked(pieces: list[Piece], tokenizer) -> tuple[list, list[int]]:
    stats = IngestStats()
    sources = [Source("a.txt", "a.txt", "text", 1), Source("b.txt", "b.txt", "text", 1)]
    chunks = [(c.text, c.tokens, c.spans) for c in iter_chunks(pieces, tokenizer, 500, sources, stats)]
    return chunks, stats.source_tokens


@pytest.mark.parametrize(
    "dialect, pieces, ascii_only",
    [
        ("vllm", True, False),  # return_token_strs
        ("llama-server", True, False),  # with_pieces
        ("llama-server", False, True),  # a server older than with_pieces: lengths joined
        ("llama-cpp-python", False, True),  # no pieces: lengths joined
    ],
)
def test_chunking_through_a_served_tokenizer_takes_a_few_requests(local, dialect, pieces, ascii_only):
    """A document of some 5,000 tokens cut into chunks of 500 through the server's tokenizer: the
    chunks (text, token counts, source spans) and each source's token count are the local
    tokenizer's, and it costs one tokenize request per block of text, and where the server sends no
    token pieces a few detokenize requests more. It cost a detokenize per distinct token and per
    chunk before (73 to 90 here), and the sources' token counts missed tokens that are fragments of
    a character (each counted as a 3-byte U+FFFD)."""
    _, tokenizer = local
    document = _document(ascii_only)
    expected = _chunked(document, tokenizer)
    assert sum(expected[1]) > 4000 and len(expected[0]) >= 9
    block_count = len(list(blocks(document)))
    with FakeServer(tokenizer=tokenizer, dialect=dialect, token_pieces=pieces) as fake:
        remote = remote_tokenizer(fake.url, Connection(retries=0))
        assert remote.dialect.name == {"vllm": "vLLM"}.get(dialect, dialect)
        fake.stats.tokenize = fake.stats.detokenize = 0
        assert _chunked(document, remote) == expected
        remote.close()
    if pieces:
        assert (fake.stats.tokenize, fake.stats.detokenize) == (block_count, 0)
    else:  # the separator found once (a tokenize and a detokenize), then one detokenize per block
        assert fake.stats.tokenize == block_count + 1
        assert fake.stats.detokenize <= 1 + block_count


def test_token_pieces_are_read_as_each_server_sends_them():
    vllm, llama_server = DIALECTS[0], DIALECTS[1]
    assert vllm.tokenize_body("a", "m", pieces=True) == {
        "prompt": "a",
        "add_special_tokens": False,
        "return_token_strs": True,
        "model": "m",
    }
    assert llama_server.tokenize_body("a", "m", pieces=True) == {
        "content": "a",
        "add_special": False,
        "parse_special": False,
        "with_pieces": True,
    }
    # llama-server: a piece that is not whole UTF-8 comes as its byte values.
    answer = {"tokens": [{"id": 9707, "piece": "Hello"}, {"id": 220, "piece": " "}, {"id": 15, "piece": [228, 184]}]}
    assert llama_server.pieces(answer, "Hello \u4e2d") == [b"Hello", b" ", b"\xe4\xb8"]
    assert llama_server.pieces({"tokens": [9707]}, "Hello") is None and not llama_server.sent_pieces({"tokens": [9707]})
    # vLLM: byte-level BPE strings (GPT-2's alphabet), read as bytes where they join to the text,
    # as given or in NFC (Qwen's normalizer).
    assert vllm.pieces({"tokens": [1, 2], "token_strs": ["Hello", "Ġworld"]}, "Hello world") == [b"Hello", b" world"]
    assert vllm.pieces({"tokens": [1, 2], "token_strs": ["Caf", "Ã©"]}, "Cafe\u0301") == [b"Caf", "é".encode()]
    assert vllm.pieces({"tokens": [1], "token_strs": ["ä¸"]}, "x") is None  # does not join to the text
    # SentencePiece's strings are another alphabet: their lengths are asked for as before.
    assert vllm.pieces({"tokens": [1, 2], "token_strs": ["▁Hello", "▁world"]}, "Hello world") is None
    assert not vllm.sent_pieces({"tokens": [1], "token_strs": None})


def test_a_remote_tokenizer_keeps_asking_the_server_what_its_pieces_do_not_say(local):
    """vLLM with a vocabulary whose strings are not byte-level BPE's (played here by a server too
    old to send them): each new id is detokenized alone, as before, and each chunk by the server."""
    _, tokenizer = local
    with FakeServer(tokenizer=tokenizer, dialect="vllm", token_pieces=False) as fake:
        remote = remote_tokenizer(fake.url, Connection(retries=0))
        fake.stats.detokenize = 0
        ids = remote.encode("Hello world, hello river.")
        assert remote.byte_lengths[np.asarray(ids)].tolist() == tokenizer.byte_lengths[np.asarray(ids)].tolist()
        assert fake.stats.detokenize == len(set(ids))
        assert remote.decode_bytes(ids) == b"Hello world, hello river." and fake.stats.detokenize == len(set(ids)) + 1
        remote.close()


# --- timeouts and budgets ------------------------------------------------------------------


def _open_stream(handler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Connection", "close")
    handler.end_headers()


def _keep_sending(handler, peer: Peer, pieces, interval: float, hung_up: threading.Event | None = None) -> None:
    """Writes each of `pieces` (bytes), `interval` s apart, until the client hangs up or the test ends."""
    try:
        for piece in pieces:
            if peer.release.is_set():
                return
            handler.wfile.write(piece)
            handler.wfile.flush()
            if interval:
                time.sleep(interval)
    except (BrokenPipeError, ConnectionResetError):
        if hung_up is not None:
            hung_up.set()


def _forever(*pieces: bytes):
    while True:
        yield from pieces


def test_the_timeout_default_and_its_checks():
    assert DEFAULT_TIMEOUT == 300.0
    # The default run (4 retries, 1 s backoff) gives a silent server 5 attempts and 1+2+4+8 s between them.
    assert longest_wait(DEFAULT_TIMEOUT, 4, 1.0) == 5 * 300 + 15
    assert longest_wait(10, 0, 1.0) == 10
    assert Connection().timeout == DEFAULT_TIMEOUT
    for bad in (0, -1, float("inf"), float("nan")):  # refused before the engine or the tokenizer asks anything
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            Connection(model="m", timeout=bad)


def test_a_server_that_streams_forever_is_stopped_at_the_budget():
    """Tokens forever, never a finish reason, never [DONE]: the reply is cut at max_tokens as a
    server would cut it (finish_reason "length"), and the stream is closed, not asked again."""
    hung_up = threading.Event()

    def script(n, handler, body):
        _open_stream(handler)
        _keep_sending(handler, peer, _forever(_event(_chunk({"content": "tok "}))), 0.0, hung_up)

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", timeout=1.0, retries=2, backoff=0.01))
        started = time.monotonic()
        items, done = _run(engine, "hi", 40)
        elapsed = time.monotonic() - started
        engine.close()
        assert hung_up.wait(5)  # the server's next write after we closed failed
    assert elapsed < 3
    assert not any(isinstance(i, Retrying) for i in items)
    assert sum(isinstance(i, TextDelta) for i in items) == 40
    assert done.finish_reason == "length"
    assert done.text == "tok " * 40
    assert (done.completion_tokens, done.max_tokens, done.prompt_tokens) == (40, 40, 0)
    assert len(peer.requests) == 1


def test_a_runaway_is_stopped_by_counted_tokens_with_few_counts():
    """With count_tokens a server that packs tokens into deltas (3 to a delta here) is stopped by
    the count, once it passes the budget by the margin; the counting is scheduled by bytes, so a
    reply is counted a handful of times, not once per delta."""
    counts: list[str] = []

    def count(text: str) -> int:
        counts.append(text)
        return len(text.split())

    def script(n, handler, body):
        _open_stream(handler)
        _keep_sending(handler, peer, _forever(_event(_chunk({"content": "a b c "}))), 0.0)

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", timeout=1.0, retries=0), count_tokens=count)
        started = time.monotonic()
        items, done = _run(engine, "hi", 30)
        elapsed = time.monotonic() - started
        engine.close()
    assert elapsed < 3
    assert done.finish_reason == "length"
    # stopped at the first delta after the count reached 30 + the margin (8): 13 deltas, 39 tokens
    assert count_margin(30) == 8
    assert done.text == "a b c " * 13 and done.completion_tokens == 39
    in_stream = counts[:-2]  # _done counts the message and the reply once more
    assert 1 <= len(in_stream) <= 8


def test_a_reply_whose_text_counts_longer_than_its_tokens_is_not_cut():
    """A server that keeps to the budget, one token a delta, whose text counts longer than the tokens
    that made it (text the model wrote in pieces that are not canonical BPE): the reply is read to
    the server's own finish, not cut a token early and taken for a runaway."""
    words = [f"w{i} " for i in range(20)]

    def script(n, handler, body):
        send_sse(handler, [_chunk({"content": w}) for w in words] + [_chunk({}, "stop")])

    def inflated(text: str) -> int:
        return len(text.split()) + 3  # three more than the deltas, as split characters would add

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", timeout=1.0, retries=0), count_tokens=inflated)
        _, done = _run(engine, "hi", 20)  # exactly the budget
        engine.close()
    assert done.text == "".join(words) and done.finish_reason == "stop"


def test_a_reply_at_its_budget_keeps_the_servers_usage():
    """A server that keeps to the budget is read to its end: the finish reason and usage that come
    after the last token are not lost to the budget guard (reasoning deltas spend the budget too)."""

    def script(n, handler, body):
        send_sse(handler, WHOLE_REPLY)

    with Peer(script) as peer:
        engine = OpenAIEngine(
            peer.url, Connection(model="m", timeout=1.0, retries=0), count_tokens=lambda text: len(text.split())
        )
        _, done = _run(engine, "hi", 3)  # 1 reasoning delta + 2 reply deltas
        engine.close()
    assert done.text == "Hello world" and done.finish_reason == "stop"
    assert (done.prompt_tokens, done.completion_tokens, done.cached_tokens) == (42, 2, 40)


KEEP_ALIVES = {
    "comments": [b": ping\n\n"],
    "empty-events": [_event(_chunk({}))],
    "a-byte-at-a-time": [b"d", b"a", b"t", b"a"],  # a line that never ends
}


@pytest.mark.parametrize("kind", list(KEEP_ALIVES))
def test_a_stream_of_keep_alives_times_out(kind):
    """Bytes every timeout/3 but never a token: no read times out, so the silence that counts is the
    time since the last token; the run ends as for a silent server, within 2 × timeout an attempt."""

    def script(n, handler, body):
        _open_stream(handler)
        handler.wfile.write(_event(_chunk({"role": "assistant"})) + _event(_chunk({"content": "Hel"})))
        _keep_sending(handler, peer, _forever(*KEEP_ALIVES[kind]), 0.15)

    with Peer(script) as peer:
        items, caught, elapsed = _complete_until_it_fails(peer.url)
    assert _kinds(items) == ["TextDelta", "Retrying", "TextDelta"]  # the first "Hel" is voided
    assert items[1].reason == f"The server at {peer.url} timed out: it sent no tokens for 0.5 s"
    assert caught.value.message == f"The server at {peer.url} timed out: it sent no tokens for 0.5 s (2 attempts)"
    assert "--timeout" in caught.value.hint
    assert 1.0 <= elapsed < 2 * longest_wait(0.5, 1, 0.01) + 1.0
    assert len(peer.requests) == 2


def _dribble(handler, peer: Peer, status: int, data: bytes, interval: float) -> None:
    """An answer that is not streamed, its body sent a byte every `interval` s."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.send_header("Connection", "close")
    handler.end_headers()
    _keep_sending(handler, peer, [data[i : i + 1] for i in range(len(data))], interval)


@pytest.mark.parametrize("where", ["model list", "error answer", "whole completion"])
def test_an_answer_dribbled_byte_by_byte_is_cut_at_the_timeout(where):
    """Each byte comes inside the read timeout, so no read times out; the answer as a whole must
    come within `timeout` s, or the attempt fails (and is asked again) instead of hanging the run."""
    models = json.dumps({"data": [{"id": "m"}]}).encode()
    error = json.dumps({"error": {"message": "overloaded " + "x" * 200}}).encode()
    whole = json.dumps({"choices": [{"message": {"content": "hello " * 40}, "finish_reason": "stop"}]}).encode()

    def script(n, handler, body):
        if where == "model list":
            _dribble(handler, peer, 200, models + b" " * 200, 0.01)
        elif where == "error answer":
            _dribble(handler, peer, 500, error, 0.01)
        else:
            _dribble(handler, peer, 200, whole, 0.01)

    with Peer(script) as peer:
        started = time.monotonic()
        with pytest.raises(MemagentError) as caught:
            # with no model named, the engine asks the server's list for one
            engine = OpenAIEngine(
                peer.url, Connection(model=None if where == "model list" else "m", timeout=0.5, retries=1, backoff=0.01)
            )
            try:
                _run(engine, "hi", 16)
            finally:
                engine.close()
        elapsed = time.monotonic() - started
    assert caught.value.message == f"The server at {peer.url} took more than 0.5 s to send one answer (2 attempts)"
    assert "--timeout" in caught.value.hint
    assert len(peer.requests) == 2 and elapsed < 4 * 0.5 + 1.0


def test_an_answer_larger_than_any_api_sends_is_refused(monkeypatch):
    from memagent_cli.model.served import transport

    monkeypatch.setattr(transport, "MAX_BODY", 4096)

    def script(n, handler, body):
        send_json(handler, 200, {"data": [{"id": "m", "pad": "x" * 10_000}]})

    with Peer(script) as peer:
        with pytest.raises(MemagentError) as caught:
            OpenAIEngine(peer.url, Connection(timeout=5, retries=3))  # no model named: it reads the server's list
    assert caught.value.message == f"The server at {peer.url} sent an answer of more than 4,096 bytes"
    assert len(peer.requests) == 1  # not transient: not asked again


def test_a_slow_steady_stream_is_not_cut():
    """The timeout bounds the silence between tokens, not the reply: tokens 0.6 s apart with pings
    between them, 3.6 s in all, under a 2 s timeout, make a whole reply. (The margin between a gap
    and the timeout is wide: a busy machine's stalls must not cut the reply.)"""

    def script(n, handler, body):
        _open_stream(handler)
        pieces = [_event(_chunk({"role": "assistant"}))]
        for word in ["one ", "two ", "three ", "four ", "five ", "six "]:
            pieces += [_event(_chunk({"content": word})), b": ping\n\n"]
        pieces += [_event(_chunk({}, "stop")), _event("[DONE]")]
        _keep_sending(handler, peer, pieces, 0.3)

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", timeout=2.0, retries=0))
        started = time.monotonic()
        _, done = _run(engine, "hi", 64)
        elapsed = time.monotonic() - started
        engine.close()
    assert elapsed > 3.0  # longer than the timeout, whole
    assert done.text == "one two three four five six " and done.finish_reason == "stop"


@pytest.mark.parametrize("after", ["keep-alives", "silence"])
def test_a_finished_reply_on_a_stream_left_open_is_kept(after):
    """The finish reason came but the stream stays open (no [DONE], no close): after `timeout` s the
    reply is taken as it is, not asked again."""

    def script(n, handler, body):
        _open_stream(handler)
        events = [_chunk({"content": "Hello"}), _chunk({}, "stop")]
        handler.wfile.write(b"".join(_event(e) for e in events))
        handler.wfile.flush()
        if after == "keep-alives":
            _keep_sending(handler, peer, _forever(b": ping\n\n"), 0.2)
        else:
            peer.release.wait(10)

    with Peer(script) as peer:
        engine = OpenAIEngine(peer.url, Connection(model="m", timeout=0.5, retries=2, backoff=0.01))
        started = time.monotonic()
        items, done = _run(engine, "hi", 8)
        elapsed = time.monotonic() - started
        engine.close()
    assert _kinds(items) == ["TextDelta", "CompletionDone"]
    assert done.text == "Hello" and done.finish_reason == "stop"
    assert elapsed < 2
    assert len(peer.requests) == 1


def test_the_timeout_reaches_the_model_lookup_and_the_tokenizer():
    def script(n, handler, body):
        peer.release.wait(10)

    with Peer(script) as peer:
        started = time.monotonic()
        with pytest.raises(MemagentError) as looked_up:
            OpenAIEngine(peer.url, Connection(timeout=0.5, retries=0))  # GET /v1/models
        with pytest.raises(MemagentError) as tokenized:
            remote_tokenizer(peer.url, Connection(timeout=0.5, retries=0))
        elapsed = time.monotonic() - started
    assert looked_up.value.message == f"The server at {peer.url} timed out: it sent nothing for 0.5 s"
    assert tokenized.value.message == f"The server at {peer.url} timed out: it sent nothing for 0.5 s"
    assert elapsed < 3


@pytest.mark.parametrize(
    "host, loopback, here",
    [
        ("localhost", True, True),
        ("LOCALHOST.", True, True),
        ("127.0.0.1", True, True),
        ("127.3.2.1", True, True),
        ("::1", True, True),
        ("[::1]", True, True),
        ("::ffff:127.0.0.1", True, True),
        ("app.localhost", False, True),  # resolves here for a client; not an address to serve MCP on
        ("0.0.0.0", False, True),
        ("::", False, True),
        ("192.168.1.5", False, False),
        ("gpu-box", False, False),
        ("localhost.example.com", False, False),
    ],
)
def test_one_rule_says_which_hosts_are_this_machine(host, loopback, here):
    """The served engine's URLs (is_local), the MCP server's address and a browser's Origin are
    judged by model/served/hosts.py alone."""
    from memagent_cli.mcp.server_settings import HttpAddress
    from memagent_cli.model.served.backend import is_local
    from memagent_cli.model.served.hosts import is_loopback, is_this_host

    assert is_loopback(host) is loopback and is_this_host(host) is here
    named = f"[{host.strip('[]')}]" if ":" in host else host
    assert is_local(f"http://{named}:8000/v1") is here
    assert HttpAddress(host.strip("[]"), 8765).loopback is loopback
