"""A fake OpenAI-compatible server on 127.0.0.1, for tests and benchmarks of served engines.

    server = FakeServer(latency=0.05, slots=8)       # started; reply=default_reply
    engine = ServedPool([server.url, ...])           # server.url: http://127.0.0.1:PORT/v1
    server.kill()                                    # gone mid-job: refused, open replies cut
    server.start()                                   # back on the same port
    server.stats.requests, server.stats.keys, server.stats.max_busy
    server.close()                                   # or `with FakeServer(...) as server:`

It speaks what memagent uses: GET /v1/models, and POST /v1/chat/completions streamed as
server-sent events (choices[0].delta.content, a last chunk with finish_reason and usage, then
`data: [DONE]`) or, with "stream": false, one JSON completion; and POST /v1/completions (a raw
prompt: choices[0].text) alike, unless `completions=False` plays a server without it (HTTP 404).
Each request waits for one of `slots` places (a GPU replica's batch: requests beyond it queue),
holds it `latency` seconds, then answers `reply(request body)`. The stream's headers and first
piece of text come at once, the rest after the latency, so a kill during the latency cuts a reply
mid-stream. A reply function that raises `Refuse(status, message)` makes the server answer that
HTTP status instead.

Every FakeServer in a process shares one asyncio loop in one background thread: HTTP/1.1 with
keep-alive, parsed by hand, so hundreds of connections cost little. The client under test runs in
the same process and so shares its GIL; a benchmark that needs the client's CPU alone runs the
servers in another process: `python tests/fakeserver.py --servers 4 --latency 0.5 --slots 64`
prints their URLs and takes `kill I`, `start I` and `stats` on its standard input (see _main).

Given a `tokenizer` (memagent's own, from a GGUF) it also speaks one server's tokenize and detokenize
endpoints, `dialect` "vllm", "llama-server" or "llama-cpp-python", with that tokenizer's ids, as each
server answers them (see FakeServer._tokenize); `stats.tokenize` and `stats.detokenize` count those
requests. `token_pieces=False` plays a server too old to send each token's text with its id.
"""

from __future__ import annotations

import asyncio
import collections
import http
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

MEMORY_MARK = "Updated memory:"  # how memagent's memory-update prompt ends (core/memagent.py)


class Refuse(Exception):
    """Raised by a reply function: the server answers HTTP `status` with `message`."""

    def __init__(self, status: int, message: str = "refused"):
        super().__init__(message)
        self.status = status
        self.message = message


def default_reply(request: dict) -> str:
    """What memagent's loop needs: a short memory for a memory update (its prompt ends with
    "Updated memory:"), an answer in \\boxed{} (or "the answer is") for the final prompt."""
    prompt = request["messages"][-1]["content"]
    if MEMORY_MARK in prompt[-40:]:
        section = prompt.rpartition("<section>")[2].partition("</section>")[0]
        return "Noted: " + " ".join(section.split()[:12])
    if "the answer is" in prompt:
        return "Therefore, the answer is 42."
    return "The answer is \\boxed{42}."


@dataclass
class FakeStats:
    received: int = 0  # chat requests that arrived
    requests: int = 0  # chat replies sent whole
    refused: int = 0  # chat requests answered with a Refuse status
    models: int = 0  # GET /v1/models answered
    keys: collections.Counter[str] = field(default_factory=collections.Counter)  # chat requests per X-Session-ID ("": none)
    cookies: int = 0  # chat requests that carried a Cookie header
    connections: int = 0  # TCP connections accepted (with keep-alive, far fewer than requests)
    in_flight: int = 0  # chat requests here now, waiting for a slot or in one
    max_in_flight: int = 0
    busy: int = 0  # slots in use now
    max_busy: int = 0  # never above `slots`
    tokenize: int = 0  # tokenize requests answered (any status)
    detokenize: int = 0  # detokenize requests answered (any status)
    not_found: int = 0  # requests for a path this server does not have (another dialect's tokenize)

    def as_dict(self) -> dict[str, Any]:
        """The counters as JSON (dataclasses.asdict would garble the Counter)."""
        return {name: dict(value) if isinstance(value, collections.Counter) else value for name, value in vars(self).items()}


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _shared_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="fakeserver", daemon=True).start()
            _loop = loop
        return _loop


class FakeServer:
    def __init__(
        self,
        latency: float = 0.0,
        slots: int = 8,
        reply: Callable[[dict], str] = default_reply,
        *,
        model: str = "fake-model",
        pieces: int = 4,
        set_cookie: bool = False,
        tokenizer: Any = None,
        dialect: str = "vllm",
        token_pieces: bool = True,
        completions: bool = True,
    ):
        """`pieces`: the text deltas a streamed reply comes in. `set_cookie`: every chat answer sets
        a cookie, as a load balancer's stickiness would. `tokenizer` (a memagent Tokenizer): the
        tokenize endpoints of `dialect` are served with it; `token_pieces` False: as a version that
        ignores with_pieces / return_token_strs."""
        if slots < 1:
            raise ValueError("slots must be at least 1")
        if dialect not in TOKENIZER_PATHS:
            raise ValueError(f"dialect must be one of {', '.join(TOKENIZER_PATHS)}")
        self.tokenizer = tokenizer
        self.dialect = dialect
        self.token_pieces = token_pieces
        self.completions = completions
        self.latency = latency
        self.slots = slots
        self.reply = reply
        self.model = model
        self.pieces = max(1, pieces)
        self.set_cookie = set_cookie
        self.stats = FakeStats()
        self.port = 0
        self._loop = _shared_loop()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._slots: asyncio.Semaphore | None = None
        self.start()
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def start(self) -> None:
        """Listens (again, on the same port); a no-op while it listens."""
        self._run(self._start())

    def kill(self) -> None:
        """Stops abruptly: the port closes (connections are refused) and every open connection
        is dropped, replies mid-stream included."""
        self._run(self._kill())

    def close(self) -> None:
        self.kill()

    async def _start(self) -> None:
        if self._server is not None:
            return
        self._slots = asyncio.Semaphore(self.slots)
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _kill(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.stats.connections += 1
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                method, path, headers, body = request
                await self._answer(method, path.partition("?")[0], headers, body, writer)
                if headers.get("connection", "").lower() == "close":
                    break
        except asyncio.CancelledError:
            # Killed: a reset, as a crashed server's. Not re-raised: asyncio would log the
            # cancelled connection task as an error.
            writer.transport.abort()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter) -> None:
        if method == "GET" and path == "/v1/models":
            self.stats.models += 1
            _send_json(writer, 200, {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "fake"}]})
        elif method == "POST" and (path == "/v1/chat/completions" or (path == "/v1/completions" and self.completions)):
            await self._chat(headers, body, writer)
        elif method == "POST" and self.tokenizer is not None and path in TOKENIZER_PATHS[self.dialect]:
            self._tokenize(path, body, writer)
        else:
            self.stats.not_found += 1
            _send_json(writer, 404, {"error": {"message": f"No route {method} {path}", "code": 404}})
        await writer.drain()

    async def _chat(self, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter) -> None:
        stats = self.stats
        try:
            request = json.loads(body)
        except ValueError:
            _send_json(writer, 400, {"error": {"message": "The body is not JSON", "code": 400}})
            return
        stats.received += 1
        stats.keys[headers.get("x-session-id", "")] += 1
        stats.cookies += "cookie" in headers
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        assert self._slots is not None
        try:
            async with self._slots:
                stats.busy += 1
                stats.max_busy = max(stats.max_busy, stats.busy)
                try:
                    try:
                        text = self.reply(request)
                    except Refuse as refusal:
                        stats.refused += 1
                        _send_json(writer, refusal.status, {"error": {"message": refusal.message, "code": refusal.status}})
                        return
                    if request.get("stream"):
                        await self._stream(request, text, writer)
                    else:
                        await asyncio.sleep(self.latency)
                        _send_json(writer, 200, self._completion(request, text), self._cookie())
                    await writer.drain()
                    stats.requests += 1
                finally:
                    stats.busy -= 1
        finally:
            stats.in_flight -= 1

    async def _stream(self, request: dict, text: str, writer: asyncio.StreamWriter) -> None:
        pieces = _split(text, min(self.pieces, max(1, int(request.get("max_tokens") or self.pieces))))
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            + self._cookie()
            + b"Transfer-Encoding: chunked\r\n\r\n"
        )
        raw = "prompt" in request
        head_piece = pieces[0] if pieces else ""
        first = _event(_text(head_piece) if raw else _delta({"role": "assistant", "content": head_piece}))
        writer.write(head + _chunked(first))
        await writer.drain()
        await asyncio.sleep(self.latency)
        rest = [_event(_text(piece) if raw else _delta({"content": piece})) for piece in pieces[1:]]
        rest.append(_event(_text("", "stop") if raw else _delta({}, "stop")))
        rest.append(_event({"object": "chat.completion.chunk", "choices": [], "usage": _usage(request, len(pieces))}))
        rest.append(b"data: [DONE]\n\n")
        writer.write(_chunked(b"".join(rest)) + b"0\r\n\r\n")

    def _completion(self, request: dict, text: str) -> dict:
        if "prompt" in request:
            return {
                "object": "text_completion",
                "model": self.model,
                "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
                "usage": _usage(request, len(_split(text, self.pieces))),
            }
        return {
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": _usage(request, len(_split(text, self.pieces))),
        }

    def _cookie(self) -> bytes:
        return b"Set-Cookie: backend=%d; Path=/\r\n" % self.port if self.set_cookie else b""

    def _token_bytes(self, token: int, special: bool) -> bytes:
        """One id's bytes; a control token's are its text where the server renders it (`special`)."""
        if special:
            for text, control in self.tokenizer.controls.items():
                if control == token:
                    return text.encode()
        return self.tokenizer.decode_bytes([token])

    def _tokenize(self, path: str, raw: bytes, writer: asyncio.StreamWriter) -> None:
        """Answers a tokenize or detokenize request as the real server does (read from its source):

        vLLM (entrypoints/openai/serving_tokenization.py): POST /tokenize {"prompt",
        "add_special_tokens", "return_token_strs"} -> {"count", "max_model_len", "tokens", "token_strs"},
        token_strs being `tokenizer.convert_ids_to_tokens(ids)`, the vocabulary's strings (byte-level
        BPE's in GPT-2's bytes-to-unicode form), or null unless asked; a body without "prompt" is a
        400. POST /detokenize {"tokens"} -> {"prompt": tokenizer.decode(ids)}, a lenient decode.
        A model named other than the served one is a 404.

        llama-server (tools/server): POST /tokenize {"content", "add_special", "parse_special",
        "with_pieces"} -> {"tokens": [id, ...]}, or with with_pieces [{"id", "piece"}, ...], each
        piece being common_token_to_piece (control tokens as their text): a string when it is valid
        UTF-8, else the list of its byte values; a body without "content" gets no tokens. POST
        /detokenize {"tokens"} -> {"content": the pieces joined}, invalid UTF-8 replaced (nlohmann's
        dump with error_handler_t::replace; here Python's "replace", which may count U+FFFDs
        differently).

        llama-cpp-python (llama_cpp/server/app.py): POST /extras/tokenize {"input"} -> {"tokens"};
        POST /extras/detokenize {"tokens"} -> {"text": Llama.detokenize(ids).decode("utf-8")}: the
        pieces joined (control tokens as nothing) and decoded strictly, so ids that begin or end
        inside a character are an HTTP 500 "'utf-8' codec can't decode ...". (Its 32-byte piece
        buffer, abetlen/llama-cpp-python#2362, is not played.)

        Text is tokenized as the given tokenizer does, normalization included.
        """
        stats = self.stats
        detokenize = path.endswith("/detokenize")
        if detokenize:
            stats.detokenize += 1
        else:
            stats.tokenize += 1
        try:
            body = json.loads(raw)
        except ValueError:
            _send_json(writer, 400, {"error": {"message": "The body is not JSON", "code": 400}})
            return
        if self.dialect == "vllm" and body.get("model") not in (None, self.model):
            message = f"The model `{body.get('model')}` does not exist."
            _send_json(writer, 404, {"object": "error", "message": message, "type": "NotFoundError", "code": 404})
            return
        if detokenize:
            ids = [int(i) for i in body.get("tokens") or []]
            data = b"".join(self._token_bytes(i, special=self.dialect != "llama-cpp-python") for i in ids)
            if self.dialect == "llama-cpp-python":
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as error:
                    fault = {"message": str(error), "type": "internal_server_error", "param": None, "code": None}
                    _send_json(writer, 500, {"error": fault})
                    return
                _send_json(writer, 200, {"text": text})
            else:
                key = "prompt" if self.dialect == "vllm" else "content"
                _send_json(writer, 200, {key: data.decode("utf-8", errors="replace")})
            return
        key = {"vllm": "prompt", "llama-server": "content", "llama-cpp-python": "input"}[self.dialect]
        if key not in body:
            if self.dialect == "llama-server":
                _send_json(writer, 200, {"tokens": []})
            else:
                message = f"Field required: {key}"
                _send_json(writer, 400 if self.dialect == "vllm" else 422, {"object": "error", "message": message, "code": 400})
            return
        ids = self.tokenizer.encode(body[key])
        if self.dialect == "vllm":
            strs = None
            if self.token_pieces and body.get("return_token_strs"):
                strs = ["".join(_BYTE_TO_UNICODE[b] for b in self._token_bytes(i, special=True)) for i in ids]
            _send_json(writer, 200, {"count": len(ids), "max_model_len": 32768, "tokens": ids, "token_strs": strs})
        elif self.dialect == "llama-server" and self.token_pieces and body.get("with_pieces"):
            tokens: list[Any] = []
            for i in ids:
                piece = self._token_bytes(i, special=True)
                try:
                    tokens.append({"id": i, "piece": piece.decode("utf-8")})
                except UnicodeDecodeError:
                    tokens.append({"id": i, "piece": list(piece)})
            _send_json(writer, 200, {"tokens": tokens})
        else:
            _send_json(writer, 200, {"tokens": ids})


# Where each dialect has its tokenize and detokenize endpoints.
TOKENIZER_PATHS = {
    "vllm": ("/tokenize", "/detokenize"),
    "llama-server": ("/tokenize", "/detokenize"),
    "llama-cpp-python": ("/extras/tokenize", "/extras/detokenize"),
}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: the character a byte-level BPE vocabulary writes each byte as."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_TO_UNICODE = _bytes_to_unicode()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """One HTTP/1.1 request: (method, target, headers with lower-case names, body); None at a clean end."""
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3:
        raise ValueError("not an HTTP request line")
    headers: dict[str, str] = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n"):
            break
        if not header:
            raise ConnectionError("the connection ended inside the headers")
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return parts[0], parts[1], headers, body


def _send_json(writer: asyncio.StreamWriter, status: int, payload: Any, extra: bytes = b"") -> None:
    data = json.dumps(payload).encode()
    phrase = http.HTTPStatus(status).phrase.encode()
    writer.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
        % (status, phrase, len(data), extra, data)
    )


def _split(text: str, count: int) -> list[str]:
    """`text` in at most `count` pieces of about equal length."""
    if not text:
        return []
    size = -(-len(text) // count)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _delta(delta: dict, finish: str | None = None) -> dict:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _text(text: str, finish: str | None = None) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def _usage(request: dict, completion_tokens: int) -> dict:
    prompt = sum(len(str(m.get("content", "")).split()) for m in request.get("messages") or [])
    prompt += len(str(request.get("prompt", "")).split())
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens}


def _event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _main() -> None:
    """Servers in a process of their own, for a benchmark whose client must not share their CPU:
    prints their URLs on one line, then reads commands, one a line: `kill I`, `start I`, `stats`
    (one JSON line: each server's FakeStats); at the end of its input it prints the stats and ends."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=_main.__doc__)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--pieces", type=int, default=4)
    args = parser.parse_args()
    servers = [FakeServer(args.latency, args.slots, pieces=args.pieces) for _ in range(args.servers)]
    print(" ".join(server.url for server in servers), flush=True)

    def stats() -> None:
        print(json.dumps([server.stats.as_dict() for server in servers]), flush=True)

    for line in sys.stdin:
        command, _, index = line.partition(" ")
        if command.strip() == "stats":
            stats()
        elif command in ("kill", "start"):
            getattr(servers[int(index)], command)()
    stats()
    for server in servers:
        server.close()


if __name__ == "__main__":
    _main()
