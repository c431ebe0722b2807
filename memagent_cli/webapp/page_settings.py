"""What `memagent serve` serves with: the run setup its readings use (the model is loaded on the first
question), the folders it may read and list (its roots), where it listens and the token another
machine must give; checked before it starts."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ..errors import EXIT_USAGE, MemagentError
from ..ingest.base import OcrMode
from ..model.served.hosts import is_loopback
from ..runs.setup import RunSetup

DEFAULT_PORT = 8765


@dataclass(frozen=True)
class PageSettings:
    """`run`: the model and settings of a question asked on the page (what `ask` would use); `roots`:
    real paths of the folders the page may read and list; `token`: what a request from elsewhere
    than this machine's loopback must carry; `secret`: the page's own token, which every request that
    changes something carries (a page from another site cannot know it)."""

    run: RunSetup
    roots: tuple[str, ...]
    cwd: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    ocr: OcrMode = "auto"
    parallel: int = 4
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    def __post_init__(self) -> None:
        check_address(self.host, self.token)

    @property
    def url(self) -> str:
        """Where a browser on this machine opens the page."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/"


def check_address(host: str, token: str | None) -> None:
    """An address other machines reach is served only behind a token."""
    if not is_loopback(host) and not token:
        raise MemagentError(
            f"--host {host} is reachable from other machines, so it needs --token.",
            "Give --token SECRET (open the page once as http://HOST:PORT/?token=SECRET), or keep the default 127.0.0.1.",
            exit_code=EXIT_USAGE,
        )
