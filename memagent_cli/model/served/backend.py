"""A served engine as a backend: `ServedOptions` (the servers, the connection, the served model's
name; `connection()` gives them as the http.Connection the engine takes), and `normal_servers`,
the one place where server URLs are put in their normal form and repeats dropped, before anything
compares them: `http://h:8000` and `http://h:8000/v1/` are one server. One server opens an
`OpenAIEngine`; several, a `ServedPool` (imported when opened)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable
from urllib.parse import urlsplit

from ..backends import EngineOptions, register
from .hosts import is_this_host
from .http_engine import normalize_base_url
from .transport import DEFAULT_TIMEOUT, Connection

if TYPE_CHECKING:
    from ..chat_template import ChatFormat
    from ..engine import Engine
    from ..gguf import GGUFInfo
    from ..tokenizer import Tokenizer


def normal_servers(urls: Iterable[str]) -> tuple[tuple[str, ...], list[str]]:
    """The servers `urls` name, each in its normal form and once, in order; and a note for each URL
    that named a server already given (spelled otherwise, or repeated)."""
    servers: list[str] = []
    notes: list[str] = []
    for url in urls:
        normal = normalize_base_url(url)
        if normal in servers:
            same = "" if url.strip() == normal else f" (as {normal})"
            notes.append(f"{url}{same} names a server already given: it is used once.")
        else:
            servers.append(normal)
    return tuple(servers), notes


def is_local(url: str) -> bool:
    """Whether the server at `url` is on this host, as its URL names it (no name is looked up):
    localhost, a loopback address (127.0.0.0/8, ::1) or the unspecified one (0.0.0.0, which a
    client reaches here)."""
    return is_this_host(urlsplit(normalize_base_url(url)).hostname or "")


@register
@dataclass(frozen=True)
class ServedOptions(EngineOptions):
    """A server with an OpenAI-compatible API runs the model (vLLM, SGLang, llama-server), or a pool
    of servers of one model. `servers` is normalized on construction (see `normal_servers`)."""

    kind = "openai"
    served = True
    servers: tuple[str, ...] = field(default=())
    api_key: str | None = field(default=None, repr=False)  # sent as a bearer token; never recorded
    served_model: str | None = None  # the model's name on the server; None: the one it serves
    timeout: float | None = None  # the longest silence waited for, per attempt; None: served.transport's default
    tokenizer: str | None = None  # the GGUF (or model name) whose vocabulary cuts the chunks, as given; None: the server's
    log: Callable[[str], None] | None = field(default=None, repr=False, compare=False)  # where --verbose shows requests

    def __post_init__(self) -> None:
        servers, _ = normal_servers(self.servers)
        if not servers:
            raise ValueError("ServedOptions needs a server")
        object.__setattr__(self, "servers", servers)

    def describe(self, info: GGUFInfo | None) -> str:
        return self.served_model or "served model"

    @property
    def wait(self) -> float:
        """The longest silence waited for, in seconds."""
        return DEFAULT_TIMEOUT if self.timeout is None else self.timeout

    def connection(self) -> Connection:
        """How every server is asked: the key, the served model's name, the timeout and the log."""
        return Connection(api_key=self.api_key, model=self.served_model, timeout=self.wait, log=self.log)

    def open(self, info: GGUFInfo | None, tokenizer: Tokenizer, chat: ChatFormat | None, n_ctx: int, sequences: int) -> Engine:
        def count(text: str) -> int:
            return len(tokenizer.encode(text))

        if len(self.servers) > 1:
            from .pool import ServedPool

            return ServedPool(self.servers, self.connection(), count_tokens=count)
        from .http_engine import OpenAIEngine

        return OpenAIEngine(self.servers[0], self.connection(), count_tokens=count)

    def tokenizer_note(self) -> str | None:
        """What to say once in a run whose chunks a server on another host tokenizes (no
        --tokenizer, no -m): a round trip over the network for each part of the document, which a
        local vocabulary saves. None where there is one, or the server is on this host."""
        if self.tokenizer is not None or is_local(self.servers[0]):
            return None
        return (
            f"the server at {self.servers[0]} tokenizes the document, a round trip per chunk; "
            "--tokenizer MODEL_OR_GGUF (or -m) cuts the chunks here instead."
        )

    def own_tokenizer(self) -> Tokenizer:
        from .server_tokenizer import remote_tokenizer

        return remote_tokenizer(self.servers[0], self.connection())

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "servers": list(self.servers), "served_model": self.served_model, "tokenizer": self.tokenizer}

    def decides(self) -> dict[str, Any]:
        # The model by its name on the servers; where none was named, the servers stand for it.
        named = {"served_model": self.served_model} if self.served_model else {"servers": sorted(self.servers)}
        return {"kind": self.kind, **named}
