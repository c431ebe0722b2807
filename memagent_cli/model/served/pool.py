"""Several OpenAI-compatible servers that serve one model, driven as one `Engine`: `ServedPool`.

Where a request goes: to the usable server with the fewest of the pool's requests in flight, so
load spreads by how fast each server answers; among equals, to the server that gave the chain its
last reply (a chain is one MemAgent loop, see engine.Chain), else the next in turn. The reply is
asked of one server at a time through engine.OpenAIEngine.attempt, so the body, the stream and its
checks are OpenAIEngine's; each server keeps its one HTTP client, shared by every thread.

When a server fails (refused, timed out, 5xx/429, a stream cut: the transient faults OpenAIEngine
retries), the request goes at once to another server, after a Retrying item, and the failed server
rests `backoff * 2**(failures - 1)` seconds (its Retry-After when it sent one; at most
http.MAX_BACKOFF). A resting server's requests in flight fail together; they count as one failure.
Once rested it takes a single request (a probe) until that one's first token proves it back. After
`retries + 1` failures with no answer between them it is dropped for good; when every server is
dropped, the run ends in one MemagentError ("All N servers failed; the last error: ..."). While
every server rests, a request waits for the first to come back, in sleeps of at most POLL seconds.
A fault that is not transient (HTTP 400, an unknown model) ends the request at once, as it does on
one server. The model is `model`, else the first server's first listed model; before a server's
first request its /v1/models must list it, or the run ends (servers of different models would
answer differently).

The chain key. `for_chain(key)` gives a view whose requests carry the key in HTTP headers
(engine.CHAIN_KEY_HEADERS: X-Session-ID and X-SMG-Routing-Key, both with a digest of the key), so
that a session-affine router in front of several replicas keeps a chain on one replica, whose
prefix cache then holds the chain's instructions and question. What the routers read (their source
and documentation, 2025-2026):
- vLLM's Rust router (vllm-project/router, consistent_hash policy): the first of the headers
  x-session-id, x-user-id, x-tenant-id, x-correlation-id, x-request-id, x-trace-id, then the body
  fields session_params.session_id, user, session_id, user_id; X-Session-ID works unconfigured.
- vLLM production-stack router (`--routing-logic session --session-key NAME`): the header NAME,
  else a body field NAME; there is no default, so `--session-key x-session-id`.
- SGLang Model Gateway (sgl-router's successor, smg): the `manual` and `consistent_hashing`
  policies read X-SMG-Routing-Key; `--routing-key-override` (sticky sessions over any policy)
  reads a body `rid`, else the `--routing-key-headers` list, default x-smg-routing-key. Without a
  key, consistent_hashing hashes the Authorization header, the same for every chain.
- llm-d's session-affinity scorer pins by a cookie the gateway sets (`llm-d-session`; earlier
  versions an x-session-token header it returned). Cookies are refused (http.make_client): one
  client serves every chain, so a stored cookie would pin all of them to one pod.
- Ray Serve LLM routes by queue length (power of two) or prefix match (PrefixCacheAffinityRouter);
  neither reads a key.
- LiteLLM proxy keys its session features on x-litellm-session-id, which also groups requests in
  its logs and may cap calls per session; memagent does not send it.
Not the OpenAI body field `user`: vLLM's Rust router reads the header before it anyway, and
LiteLLM books `user` as an end user for its spend tracking.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

from ...errors import EngineGone, MemagentError
from ..engine import Completion, Retrying
from .body import Request, log_request
from .http_engine import Chain, ChainEngine, OpenAIEngine, Sender, normalize_base_url
from .transport import Connection, Fault, retry_delay

POLL = 0.25  # seconds: the longest sleep while every server rests (a probe may bring one back sooner)


@dataclass(eq=False)
class _Server:
    index: int
    engine: OpenAIEngine
    checked: bool  # its model list names the pool's model
    in_flight: int = 0  # the pool's requests on it now
    failures: int = 0  # failures counted since its last answer
    epoch: int = 0  # failures counted ever: an attempt that began before the last one is not counted again
    down_until: float = 0.0  # time.monotonic() when a failed server may take a probe
    probing: bool = False  # a failed server's one request, until its first token
    dropped: bool = False
    check_lock: threading.Lock = field(default_factory=threading.Lock)


class ServedPool(Sender):
    """One model on several OpenAI-compatible servers (vLLM, SGLang, llama-server replicas, or routers)."""

    concurrent = True

    def __init__(
        self, base_urls: Sequence[str], connection: Connection = Connection(), *, count_tokens: Callable[[str], int] | None = None
    ):
        """`connection`: as OpenAIEngine's, for every server; its `timeout`, `retries` and `backoff`
        per server (see the module's docstring)."""
        urls = [normalize_base_url(url) for url in ([base_urls] if isinstance(base_urls, str) else base_urls)]
        if not urls:
            raise ValueError("a pool needs a server")
        twice = sorted({url for url in urls if urls.count(url) > 1})
        if twice:
            raise MemagentError(f"The server {twice[0]} is given twice", "Give each server's --base-url once.")
        self.base_urls = urls
        self.connection = connection
        self._lock = threading.Lock()
        self._turn = 0  # the index of the server next in turn among equals
        self._last_fault: Fault | None = None
        self._servers: list[_Server] = []
        answered = None  # the server that named the model, when none was: it has shown that it serves it
        if not connection.model:
            answered, model = self._ask_model(urls)
            self.connection = replace(connection, model=model)
        try:
            for index, url in enumerate(urls):
                engine = OpenAIEngine(url, self.connection, count_tokens=count_tokens)
                self._servers.append(_Server(index, engine, checked=index == answered))
        except BaseException:
            self.close()
            raise
        self.model = self._servers[0].engine.model
        count = len(urls)
        self.description = f"served: {self.model} on {count} server{'s' * (count > 1)}"

    def _ask_model(self, urls: list[str]) -> tuple[int, str]:
        """The model the pool serves, when none was named: the first server that answers names it
        (a server down at the start is no reason to stop), asked in rounds with backoff between."""
        last: MemagentError | None = None
        retries = self.connection.retries
        for attempt in range(1, retries + 2):
            for index, url in enumerate(urls):
                try:
                    probe = OpenAIEngine(url, replace(self.connection, retries=0))
                except MemagentError as exc:
                    last = exc
                    continue
                probe.close()
                return index, probe.model
            if attempt <= retries:
                time.sleep(min(30.0, self.connection.backoff * 2 ** (attempt - 1)))
        assert last is not None
        raise EngineGone(
            f"All {len(urls)} servers failed; the last error: {last.message}",
            "Are the servers running? Start them (e.g. `vllm serve MODEL`) or check --base-url.",
        )

    def for_chain(self, key: str) -> ChainEngine:
        """A view of the pool whose requests carry `key` and prefer the chain's last server."""
        return ChainEngine(self, key)

    def close(self) -> None:
        for server in self._servers:
            server.engine.close()

    def send(self, request: Request, chain: Chain | None = None) -> Iterator[Completion]:
        """One request on the pool's servers: on the chain's last server when it can take it, and
        again on another (or the same, later) when an attempt fails."""
        limit = len(self._servers) * (self.connection.retries + 1)  # attempts of one request, whatever the servers do
        failed = 0
        while True:
            taken = self._take(chain)
            if isinstance(taken, float):
                time.sleep(taken)
                continue
            server, probe = taken
            epoch = server.epoch
            body = request.body(self.model, server.engine.schema_form)
            stream: Iterator[Completion] | None = None
            retry: Retrying | None = None
            refused_form = False
            try:
                if not server.checked:
                    self._check(server)
                if self.connection.log is not None:
                    log_request(self.connection.log, f"{server.engine.base_url}/{request.path}", body)
                stream = server.engine.attempt(body, request, chain)
                answered = False
                for item in stream:
                    if not answered:
                        answered = True
                        self._answered(server)
                    yield item
                if chain is not None:
                    chain.last = server.index
                return
            except Fault as fault:
                refused_form = server.engine.refused_schema_form(body, fault)
                if not refused_form:
                    if not fault.transient:
                        raise fault.error() from None
                    failed += 1
                    wait = self._failed(server, epoch, fault)
                    if wait is None:
                        raise self._all_failed() from None
                    if failed >= limit:
                        fault.attempts = failed
                        if len(self._servers) == 1:
                            raise fault.error() from None
                        raise MemagentError(
                            f"{fault.reason} ({failed} attempts on {len(self._servers)} servers)", fault.hint
                        ) from None
                    retry = Retrying(self._reason(fault, wait), failed + 1, limit, wait)
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()  # a stream left early (Ctrl-C) hangs up on its server now
                self._release(server, probe)
            if refused_form:
                continue  # sent again at once, in the form this server takes
            # The text streamed so far is void: the caller drops it on this item.
            assert retry is not None  # the attempt returned or raised otherwise
            yield retry

    # --- the servers' health, under the lock ------------------------------------------------

    def _take(self, chain: Chain | None) -> tuple[_Server, bool] | float:
        """A server for a request and whether it is a probe, counted in flight; or, while every
        server rests, how long to sleep before asking again. Raises when every server is dropped."""
        with self._lock:
            now = time.monotonic()
            best: _Server | None = None
            soonest = POLL
            alive = False
            for server in self._servers:
                if server.dropped:
                    continue
                alive = True
                if server.failures and (server.probing or server.down_until > now):
                    if not server.probing:
                        soonest = min(soonest, server.down_until - now)
                    continue
                if (
                    best is None
                    or server.in_flight < best.in_flight
                    or (server.in_flight == best.in_flight and self._before(server, best, chain))
                ):
                    best = server
            if not alive:
                raise self._all_failed()
            if best is None:
                return max(soonest, 0.001)
            best.in_flight += 1
            probe = best.failures > 0
            best.probing = best.probing or probe
            self._turn = (best.index + 1) % len(self._servers)
            return best, probe

    def _before(self, server: _Server, other: _Server, chain: Chain | None) -> bool:
        """Whether `server` goes before `other`, both as busy: the chain's last, else the next in turn."""
        last = chain.last if chain is not None else None
        if last is not None and last in (server.index, other.index):
            return server.index == last
        count = len(self._servers)
        return (server.index - self._turn) % count < (other.index - self._turn) % count

    def _answered(self, server: _Server) -> None:
        """The server's reply has begun: it is well, whatever it did before."""
        if not server.failures:  # read without the lock: only a failed server needs it
            return
        with self._lock:
            if server.failures and not server.dropped:
                server.failures, server.down_until, server.probing = 0, 0.0, False
                if self.connection.log is not None:
                    self.connection.log(f"The server at {server.engine.base_url} answers again")

    def _release(self, server: _Server, probe: bool) -> None:
        with self._lock:
            server.in_flight -= 1
            if probe:
                server.probing = False

    def _failed(self, server: _Server, epoch: int, fault: Fault) -> float | None:
        """Counts a transient fault of a request that began at `epoch` on `server`; returns how long
        until some server can take the request again (0: one can now), or None when none is left."""
        with self._lock:
            self._last_fault = fault
            now = time.monotonic()
            if server.epoch == epoch and not server.dropped:
                server.epoch += 1
                server.failures += 1
                if server.failures > self.connection.retries:
                    server.dropped = True
                    if self.connection.log is not None:
                        self.connection.log(f"{fault.reason}; server dropped after {server.failures} failed attempts")
                else:
                    rest = retry_delay(fault, self.connection.backoff, server.failures)
                    server.down_until = now + rest
                    if self.connection.log is not None:
                        self.connection.log(f"{fault.reason}; the server rests {rest:.1f} s")
            waits = [
                max(s.down_until - now, 0.0) if s.failures and not s.probing else POLL if s.failures else 0.0
                for s in self._servers
                if not s.dropped
            ]
            return min(waits) if waits else None

    def _check(self, server: _Server) -> None:
        """Before a server's first request: it must list the pool's model. Raises Fault."""
        with server.check_lock:
            if server.checked:
                return
            names = server.engine.models()
            if self.model not in names:
                raise Fault(
                    f"The server at {server.engine.base_url} serves {', '.join(names) or 'no model'}, not {self.model}",
                    "Every --base-url must serve the same model: check the list, or name the model with --served-model.",
                    transient=False,
                )
            server.checked = True

    def _reason(self, fault: Fault, wait: float) -> str:
        if len(self._servers) == 1:
            return fault.reason
        return f"{fault.reason}; " + ("another server takes the reply" if wait == 0 else "every server is resting")

    def _all_failed(self) -> MemagentError:  # EngineGone for a pool of several
        fault = self._last_fault
        assert fault is not None  # servers are dropped only by _failed, which keeps the fault
        if len(self._servers) == 1:
            fault.attempts = self.connection.retries + 1
            return fault.error()
        return EngineGone(f"All {len(self._servers)} servers failed; the last error: {fault.reason}", fault.hint)
