"""`memagent mcp`: serve memagent to MCP hosts (Claude Desktop, Claude Code, VS Code, Cursor)
over stdio, or streamable HTTP with --http. A thin layer: the options, which mean what they mean
for `ask`, become ServerSettings, and memagent_cli.mcp runs the server (docs/MCP.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

from ..errors import EXIT_USAGE, MemagentError
from ..runs.setup import RunSetup
from .common import fail, noter, stderr_console
from .options import flag_groups, option
from .run_flags import RunFlags, setup
from .serving import ServingFlags, real_folders

if TYPE_CHECKING:
    from ..mcp.server_settings import ServerSettings


HttpOpt = Annotated[
    Optional[str],
    option(
        "Serve the streamable HTTP transport at http://HOST:PORT/mcp (host 127.0.0.1 unless given) instead of stdio.",
        "--http",
        metavar="[HOST:]PORT",
        panel="Server",
    ),
]
TokenOpt = Annotated[
    Optional[str],
    option(
        "With --http: the bearer token every request must carry (Authorization: Bearer TOKEN). "
        "Required when bound to an address other machines reach.",
        "--token",
        metavar="TOKEN",
        envvar="MEMAGENT_MCP_TOKEN",
        show_envvar=True,
        panel="Server",
    ),
]
AllowOpt = Annotated[
    Optional[list[Path]],
    option(
        "A folder whose files the server may read (repeatable). Default: the directory it starts in. "
        "Hosts that declare roots narrow this further.",
        "--allow",
        metavar="DIR",
        panel="Server",
    ),
]


@flag_groups
def mcp(
    http: HttpOpt = None,
    token: TokenOpt = None,
    allow: AllowOpt = None,
    serving: ServingFlags = ServingFlags(),
    flags: RunFlags = RunFlags(),
) -> None:
    """Serve memagent to MCP hosts: tools to ask, inspect and resume runs, and read traces.

    Speaks stdio by default (the host starts it); --http serves streamable HTTP.

    The model loads on the first call and serves every call after. Only files under --allow are read.

    [dim]Examples:[/]
      claude mcp add memagent -- memagent mcp --allow ~/papers
      memagent mcp --http 8765 --allow ~/docs
      memagent mcp --http 0.0.0.0:8765 --token "$SECRET" --allow /srv/docs
    """
    err = stderr_console()
    try:
        run = setup(flags, err)  # the model is found now, loaded on the first call
        settings = _settings(
            run,
            http=http,
            token=token,
            allow=allow,
            serving=serving,
            verbose=flags.verbose,
        )
    except MemagentError as exc:
        fail(err, exc)
    from ..mcp.server import serve

    try:
        serve(settings, announce=noter(err))
    except MemagentError as exc:
        fail(err, exc)


def _settings(
    run: RunSetup,
    *,
    http: str | None,
    token: str | None,
    allow: list[Path] | None,
    serving: ServingFlags,
    verbose: bool,
) -> ServerSettings:
    """The server's settings, checked before it starts: the folders exist, the trace store opens."""
    from ..mcp.server_settings import ServerSettings, parse_http
    from ..traces.store import TraceStore

    folders = real_folders(allow, "--allow ")
    address = parse_http(http) if http else None
    if token and address is None:
        raise MemagentError("--token goes with --http: stdio has no requests to check.", exit_code=EXIT_USAGE)
    TraceStore().close()  # runs are recorded (resume needs them): a store that cannot open stops here
    return ServerSettings(
        run,
        allow=folders,
        ocr=serving.ocr_mode(),
        parallel=serving.slots(run),
        http=address,
        token=token,
        cwd=os.getcwd(),
        log_level="INFO" if verbose else "WARNING",
    )
