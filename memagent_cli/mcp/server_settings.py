"""What a `memagent mcp` server is started with (the command's options, checked), and the bounds
that every call is held to, which the tool descriptions quote."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import AgentConfig
from ..errors import EXIT_USAGE, MemagentError
from ..ingest.base import OcrMode
from ..model.backends import EngineOptions
from ..model.served.hosts import is_loopback
from ..runs.setup import RunSetup

# The bounds of one call beside runs/guard.py's: a host is a language model, and a document can ask it for anything.
MAX_QUESTIONS = 50  # questions one `ask` call takes
MAX_RUNS = 1_000  # runs one `ask` call makes (documents x questions with `each`)


@dataclass(frozen=True)
class HttpAddress:
    """Where `--http [HOST:]PORT` serves the streamable HTTP transport."""

    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"


def parse_http(value: str) -> HttpAddress:
    """`PORT`, `HOST:PORT` or `[IPv6]:PORT`; the host is 127.0.0.1 unless given."""
    text = value.strip()
    host, _, port_text = text.rpartition(":")
    if text.startswith("[") and "]" in text:
        host = text[1 : text.index("]")]
        port_text = text[text.index("]") + 1 :].lstrip(":")
    host = host or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise MemagentError(
            f"--http {value!r} is not [HOST:]PORT.", "e.g. --http 8765 or --http 127.0.0.1:8765", exit_code=EXIT_USAGE
        )
    return HttpAddress(host, port)


@dataclass(frozen=True)
class ServerSettings:
    """Everything a server runs with: the model and its defaults (what `ask`'s options mean),
    where it may read (`allow`, real paths), and how it is reached."""

    run: RunSetup  # the model (None: a served engine that tokenizes itself), its settings and engine
    allow: tuple[str, ...]
    ocr: OcrMode = "auto"
    parallel: int = 4  # runs in flight at once where the engine takes several (a server, a batching GPU)
    http: HttpAddress | None = None  # None: stdio
    token: str | None = None  # the bearer token HTTP requests must carry
    cwd: str = ""  # what relative paths are taken from: the directory the server was started in
    log_level: str = "WARNING"  # the SDK's own log on stderr

    @property
    def model(self) -> str | None:
        return self.run.model

    @property
    def config(self) -> AgentConfig:
        return self.run.config

    @property
    def engine(self) -> EngineOptions:
        return self.run.engine

    def __post_init__(self) -> None:
        if self.http is not None and not self.http.loopback and not self.token:
            raise MemagentError(
                f"--http {self.http.host}:{self.http.port} is reachable from other machines, so it needs --token.",
                "Give --token SECRET (clients send it as Authorization: Bearer SECRET), or bind 127.0.0.1.",
                exit_code=EXIT_USAGE,
            )
