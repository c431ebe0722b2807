"""`memagent serve`: the page (memagent_cli/webapp) in a browser: the trace store's runs and
conversations, a run's memory timeline, its quotes on their pages, readings live from any process,
and asking about the documents under ROOTS. A thin layer: the options, which mean what they mean for
`ask`, become PageSettings (docs/SERVE.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import MemagentError
from .common import fail, noter, stderr_console
from .options import flag_groups, option
from .run_flags import RunFlags, setup
from .serving import ServingFlags, real_folders

RootsArg = Annotated[
    Optional[list[Path]],
    typer.Argument(
        metavar="[ROOT]...",
        show_default=False,
        help="Folders whose documents the page may read, list and ask about (default: the directory it starts in).",
    ),
]
HostOpt = Annotated[
    str,
    option("The address to listen on. Another than 127.0.0.1 needs --token.", "--host", metavar="HOST", panel="Server"),
]
PortOpt = Annotated[int, option("The port to listen on.", "--port", metavar="PORT", panel="Server", min=1, max=65535)]
OpenOpt = Annotated[bool, option("Open the page in the browser once it is served.", "--open", panel="Server")]
TokenOpt = Annotated[
    Optional[str],
    option(
        "The token a browser gives once (open http://HOST:PORT/?token=TOKEN; it is kept as a cookie) and a script "
        "sends as Authorization: Bearer TOKEN. Required on an address other machines reach.",
        "--token",
        metavar="TOKEN",
        envvar="MEMAGENT_SERVE_TOKEN",
        show_envvar=True,
        panel="Server",
    ),
]


@flag_groups
def serve(
    roots: RootsArg = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8765,
    open_browser: OpenOpt = False,
    token: TokenOpt = None,
    serving: ServingFlags = ServingFlags(),
    flags: RunFlags = RunFlags(),
) -> None:
    """Serve the page: runs and conversations, each reading as a memory timeline, quotes on their pages, asking.

    Readings recorded by any memagent on this machine (ask, watch, batch, mcp) show live, step by step.
    Questions asked on the page run with the model and settings `ask` would use; the model loads on the
    first one. Only the documents under ROOTS are read or listed.

    Ctrl-C stops the server; a reading it started stays resumable.

    [dim]Examples:[/]
      memagent serve ~/papers --open
      memagent serve ~/docs -m memagent-7b --port 8800
      memagent serve /srv/docs --host 0.0.0.0 --token "$SECRET"
    """
    from ..webapp.page_settings import PageSettings, check_address

    err = stderr_console()
    try:
        check_address(host, token)  # said before anything about the model
        folders = real_folders(roots, hint="Name the folders whose documents the page may read.")
        run = setup(flags, err)  # the model is found now, loaded on the first question
        from ..traces.store import TraceStore

        TraceStore().close()  # the page reads the store: one that cannot open stops here
        settings = PageSettings(
            run,
            folders,
            os.getcwd(),
            host=host,
            port=port,
            token=token,
            ocr=serving.ocr_mode(),
            parallel=serving.slots(run),
        )
        from ..webapp.asgi import serve as run_page

        run_page(settings, noter(err), open_browser=open_browser, log_level="info" if flags.verbose else "warning")
    except MemagentError as exc:
        fail(err, exc)
