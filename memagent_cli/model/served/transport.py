"""HTTP to a served engine: how a server is asked and waited for (`Connection`: its key, the
model's name, the timeout, the retries and where requests are logged, one value that the engine,
each server of a pool and the server's tokenizer take), the client (`make_client`), one JSON
request (`post_json`), retries with backoff (`with_retries`, `retry_delay`), and the
classification of what went wrong into a `Fault` (transient or not, with the line and hint a user
sees), from an HTTP status (`status_fault`), a transport error (`transport_fault`) or the error
text a server sent (`message_of`), on one line (display.clip).

How long a silent server is waited for: `timeout` (seconds, `DEFAULT_TIMEOUT` unless the caller
says otherwise) bounds each wait for the server's next byte, the connect (never longer than
`CONNECT_TIMEOUT`) and every read; a request that times out is a transient fault, asked again up
to `retries` times with the usual backoff. So a server that accepts connections and never answers
ends in a `MemagentError` ("The server at URL timed out: it sent nothing for N s (A attempts)")
after `longest_wait(timeout, retries, backoff)` seconds at most: timeout × attempts plus the sleeps.

An answer that is not streamed is read whole by `read_body`, within `timeout` of its start and
`MAX_BODY` bytes, so a server that dribbles one cannot hold a run. The OpenAI engine (engine.py)
and the server's tokenizer (tokenizer.py) share it. httpx2 (the HTTP
client memagent already has through huggingface_hub) is imported inside functions, so importing
this module loads no HTTP client until a server is used.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ...display import clip
from ...errors import MemagentError

if TYPE_CHECKING:
    import httpx2

MAX_BACKOFF = 30.0  # seconds: the longest wait between two attempts that we choose ourselves
MAX_RETRY_AFTER = 120.0  # a server's Retry-After is honoured up to this, so a bad header cannot hang a run
CONNECT_TIMEOUT = 10.0  # a host that does not answer a TCP connect in this long is not coming
MAX_BODY = 32 << 20  # bytes: an answer that is not streamed (a model list, an error, a completion) is far less
# The longest silence from a server, in seconds, before an attempt is given up (--timeout). The wait
# that must fit in it is the one before a reply's first byte, which a server spends queueing the
# request and reading its prompt (~6K tokens: a chunk, the memory and the question) and sends
# nothing meanwhile. On a GPU (vLLM, SGLang, llama-server) that is seconds. On a CPU, llama-server
# reads a 7B-14B model's prompt at some 20-100 tokens/s, one to five minutes for 6K tokens, and with
# more requests in flight than it has slots a request also waits for another reply to end. 300 s
# covers that slow end; 600 s (the OpenAI client's default, and memagent's before --timeout) left
# an interactive user facing a dead server for ten minutes per attempt, and 120 s would give up on
# a CPU server that is merely slow. Whoever knows their server is fast can pass less.
DEFAULT_TIMEOUT = 300.0


# --- faults --------------------------------------------------------------------------------


class Fault(Exception):
    """One failed attempt. `reason` is the one line a Retrying item or the final error shows."""

    def __init__(
        self,
        reason: str,
        hint: str,
        *,
        transient: bool,
        retry_after: float | None = None,
        status: int | None = None,
        undecodable: bool = False,
    ):
        super().__init__(reason)
        self.reason = reason
        self.hint = hint
        self.transient = transient
        self.retry_after = retry_after
        self.status = status  # the HTTP status when the server answered, None when it did not
        self.undecodable = undecodable  # llama-cpp-python could not turn these ids into UTF-8 text
        self.attempts = 1  # how many attempts had failed when we gave up

    def error(self) -> MemagentError:
        tries = f" ({self.attempts} attempts)" if self.attempts > 1 else ""
        return MemagentError(self.reason + tries, self.hint)


_RUNNING_HINT = "Is the server running? Start it (e.g. `vllm serve MODEL`) or check --base-url."
_SLOW_HINT = "It may be overloaded or stuck: check its log, or give it longer with --timeout."
MESSAGE_CHARS = 200  # the most of a server's error text a user is shown, on one line


def _server_message(body: bytes) -> str:
    """The error text a server put in its answer: {"error": {"message"}} (OpenAI, vLLM, llama-server,
    llama-cpp-python), {"message"} (SGLang, older vLLM), {"detail"} (FastAPI), else the body itself."""
    text = body.decode("utf-8", "replace")
    try:
        payload = json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        return clip(text, MESSAGE_CHARS)
    return message_of(payload) or clip(text, MESSAGE_CHARS)


def read_body(response: httpx2.Response, base: str, timeout: float) -> bytes:
    """The body of an answer that is not streamed, read as it comes. The read timeout bounds only
    the silence between two bytes, so a server that dribbles its answer (a byte inside each
    timeout) or sends one without end would hold the run for good: the body must come whole
    within `timeout` s of its start, and in at most MAX_BODY bytes."""
    import httpx2

    chunks: list[bytes] = []
    size, started = 0, time.perf_counter()
    try:
        for data in response.iter_bytes():
            size += len(data)
            if size > MAX_BODY:
                raise Fault(
                    f"The server at {base} sent an answer of more than "
                    + (f"{MAX_BODY >> 20} MiB" if MAX_BODY >= 1 << 20 else f"{MAX_BODY:,} bytes"),
                    "Check --base-url: it must point at an OpenAI-compatible server.",
                    transient=False,
                )
            chunks.append(data)
            if time.perf_counter() - started > timeout:
                raise Fault(f"The server at {base} took more than {timeout:g} s to send one answer", _SLOW_HINT, transient=True)
    except httpx2.TransportError as error:
        raise transport_fault(base, error, timeout) from None
    return b"".join(chunks)


def message_of(payload: Any) -> str:
    if isinstance(payload, dict):
        for key in ("error", "message", "detail"):
            value = payload.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("msg")
            if isinstance(value, list):  # FastAPI validation errors: a list of {"msg", "loc"}
                value = "; ".join(str(item.get("msg", item)) if isinstance(item, dict) else str(item) for item in value)
            if value:
                return clip(str(value), MESSAGE_CHARS)
    return ""


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def status_fault(base: str, response: httpx2.Response, body: bytes) -> Fault:
    """What an answer with a status other than 2xx means; `body` is its body (read_body)."""
    status = response.status_code
    message = _server_message(body)
    said = f"The server at {base} answered HTTP {status}" + (f": {message}" if message else "")
    if status == 429:
        return Fault(
            said,
            "The server is turning requests away (rate limit or full queue); try again later.",
            transient=True,
            retry_after=_retry_after(response.headers.get("Retry-After")),
            status=status,
        )
    if status >= 500:
        # llama-cpp-python's /extras/detokenize answers 500 when the ids end inside a character:
        # retrying cannot help, the caller decodes around it.
        undecodable = "can't decode" in message
        return Fault(
            said,
            "Check the server's log.",
            transient=not undecodable,
            retry_after=_retry_after(response.headers.get("Retry-After")),
            status=status,
            undecodable=undecodable,
        )
    if status in (401, 403):
        hint = "Check --api-key: it must be the key the server was started with."
    elif status == 404:
        hint = (
            f"Check --served-model (GET {base}/models lists the names the server answers to) "
            "and --base-url (the OpenAI API is under /v1)."
        )
    elif re.search(r"context|too long|maximum|length|tokens", message, re.IGNORECASE):
        hint = (
            "The prompt may not fit the server's context: start it with a longer one (vLLM --max-model-len, "
            "llama-server --ctx-size) or lower --chunk-tokens / --memory-tokens."
        )
    else:
        hint = "The server rejected the request; check --served-model and --base-url."
    return Fault(said, hint, transient=False, status=status)


def transport_fault(base: str, error: Exception, timeout: float) -> Fault:
    import httpx2

    if isinstance(error, httpx2.ConnectTimeout):
        return Fault(
            f"The server at {base} did not accept a connection within {min(timeout, CONNECT_TIMEOUT):g} s",
            _RUNNING_HINT,
            transient=True,
        )
    if isinstance(error, httpx2.TimeoutException):  # read, write or pool timeout
        return Fault(f"The server at {base} timed out: it sent nothing for {timeout:g} s", _SLOW_HINT, transient=True)
    if isinstance(error, httpx2.ConnectError):
        if "refused" in str(error).lower():
            return Fault(f"The server at {base} refused the connection", _RUNNING_HINT, transient=True)
        return Fault(
            f"The server at {base} could not be reached ({clip(str(error), 120) or type(error).__name__})",
            _RUNNING_HINT,
            transient=True,
        )
    # RemoteProtocolError, ReadError...: the connection broke while the answer was coming.
    return Fault(
        f"The server at {base} cut the reply off mid-stream ({type(error).__name__})",
        "The server may have crashed or restarted; check its log.",
        transient=True,
    )


def stall_fault(base: str, timeout: float) -> Fault:
    """A stream that stays open and keeps sending bytes (SSE comments such as ": ping", events
    with no text) but no token for `timeout` s: the same silence as a read timeout, for a reply."""
    return Fault(f"The server at {base} timed out: it sent no tokens for {timeout:g} s", _SLOW_HINT, transient=True)


def retry_delay(fault: Fault, backoff: float, attempt: int) -> float:
    """Seconds to wait before attempt `attempt + 1`: the server's Retry-After, else backoff * 2^(attempt-1)."""
    if fault.retry_after is not None:
        return fault.retry_after
    doubling: int = 2 ** (attempt - 1)  # attempt >= 1, so a whole number
    return min(backoff * doubling, MAX_BACKOFF)


def longest_wait(timeout: float, retries: int, backoff: float) -> float:
    """The longest a request to a server that accepts connections and never answers is waited for
    before the error: `timeout` for each of the retries + 1 attempts, and the backoff between them."""
    retries = max(0, retries)
    sleeps = sum(min(backoff * 2.0 ** (attempt - 1), MAX_BACKOFF) for attempt in range(1, retries + 1))
    return timeout * (retries + 1) + sleeps


def check_timeout(timeout: float) -> float:
    """`timeout` when it is a usable number of seconds; ValueError otherwise (0, negative, inf, nan)."""
    if not (isinstance(timeout, (int, float)) and 0 < timeout < float("inf")):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


@dataclass(frozen=True)
class Connection:
    """How a server is asked and waited for: the same for an engine, each server of a pool and the
    server's tokenizer. `timeout` is checked on construction (ValueError: see `check_timeout`)."""

    api_key: str | None = field(default=None, repr=False)  # sent as a bearer token; never recorded
    model: str | None = None  # the model's name on the server; None: the first it lists
    timeout: float = DEFAULT_TIMEOUT  # the longest silence, in seconds, before an attempt is given up
    retries: int = 4  # attempts after the first, for a transient fault
    backoff: float = 1.0  # seconds before the first retry, doubling after each (`retry_delay`)
    log: Callable[[str], None] | None = field(default=None, repr=False, compare=False)  # where --verbose shows requests

    def __post_init__(self) -> None:
        object.__setattr__(self, "timeout", check_timeout(self.timeout))
        object.__setattr__(self, "retries", max(0, self.retries))

    def client(self) -> httpx2.Client:
        return make_client(self.api_key, self.timeout)


def make_client(api_key: str | None, timeout: float = DEFAULT_TIMEOUT) -> httpx2.Client:
    import httpx2

    timeout = check_timeout(timeout)
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    # The read timeout bounds the silence between two bytes (a long prefill sends nothing), the
    # connect timeout is short: an absent server should be reported at once, not after minutes.
    # No cap on connections: the caller bounds its requests in flight (--parallel), and a cap below
    # that would queue requests inside the client, where the wait counts against the timeout.
    # Cookies are refused: one client serves every chain, so a cookie a load balancer sets for
    # stickiness (ingress affinity, llm-d's session cookie) would pin all of them to one replica.
    return httpx2.Client(
        headers=headers,
        timeout=httpx2.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
        limits=httpx2.Limits(max_connections=None, max_keepalive_connections=None),
        cookies=http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
    )


def post_json(
    client: httpx2.Client, base: str, url: str, body: Mapping[str, Any] | None, timeout: float, *, method: str = "POST"
) -> Any:
    """One JSON request; raises Fault for anything but a 2xx answer with a JSON body."""
    import httpx2

    try:
        with client.stream(method, url, json=body) as response:
            data = read_body(response, base, timeout)
    except httpx2.TransportError as error:
        raise transport_fault(base, error, timeout) from None
    if not response.is_success:
        raise status_fault(base, response, data)
    try:
        return json.loads(data)
    except ValueError:
        raise Fault(
            f"The server at {base} answered {url} with something that is not JSON",
            "Check --base-url: it must point at an OpenAI-compatible server.",
            transient=False,
        ) from None


def with_retries(call: Callable[[], Any], connection: Connection) -> Any:
    """Runs `call` until it succeeds or fails for good (raising the last Fault), retrying as
    `connection` says; for requests that stream nothing (the model list, the tokenizer), where there
    is no caller to hand Retrying items to."""
    attempts = connection.retries + 1
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Fault as fault:
            if not fault.transient or attempt == attempts:
                fault.attempts = attempt
                raise
            delay = retry_delay(fault, connection.backoff, attempt)
            if connection.log is not None:
                connection.log(f"{fault.reason}; attempt {attempt + 1} of {attempts} in {delay:.1f} s")
            time.sleep(delay)
    raise AssertionError("unreachable")
