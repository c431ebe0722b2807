"""A served model: memagent driving vLLM, SGLang, llama-server (C++) or llama-cpp-python's server
through their OpenAI-compatible HTTP API instead of the embedded llama.cpp.

This module owns `OpenAIEngine`, the `Engine` protocol over POST {base}/chat/completions, streamed
as server-sent events: one user message per call (the server applies the model's chat template, as
the authors' runner did), every sampling knob pinned so no server default changes the output, and
transient faults (refused, timed out, 5xx/429, a stream cut mid-reply) retried from scratch with
backoff; and the base URL's normal form. The HTTP plumbing (client, faults, retries) that the
server's tokenizer shares is transport.py's. It also owns what a chain of calls (one MemAgent loop)
sends so that a router keeps it on one replica: `Chain`, its key headers (CHAIN_KEY_HEADERS, why
those: pool.py's docstring), and `ChainEngine`, the per-chain view both `OpenAIEngine` and
pool.ServedPool hand out (`for_chain`). pool.py drives several servers through `attempt`.

How long a reply is waited for, `timeout` seconds (http.DEFAULT_TIMEOUT, 300, unless the caller says
otherwise; --timeout on the command line):
- a server that sends nothing (no connection, no headers, no byte of the stream) for `timeout` s
  fails the attempt: "The server at URL timed out: it sent nothing for N s";
- a server that keeps the stream open and sends bytes but no token (SSE comments such as ": ping",
  events with no text) for `timeout` s fails it too: "... it sent no tokens for N s". That silence is
  noticed when the next byte comes or the read times out, so within 2 × timeout of the last token;
- a failed attempt is asked again like any transient fault, so the run ends in a MemagentError after
  at most about attempts × timeout plus the backoff sleeps (http.longest_wait), twice that for a
  stream of keep-alives;
- a server that streams tokens past the budget it was asked for (a runaway that never finishes) is
  stopped there: the stream is closed and what came is the reply, finish_reason "length", as if the
  server had cut it at max_tokens. A streamed text delta holds one token or more, so a delta past
  the budget stops it at once; with `count_tokens` the text is also counted, which catches a
  server that packs several tokens into a delta, but only once the count passes the budget by a
  margin (`count_margin`), since text the model wrote in pieces that are not canonical BPE counts
  longer than the tokens that made it, and a reply at its budget must not lose its last tokens;
- once a reply has its finish reason, a stream that then stays open (no [DONE], no close) is waited
  for `timeout` s and the reply kept; so is one that stays open after [DONE], whose end is read
  (as a rule it comes at once) so that the connection serves the next request instead of closing.

How the base URL, key and model name are chosen on the command line is the caller's business.
httpx2 (the HTTP client memagent already has through huggingface_hub) is imported inside functions,
so importing this module loads no HTTP client until a server is used.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from ...display import clip
from ...errors import MemagentError
from ..engine import Completion, CompletionDone, RawPrompt, Retrying, Sampling, TextDelta
from .body import SCHEMA_FORMS, Request, log_request
from .transport import (
    MESSAGE_CHARS,
    Connection,
    Fault,
    message_of,
    post_json,
    read_body,
    retry_delay,
    stall_fault,
    status_fault,
    transport_fault,
    with_retries,
)

if TYPE_CHECKING:
    import httpx2


_LINE_END = re.compile(rb"\r\n|\r|\n")  # SSE ends a line with any of the three
_SSE = {"Accept": "text/event-stream"}
_MAX_LINE = 1 << 24  # bytes: no event of a chat completion stream comes near this


def normalize_base_url(base_url: str) -> str:
    """'http://host:8000', 'http://host:8000/', 'host:8000/v1' -> 'http://host:8000/v1'."""
    url = base_url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if not url.endswith("/v1"):
        url += "/v1"
    return url


def server_root(base_url: str) -> str:
    """The base URL without its /v1: where vLLM and llama-server put /tokenize and /detokenize."""
    return normalize_base_url(base_url)[: -len("/v1")]


# --- chains --------------------------------------------------------------------------------

# Sent with every request of a chain, all with the chain's key: the headers that session-affine
# routers read (pool.py's docstring says which reads which). Headers, not a body field, so the
# server's model input never changes and no server logs or rejects a field it does not know.
CHAIN_KEY_HEADERS = ("X-Session-ID", "X-SMG-Routing-Key")


def wire_key(key: str) -> str:
    """A chain's key as sent: a digest, so any key (a path, non-ASCII, long) makes a valid header
    value, a router's log shows no file names, and none ends like a turn suffix that the SGLang
    gateway strips ("_t2")."""
    return "mc-" + hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def no_raw_completions(base_url: str) -> Fault:
    """A server without the raw completions endpoint, which a protocol that continues a reply needs:
    a refusal (not transient), so the engine and the pool end the call at once, as for any 404."""
    return Fault(
        f"The server at {base_url} has no {base_url}/completions endpoint (HTTP 404): InfMem continues "
        "each reply after its thinking, which needs raw completions",
        "vLLM, SGLang, llama-server and llama-cpp-python's server all have it; check --base-url and --served-model.",
        transient=False,
        status=404,
    )


class Chain:
    """One chain of calls (a MemAgent loop): its key headers, and the server of a pool that gave it
    its last reply. Used by one thread at a time, as a chain's calls come one after another."""

    def __init__(self, key: str):
        self.key = key
        self.headers = dict.fromkeys(CHAIN_KEY_HEADERS, wire_key(key))
        self.last: int | None = None  # ServedPool: the index of the server of its last reply


class ChainedEngine(Protocol):
    """An engine whose calls can carry a chain: OpenAIEngine, pool.ServedPool."""

    description: str
    concurrent: bool

    def complete(
        self, user_message: str, max_tokens: int, sampling: Sampling, expect: str = "", chain: Chain | None = None
    ) -> Iterator[Completion]: ...

    def complete_raw(
        self, prompt: RawPrompt, max_tokens: int, sampling: Sampling, chain: Chain | None = None
    ) -> Iterator[Completion]: ...

    def for_chain(self, key: str) -> ChainEngine: ...


class ChainEngine:
    """An `Engine` for one chain: the engine it views (its clients, counters, health) with every
    request carrying the chain's key. Closing it closes nothing: the viewed engine owns the clients."""

    def __init__(self, engine: ChainedEngine, key: str):
        self.engine = engine
        self.chain = Chain(key)
        self.description = engine.description
        self.concurrent = engine.concurrent

    def complete(self, user_message: str, max_tokens: int, sampling: Sampling, expect: str = "") -> Iterator[Completion]:
        return self.engine.complete(user_message, max_tokens, sampling, expect, chain=self.chain)

    def complete_raw(self, prompt: RawPrompt, max_tokens: int, sampling: Sampling) -> Iterator[Completion]:
        return self.engine.complete_raw(prompt, max_tokens, sampling, chain=self.chain)

    def for_chain(self, key: str) -> ChainEngine:
        return self.engine.for_chain(key)

    def close(self) -> None:
        pass


# --- the engine ----------------------------------------------------------------------------


@dataclass
class _Reply:
    """What one attempt has read of a streamed reply so far."""

    start: float  # time.perf_counter() when the request went out
    next_count: int  # bytes of content at which count_tokens is next asked (the budget, at first)
    progress: float = field(init=False)  # time.perf_counter() of the last token or finish reason, else `start`
    first: float | None = None  # when the first text came
    pieces: list[str] = field(default_factory=list)  # the reply's text, delta by delta
    deltas: int = 0  # text deltas: one stands for a token when nothing counts them
    generated: int = 0  # deltas of generated text, the reply's or reasoning: each holds a token at least
    size: int = 0  # UTF-8 bytes of the reply's text
    counted: int = 0  # count_tokens of the reply's text at the last count
    finish: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    done: bool = False  # [DONE] came
    over: bool = False  # a token past the budget came: reading stopped there

    def __post_init__(self) -> None:
        self.progress = self.start

    def past_budget(self, max_tokens: int) -> bool:
        """Whether the server has generated its whole budget, so that a further token overruns
        it. `generated` never counts more than the server generated; `counted` may (see the
        module docstring), so it must pass the budget by count_margin."""
        return self.generated >= max_tokens or self.counted >= max_tokens + count_margin(max_tokens)


def count_margin(max_tokens: int) -> int:
    """How far the reply's counted tokens may run past the budget before the server is taken to
    overrun it: re-tokenized text that the model wrote in pieces that are not canonical BPE
    counts some tokens longer (split characters decode to U+FFFD, each its own token)."""
    return max(8, max_tokens // 8)


class Sender:
    """The Engine calls of a served engine (one server or a pool): each a Request, sent by `send`."""

    def send(self, request: Request, chain: Chain | None = None) -> Iterator[Completion]:
        raise NotImplementedError

    def complete(
        self, user_message: str, max_tokens: int, sampling: Sampling, expect: str = "", chain: Chain | None = None
    ) -> Iterator[Completion]:
        # `expect` is not sent: the server drafts (or not) by its own configuration.
        return self.send(Request(user_message, max_tokens, sampling), chain)

    def complete_raw(
        self, prompt: RawPrompt, max_tokens: int, sampling: Sampling, chain: Chain | None = None
    ) -> Iterator[Completion]:
        # The prompt's text as it is: the server tokenizes it, control-token text included (only the
        # embedded engine can keep a document's "<|im_end|>" as text).
        return self.send(Request(prompt.text, max_tokens, sampling, raw=True), chain)


class OpenAIEngine(Sender):
    """A model behind an OpenAI-compatible server (vLLM, SGLang, llama-server, llama-cpp-python)."""

    concurrent = True  # a server queues or batches overlapping requests itself

    def __init__(self, base_url: str, connection: Connection = Connection(), *, count_tokens: Callable[[str], int] | None = None):
        """`connection`: the key, the model's name (None: the first the server lists), and how long and
        how often a reply is waited for; its `timeout` is the longest silence, in seconds, from the
        server (no byte, or no token of a streamed reply) before an attempt is given up (see the
        module's docstring)."""
        self.base_url = normalize_base_url(base_url)
        self.connection = connection
        self._count = count_tokens
        self.schema_form = SCHEMA_FORMS[0]  # how response_format is asked for, until the server refuses it
        self._client: httpx2.Client | None = connection.client()
        try:
            self.model = connection.model or self._first_model()
        except BaseException:
            self.close()
            raise
        self.description = f"served: {self.model} at {self.base_url}"

    def for_chain(self, key: str) -> ChainEngine:
        """A view of this engine whose requests carry `key` (see `Chain`)."""
        return ChainEngine(self, key)

    def close(self) -> None:
        client, self._client = getattr(self, "_client", None), None
        if client is not None:
            client.close()

    @property
    def _http(self) -> httpx2.Client:
        if self._client is None:
            raise RuntimeError("the engine is closed")
        return self._client

    def _first_model(self) -> str:
        """The model the server serves, when none was named: GET /v1/models, retried."""
        try:
            ids = with_retries(self.models, self.connection)
        except Fault as fault:
            raise fault.error() from None
        if not ids:
            raise MemagentError(
                f"The server at {self.base_url} lists no models at {self.base_url}/models",
                "Pass the model's name with --served-model.",
            )
        return str(ids[0])

    def models(self) -> list[str]:
        """The names the server answers to: one GET /v1/models; raises Fault."""
        listing = post_json(self._http, self.base_url, f"{self.base_url}/models", None, self.connection.timeout, method="GET")
        data = listing.get("data") if isinstance(listing, dict) else None
        return [str(m["id"]) for m in data or [] if isinstance(m, dict) and m.get("id")]

    def send(self, request: Request, chain: Chain | None = None) -> Iterator[Completion]:
        body = request.body(self.model, self.schema_form)
        if self.connection.log is not None:
            log_request(self.connection.log, f"{self.base_url}/{request.path}", body)
        attempts = self.connection.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                yield from self.attempt(body, request, chain)
                return
            except Fault as fault:
                if self.refused_schema_form(body, fault):
                    yield from self.send(request, chain)
                    return
                if not fault.transient or attempt == attempts:
                    fault.attempts = attempt
                    raise fault.error() from None
                delay = retry_delay(fault, self.connection.backoff, attempt)
                # The text streamed so far is void: the caller drops it on this item.
                yield Retrying(fault.reason, attempt + 1, attempts, delay)
                time.sleep(delay)

    def refused_schema_form(self, body: dict[str, Any], fault: Fault) -> bool:
        """Whether the server refused the request's form of `response_format` (SCHEMA_FORMS): then
        this engine uses the next from now on, and the request is to be sent again in it at once (a
        refusal, not a transient fault: no retry is spent on it, and the next refusal is an error)."""
        asked = body.get("response_format")
        if asked is None or fault.status is None or fault.status < 400 or fault.status == 429:
            return False
        if asked["type"] != self.schema_form or self.schema_form == SCHEMA_FORMS[-1]:
            return False
        self.schema_form = SCHEMA_FORMS[SCHEMA_FORMS.index(self.schema_form) + 1]
        if self.connection.log is not None:
            self.connection.log(
                f"The server at {self.base_url} refused response_format {asked['type']}; asking in its {self.schema_form} form"
            )
        return True

    def attempt(self, body: dict[str, Any], request: Request, chain: Chain | None = None) -> Iterator[Completion]:
        """One request of `body` (`request`'s, in this engine's schema form), streamed; raises
        Fault when the reply is lost or refused, and asks nothing again. `chain` adds its key headers."""
        import httpx2

        user_message, max_tokens = request.text, request.max_tokens
        url = f"{self.base_url}/{request.path}"
        headers = _SSE if chain is None else {**_SSE, **chain.headers}
        reply = _Reply(time.perf_counter(), max_tokens)
        try:
            with self._http.stream("POST", url, json=body, headers=headers) as response:
                if not response.is_success:
                    fault = status_fault(self.base_url, response, read_body(response, self.base_url, self.connection.timeout))
                    raise no_raw_completions(self.base_url) if request.raw and fault.status == 404 else fault
                if "text/event-stream" not in response.headers.get("content-type", "text/event-stream"):
                    # A server that ignored stream: true answers with one JSON completion.
                    answer = read_body(response, self.base_url, self.connection.timeout)
                    yield from self._whole(answer, user_message, max_tokens, reply.start)
                    return
                for line in self._lines(response, reply):
                    if reply.done:
                        # Past [DONE], only the body's end is left to read: read, the connection
                        # goes back to the client's pool for the next request instead of closing.
                        continue
                    for text in self._event(line, reply, max_tokens):
                        yield TextDelta(text)
                    if reply.over or (reply.done and reply.finish is None):
                        break  # leaving the block closes the stream: a runaway server sees us hang up
        except httpx2.TransportError as error:
            if not (reply.done and reply.finish is not None):  # a break after [DONE] loses only the connection
                raise transport_fault(self.base_url, error, self.connection.timeout) from None
        if reply.over:
            # Cut where the server should have cut it: a reply at its budget, finish reason "length".
            # Any usage it sent is the runaway's, so the reply is counted as a served one without usage.
            if self.connection.log is not None:
                self.connection.log(f"The server at {self.base_url} went on past max_tokens ({max_tokens}); stopped reading")
            reply.finish, reply.usage = "length", None
        finish = reply.finish
        if finish == "abort" or (not reply.done and finish is None):
            # SGLang says "abort" when it drops a request; otherwise the connection ended before the reply did.
            raise Fault(
                f"The server at {self.base_url} cut the reply off mid-stream",
                "The server may have crashed or restarted; check its log.",
                transient=True,
            )
        if finish is None:
            # Every server names why a finished reply ended; [DONE] without it is a reply dropped, as
            # llama-cpp-python's server drops one when another request arrives (its interrupt_requests).
            raise Fault(
                f"The server at {self.base_url} ended a reply without finishing it",
                "llama-cpp-python's server drops a reply when another request comes: start it with "
                "--interrupt_requests false, or use --parallel 1.",
                transient=True,
            )
        yield self._done(
            "".join(reply.pieces),
            finish,
            reply.usage,
            reply.timings,
            reply.deltas,
            user_message,
            max_tokens,
            reply.start,
            reply.first,
        )

    def _lines(self, response: httpx2.Response, reply: _Reply) -> Iterator[str]:
        """The stream's lines as they arrive. Raises Fault when `timeout` s pass without a token
        (bytes keep coming, so no read times out); once the reply has its finish reason, that
        silence or a read timeout just ends the stream."""
        import httpx2

        pending = b""
        try:
            # Bytes, not lines: a check after every read, so a line that never ends is no hiding place.
            for data in response.iter_bytes():
                pending += data
                *lines, pending = _LINE_END.split(pending)
                for line in lines:
                    yield line.decode("utf-8", "replace")
                if time.perf_counter() - reply.progress > self.connection.timeout:
                    if reply.finish is not None:
                        return
                    raise stall_fault(self.base_url, self.connection.timeout)
                if len(pending) > _MAX_LINE:
                    raise self._broken_event()
        except httpx2.TimeoutException:
            if reply.finish is None:
                raise
            return
        if pending:
            yield pending.decode("utf-8", "replace")

    def _event(self, line: str, reply: _Reply, max_tokens: int) -> list[str]:
        """Reads one line of the stream into `reply`; returns the reply's text it brought."""
        # SSE: "data: {...}" lines; blank lines end events; ": ping" comments and "event:" lines
        # carry nothing for us. llama-server reports a failure as "error: {...}".
        name, _, value = line.partition(":")
        value = value.strip()
        if name == "error":
            raise self._stream_error(value)
        if name != "data" or not value:
            return []
        if value == "[DONE]":
            reply.done = True
            return []
        try:
            chunk = json.loads(value)
        except ValueError:
            raise self._broken_event() from None
        if not isinstance(chunk, dict):
            return []
        if chunk.get("error") or chunk.get("object") == "error":
            raise self._stream_error(value)
        reply.usage = chunk.get("usage") or reply.usage  # vLLM/SGLang: a last chunk with no choices
        reply.timings = chunk.get("timings") or reply.timings  # llama-server's own counters
        texts: list[str] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or {}
            # Only `content` is the reply; a reasoning parser's `reasoning_content` (`reasoning` in
            # newer vLLM) is not, but its tokens are generated and spend the budget all the same.
            # A raw completion's stream has `text` and no delta.
            text = delta.get("content") if "delta" in choice else choice.get("text")
            if text or delta.get("reasoning_content") or delta.get("reasoning"):
                if reply.past_budget(max_tokens):
                    # A token past the budget: the server is not keeping to max_tokens.
                    reply.over = True
                    return texts
                reply.generated += 1
                reply.progress = time.perf_counter()
            if text:
                if reply.first is None:
                    reply.first = reply.progress
                reply.deltas += 1
                reply.pieces.append(text)
                reply.size += len(text.encode("utf-8"))
                texts.append(text)
                self._recount(reply, max_tokens)
            if choice.get("finish_reason"):
                reply.finish = choice["finish_reason"]
                reply.progress = time.perf_counter()
        return texts

    def _recount(self, reply: _Reply, max_tokens: int) -> None:
        """Counts the reply's tokens with `count_tokens`, when there is one and the reply could have
        reached the budget since the last count. A token is a byte of text at least, so the next
        count is due no sooner than (budget - tokens counted) bytes later: a handful of counts per
        reply, not one per delta (a count may be a request to the server's tokenizer)."""
        if self._count is None or reply.size < reply.next_count:
            return
        reply.counted = self._count("".join(reply.pieces))
        reply.next_count = reply.size + max(1, max_tokens + count_margin(max_tokens) - reply.counted)

    def _broken_event(self) -> Fault:
        return Fault(
            f"The server at {self.base_url} sent a broken stream event",
            "A proxy between us may be cutting the stream; check --base-url.",
            transient=True,
        )

    def _whole(self, body: bytes, user_message: str, max_tokens: int, start: float) -> Iterator[Completion]:
        try:
            payload = json.loads(body)
            choice = payload["choices"][0]
            text = ((choice.get("message") or {}).get("content") if "message" in choice else choice.get("text")) or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise Fault(
                f"The server at {self.base_url} answered with something that is not a chat completion",
                "Check --base-url: it must point at an OpenAI-compatible server.",
                transient=False,
            ) from None
        first = time.perf_counter()
        if text:
            yield TextDelta(text)
        yield self._done(
            text,
            choice.get("finish_reason"),
            payload.get("usage"),
            payload.get("timings"),
            1 if text else 0,
            user_message,
            max_tokens,
            start,
            first,
        )

    def _stream_error(self, value: str) -> Fault:
        """An error the server sent inside the stream (vLLM, SGLang: a data event; llama-server: an error event)."""
        try:
            payload = json.loads(value)
        except ValueError:
            payload = value
        message = message_of(payload) or clip(str(value), MESSAGE_CHARS)
        error = payload.get("error") if isinstance(payload, dict) else None
        code = (error if isinstance(error, dict) else payload if isinstance(payload, dict) else {}).get("code")
        code = code if isinstance(code, int) else None
        transient = code is None or code == 429 or code >= 500
        hint = "Check the server's log." if transient else "The server rejected the request; check --served-model."
        return Fault(f"The server at {self.base_url} reported an error mid-stream: {message}", hint, transient=transient)

    def _done(
        self,
        text: str,
        finish: str | None,
        usage: dict[str, Any] | None,
        timings: dict[str, Any] | None,
        deltas: int,
        user_message: str,
        max_tokens: int,
        start: float,
        first: float | None,
    ) -> CompletionDone:
        end = time.perf_counter()
        first = first if first is not None else end
        if usage and usage.get("completion_tokens") is not None:
            prompt_tokens = int(usage.get("prompt_tokens") or 0)
            completion_tokens = int(usage["completion_tokens"])
            details = usage.get("prompt_tokens_details") or {}
            cached = int(details.get("cached_tokens") or 0)
        else:
            # No usage (llama-cpp-python never sends it when streaming): count the message and the
            # reply ourselves when we can, else a content delta stands for a token; the prompt is then unknown.
            if self._count is not None:
                prompt_tokens, completion_tokens = self._count(user_message), self._count(text)
            else:
                prompt_tokens, completion_tokens = 0, deltas
            cached = 0
        if not cached and timings:
            cached = int(timings.get("cache_n") or 0)  # llama-server: prompt tokens reused from its cache
        if finish not in ("stop", "length"):
            # [DONE] with no finish reason (or "tool_calls", "eos"...): by the budget, as the embedded engine does.
            finish = "length" if finish is None and completion_tokens >= max_tokens else "stop"
        return CompletionDone(
            text=text,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            max_tokens=max_tokens,
            cached_tokens=cached,
            prompt_seconds=first - start,
            generate_seconds=end - first,
        )
