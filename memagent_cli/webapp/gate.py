"""What every request to the page must pass before a route sees it (an ASGI middleware), and the
page's own token that every request that changes something carries.

- **Host** (against DNS rebinding: a site whose name resolves to 127.0.0.1 reaches the server, but
  with its own name in Host): served on a loopback address, a request must name a loopback host
  (model/served/hosts.py's one rule); on a named address, that name or a loopback one; on every
  address (0.0.0.0), any, the token guarding it.
- **Origin**: a browser's request from another site (its Origin not this page's own) is refused.
- **--token**: a request carries it as a cookie (set when the page is first opened as
  `/?token=T`), or as `Authorization: Bearer T`; compared in constant time.
- **The page's secret** (`PageSettings.secret`): each form that asks for something carries it, and
  `checked_form` refuses a request without it (403), so a page on another site cannot submit one.
"""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlparse

from ..model.served.hosts import is_loopback, is_this_host
from .page_settings import PageSettings

if TYPE_CHECKING:
    from starlette.datastructures import FormData
    from starlette.requests import Request
    from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_COOKIE = "memagent_token"


class Gate:
    """The checks above, in front of the app."""

    def __init__(self, app: ASGIApp, settings: PageSettings):
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        host = headers.get("host", "")
        refusal = self._refusal(host, headers.get("origin"))
        if refusal is not None:
            await _plain(403, refusal)(scope, receive, send)
            return
        token = self.settings.token
        if token is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            given = query.get("token")
            if given is not None and _same(given, token):
                await _with_cookie(scope, query, token)(scope, receive, send)
                return
            if not (_same(_cookie(headers), token) or _same(_bearer(headers), token)):
                await _plain(401, "This page needs its token: open it as http://HOST:PORT/?token=TOKEN.")(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, host: str, origin: str | None) -> str | None:
        name = urlparse(f"//{host}").hostname or ""
        bound = self.settings.host
        if not host_allowed(name, bound):
            return "Invalid Host header: this server answers to its own address only."
        if origin is not None and urlparse(origin).netloc.lower() != host.lower():
            return "Invalid Origin header: requests from other sites are refused."
        return None


def host_allowed(name: str, bound: str) -> bool:
    """Whether a request naming host `name` may reach a server bound to `bound`."""
    if is_this_host(bound) and not is_loopback(bound):  # every address: the token guards it
        return True
    if is_loopback(name):
        return True
    return not is_loopback(bound) and name.strip("[]").lower() == bound.strip("[]").lower()


async def checked_form(request: Request, settings: PageSettings) -> FormData:
    """A form that asks for something, once it carries the page's secret; 403 otherwise."""
    from starlette.exceptions import HTTPException

    form = await request.form()
    given = form.get("secret")
    if not isinstance(given, str) or not _same(given, settings.secret):
        raise HTTPException(403, "This form did not come from this page (its secret is missing or wrong). Reload the page.")
    return form


def _same(given: str | None, wanted: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8"), wanted.encode("utf-8"))


def _cookie(headers: dict[str, str]) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header: as if none
        return None
    found = jar.get(TOKEN_COOKIE)
    return found.value if found is not None else None


def _bearer(headers: dict[str, str]) -> str | None:
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _plain(status: int, text: str) -> Any:
    from starlette.responses import PlainTextResponse

    return PlainTextResponse(text, status_code=status)


def _with_cookie(scope: Scope, query: dict[str, str], token: str) -> Any:
    """The same address without its token, which is kept as a cookie instead (out of the history)."""
    from starlette.responses import RedirectResponse

    rest = {k: v for k, v in query.items() if k != "token"}
    target = scope.get("path", "/") + (f"?{urlencode(rest)}" if rest else "")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
    return response
