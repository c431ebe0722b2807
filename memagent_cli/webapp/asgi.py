"""The page as an ASGI app: its routes, the gate in front of them (gate.py), the headers every answer
carries, and the pages that say what went wrong; and `serve`, which runs it with uvicorn until it
is stopped.

Every answer forbids what the page does not do (Content-Security-Policy: its own scripts, styles and
images only, no frames, forms sent only to itself) and is never cached by another site. An error is
a page in words with its status (404 for an unknown run, 403 outside the roots); an internal error
is said in one line, never as a traceback.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from ..errors import MemagentError
from .gate import Gate
from .page_settings import PageSettings

if TYPE_CHECKING:
    from jinja2 import Environment
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from .readings import Readings

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # no-referrer would make a form's Origin "null", which the gate refuses
    "x-frame-options": "DENY",
}
log = logging.getLogger("memagent.serve")


def templates() -> Environment:
    from jinja2 import Environment, PackageLoader, select_autoescape

    from ..traces.sharing import shared_time

    env = Environment(loader=PackageLoader("memagent_cli.webapp", "templates"), autoescape=select_autoescape(default=True))
    env.filters["when"] = shared_time  # a stored time as every view shows it: "2026-12-07 18:09:38 UTC"
    return env


def build(settings: PageSettings, readings: Readings | None = None) -> tuple[ASGIApp, Readings]:
    """The app and the readings it starts (close them when the app ends)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from .pages import Pages
    from .readings import Readings
    from .updates import list_events, run_events, watch_events

    readings = readings or Readings(settings)
    env = templates()
    pages = Pages(settings, readings, env)

    def live(handler: Callable[[Pages, Request], Any]) -> Callable[[Request], Any]:
        async def route(request: Request) -> Any:
            return await handler(pages, request)

        return route

    routes = [
        Route("/", pages.runs),
        Route("/live", live(list_events)),
        Route("/conversations", pages.conversations),
        Route("/conversations/{cid}", pages.conversation),
        Route("/conversations/{cid}/ask", pages.follow_up, methods=["POST"]),
        Route("/watches", pages.watches),
        Route("/watches/{watch}", pages.watch),
        Route("/watches/{watch}/live", live(watch_events)),
        Route("/runs/{run}", pages.run),
        Route("/runs/{run}/steps", pages.steps),
        Route("/runs/{run}/evidence", pages.evidence_steps),
        Route("/runs/{run}/live", live(run_events)),
        Route("/runs/{run}/quotes/{n}", pages.quote),
        Route("/runs/{run}/sources/{source}/pages/{page}.png", pages.page_image),
        Route("/runs/{run}/stop", pages.stop, methods=["POST"]),
        Route("/runs/{run}/resume", pages.resume, methods=["POST"]),
        Route("/ask", pages.ask_form),
        Route("/ask", pages.ask, methods=["POST"]),
        Route("/readings/{n}", pages.reading),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Mount("/static", StaticFiles(packages=[("memagent_cli.webapp", "static")]), name="static"),
    ]

    def error_page(status: int, heading: str, message: str) -> Response:
        return pages.render("error.html", code=status, heading=heading, message=message, hint=None)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        headings = {400: "Cannot do that", 403: "Not here", 404: "Not found", 405: "Not allowed", 409: "Cannot do that"}
        return error_page(exc.status_code, headings.get(exc.status_code, "Error"), str(exc.detail))

    async def memagent_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, MemagentError)
        return error_page(400, "Cannot do that", exc.message + (f" {exc.hint}" if exc.hint else ""))

    async def internal(request: Request, exc: Exception) -> Response:
        log.error("internal error on %s: %s: %s", request.url.path, type(exc).__name__, exc)
        return error_page(500, "Internal error", f"memagent met an internal error ({type(exc).__name__}); the log says more.")

    app: Starlette = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, MemagentError: memagent_error, Exception: internal},
    )
    return Gate(_Headers(app), settings), readings


class _Headers:
    """The headers every answer carries (HEADERS)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode("latin-1").lower() not in HEADERS]
                headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with)


def serve(
    settings: PageSettings, announce: Callable[[str], None], *, open_browser: bool = False, log_level: str = "warning"
) -> None:
    """Runs the page until it is stopped (Ctrl-C); the readings it started are stopped (resumable) and
    the model closed after."""
    import uvicorn

    app, readings = build(settings)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=log_level, lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.config.load()
        sockets = [server.config.bind_socket()]
    except OSError as exc:
        raise MemagentError(
            f"Cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}.",
            "Choose another port with --port, or stop what uses it.",
        ) from None
    announce(f"memagent serve: {settings.url}" + (" (give ?token=… once)" if settings.token else ""))
    if open_browser:
        import webbrowser

        webbrowser.open(settings.url)
    try:
        server.run(sockets=sockets)
    finally:
        readings.close()
