"""The MCP server itself, on the official SDK: its tools (ask, inspect, resume, traces_list,
trace_show) and its resource (memagent://traces/{id}), bound to tools.py, and the transports:
stdio, or streamable HTTP with the SDK's Host/Origin checks and an optional bearer token.

This module, and with it the SDK, is imported when a server is built (cli/mcp.py), never when
memagent starts. `build` makes the server and registers the tools a group at a time (`_add_ask`,
`_add_inspect_resume`, `_add_traces`); each group's tools are defined inside its function with real
(not postponed) annotations, because the SDK reads their signatures at runtime to make each tool's
JSON schema (types, bounds and the Field descriptions below). The parameters that mean one thing
wherever they stand are declared once below (`ClientRoots`, `IncludeGlobs`, `ExcludeGlobs`); what
the tools share at runtime (descriptions, annotations, roots, the request's host, a tool's answer)
is `_shared`'s, and ask's and resume's output schema `_ask_output`'s.
"""

import hmac
import ipaddress
import json
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Awaitable, Callable, Optional, Union, cast

from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp_types import CallToolResult, ListRootsResult, ToolAnnotations
from pydantic import BaseModel, Field

from ..errors import MemagentError
from ..runs.guard import MAX_FILES, Roots, client_roots
from ..runs.shared import SharedModel
from ..version import __version__
from .calls import Host, Queue
from .server_settings import MAX_QUESTIONS, HttpAddress, ServerSettings
from .texts import (
    ASK,
    INSPECT,
    INSTRUCTIONS,
    RESUME,
    TRACE_RESOURCE,
    TRACE_SHOW,
    TRACES_LIST,
    concurrency_rule,
    describe,
)
from .tools import TRACE_URI, Tools

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


async def _declared_roots(ctx: Context[Any, Any]) -> Optional[ListRoots]:
    """Asks the client for its roots where it declares them (the SDK resolves this before a tool runs)."""
    capabilities = ctx.client_capabilities
    return ListRoots() if capabilities is not None and capabilities.roots is not None else None


ClientRoots = Annotated[Optional[ListRootsResult], Resolve(_declared_roots)]
IncludeGlobs = Annotated[Optional[list[str]], Field(description="Only files matching these globs inside folders.")]
ExcludeGlobs = Annotated[Optional[list[str]], Field(description="Skip files matching these globs inside folders.")]


def serve(settings: ServerSettings, announce: Callable[[str], None]) -> None:
    """Runs the server until its client goes (stdio) or it is stopped (HTTP); the model, loaded
    on first use, is closed after."""
    import anyio
    from mcp.shared.exceptions import MCPDeprecationWarning

    # The 2026-07-28 protocol deprecates the logging capability the memory log rides on; older
    # hosts still use it, and the warning would say so on stderr for every step.
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    server, engine = build(settings)
    try:
        if settings.http is None:
            anyio.run(server.run_stdio_async)
        else:
            anyio.run(_serve_http, server, settings, settings.http, announce)
    finally:
        engine.close()


def build(settings: ServerSettings) -> tuple[MCPServer[Any], SharedModel]:
    """The server, its tools and resource, and the model they share."""
    from mcp.server.auth.settings import AuthSettings

    engine = SharedModel(settings.run, ocr=settings.ocr, parallel=settings.parallel)
    tools = Tools(settings, Queue(engine))
    auth = None
    verifier = None
    if settings.http is not None and settings.token:
        auth = AuthSettings(issuer_url=settings.http.url, resource_server_url=None)  # type: ignore[arg-type]
        verifier = _StaticToken(settings.token)
    server: MCPServer[Any] = MCPServer(
        "memagent",
        title="memagent",
        instructions=INSTRUCTIONS,
        version=__version__,
        token_verifier=verifier,
        auth=auth,
        log_level=cast(Any, settings.log_level),
    )
    shared = _shared(settings)
    ask_output = _ask_output()
    _add_ask(server, tools, shared, ask_output)
    _add_inspect_resume(server, tools, shared, ask_output)
    _add_traces(server, tools, shared)
    return server, engine


@dataclass(frozen=True)
class _Shared:
    """What every tool uses: the settings, a tool's description (`text`), its annotations (`read_only`:
    every tool only reads, and only this machine), a request's context as calls.Host (`host`), the
    client's roots (ClientRoots) joined to --allow (`roots_of`), and a tool's answer (`result`)."""

    settings: ServerSettings
    text: Callable[[str], str]
    read_only: ToolAnnotations
    host: Callable[[Context[Any, Any]], Host]
    roots_of: Callable[[Optional[ListRootsResult]], Roots]
    result: Callable[[Awaitable[tuple[dict[str, Any], str]]], Awaitable[CallToolResult]]


def _shared(settings: ServerSettings) -> _Shared:
    """The helpers the tools share (see _Shared), on the SDK's types."""
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import LoggingLevel, TextContent

    device = "served engine" if settings.engine.served else "embedded llama.cpp engine (CPU or GPU, as found)"
    rule = concurrency_rule(settings)

    def text(template: str) -> str:
        return describe(template, settings, device, rule)

    class RequestHost:
        """A request's context, as calls.Host: its progress notifications and log messages."""

        def __init__(self, ctx: Context[Any, Any]):
            self.ctx = ctx

        async def progress(self, done: float, total: Optional[float], message: str) -> None:
            await self.ctx.report_progress(done, total, message)

        async def log(self, level: str, line: str) -> None:
            await self.ctx.log(cast(LoggingLevel, level), line, logger_name="memagent")

    def roots_of(declared: Optional[ListRootsResult]) -> Roots:
        found = client_roots(str(root.uri) for root in declared.roots) if declared is not None else None
        return Roots(settings.allow, found)

    async def result(work: Awaitable[tuple[dict[str, Any], str]]) -> CallToolResult:
        """A tool's answer: its record as structured content and as text; memagent's errors as the
        tool's error, which the host shows its model (never a traceback)."""
        try:
            structured, rendered = await work
        except MemagentError as exc:
            raise ToolError(str(exc)) from None
        return CallToolResult(content=[TextContent(type="text", text=rendered)], structured_content=structured)

    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return _Shared(settings, text, read_only, RequestHost, roots_of, result)


def _ask_output() -> type[BaseModel]:
    """The output schema of ask and resume: one run's record, or a record per run."""

    class Evidence(BaseModel):
        step: int = Field(description="The memory step whose reading the answer rests on.")
        source: str = Field(description="The document it read, as titled to the model (archive.zip/inner/name in one).")
        location: str = Field(description='Where in it the step read, e.g. "report.pdf pp. 3–5", "notes.txt chars 0–900".')
        excerpt: str = Field(
            description="A sentence of the document the answer rests on, exactly as the document has it (see quotes);"
            " where none was found, at most ~300 characters of the text the step read, around what it added to memory."
        )

    class Quote(BaseModel):
        text: str = Field(description="The sentence, exactly as in the document's text (at most 300 characters).")
        source: str = Field(description="The document's path.")
        location: str = Field(description='Where it is, e.g. "report.pdf p. 12".')
        start: int = Field(description="Its character offsets in the document's own text (`memagent inspect --text`).")
        end: int
        step: int = Field(description="The memory step that read it.")

    class Run(BaseModel):
        document: Optional[str] = Field(None, description="With `each`: the document this run read.")
        question: Optional[str] = None
        answer: Optional[str] = Field(None, description="The answer, written from the final memory alone.")
        data: Optional[Any] = Field(
            None, description="With `schema`: the answer as data, an object (with `schema_multi`, a list of them)."
        )
        evidence: Optional[list[Evidence]] = Field(None, description="Where the answer comes from, in reading order.")
        quotes: Optional[list[Quote]] = Field(
            None, description="The sentences of the documents the answer rests on, best first; empty where none holds it."
        )
        steps: Optional[int] = Field(None, description="Memory steps the run took.")
        trace: Optional[str] = Field(None, description=f"The run's trace id: trace_show, resume, {TRACE_URI}.")
        document_tokens: Optional[int] = None
        seconds: Optional[float] = None
        resumed_steps: Optional[int] = Field(None, description="Steps taken over from the interrupted run it continued.")
        reused_from: Optional[dict[str, str]] = Field(
            None,
            description="{run, at}: answered from that earlier run (the same question, documents, model and settings),"
            " reading nothing; null when it read. `fresh` reads again.",
        )
        conversation: Optional[dict[str, Any]] = Field(
            None,
            description="{id, turn}: the conversation this answer is a turn of; give its id as `conversation` to"
            " ask a follow-up about the same documents.",
        )
        continued_from: Optional[dict[str, Any]] = Field(
            None,
            description="{run, step}: its first steps were that earlier run's, which read an earlier version of the"
            " same documents up to there; null when it read from the start.",
        )
        error: Optional[str] = Field(None, description="Why this run failed (the others went on).")

    class AskOutput(Run):
        results: Optional[list[Run]] = Field(None, description="With `questions` or `each`: one record per run.")

    return AskOutput


def _add_ask(server: MCPServer[Any], tools: Tools, shared: _Shared, AskOutput: type[BaseModel]) -> None:
    """Registers the ask tool."""
    budget = shared.settings.config

    @server.tool(name="ask", title="Ask documents", description=shared.text(ASK), annotations=shared.read_only)
    async def ask(
        ctx: Context[Any, Any],
        roots: ClientRoots,
        sources: Annotated[
            Optional[list[str]],
            Field(
                description="Files and folders to read (absolute paths, or relative to the server's directory); "
                "folders and zip archives are read whole. Left out with `conversation`: it reads its own.",
                min_length=1,
                max_length=MAX_FILES,
            ),
        ] = None,
        question: Annotated[Optional[str], Field(description="The question to answer.")] = None,
        questions: Annotated[
            Optional[list[str]],
            Field(description="Several questions, each answered by its own run.", max_length=MAX_QUESTIONS),
        ] = None,
        each: Annotated[bool, Field(description="Ask every document on its own: one run per document and question.")] = False,
        chunk_tokens: Annotated[
            Optional[int], Field(description="Document tokens read per memory step.", ge=1, le=budget.chunk_tokens)
        ] = None,
        memory_tokens: Annotated[
            Optional[int], Field(description="Most tokens a memory update may write.", ge=1, le=budget.memory_tokens)
        ] = None,
        temperature: Annotated[Optional[float], Field(description="Sampling temperature; 0 is greedy.", ge=0.0)] = None,
        instructions: Annotated[
            Optional[str],
            Field(
                description='How the answer should be written, e.g. "Answer in one word.": added to the final prompt only.',
                max_length=4000,
            ),
        ] = None,
        schema: Annotated[
            Optional[Union[dict[str, Any], str]],
            Field(
                description="Answer as data: a JSON Schema of an object, or its fields as text"
                " ('invoice_number, date: the issue date, total float, paid bool'; types str, int, float, bool)."
                " The answer comes back as `data`; `question` may then be left out.",
            ),
        ] = None,
        schema_multi: Annotated[
            Optional[Union[dict[str, Any], str]],
            Field(
                description="Answer as a list of data: the schema of one item, as `schema` takes it (every line item,"
                " every party); in place of `schema`. The answer comes back as `data`, a list.",
            ),
        ] = None,
        include: IncludeGlobs = None,
        exclude: ExcludeGlobs = None,
        model: Annotated[Optional[str], Field(description="Only the server's own model; another is refused.")] = None,
        conversation: Annotated[
            Optional[str],
            Field(
                description="A follow-up: the id of the conversation an earlier answer gave (`conversation.id`). Its"
                " documents are read again with the earlier questions and answers, so 'it' means what it meant."
            ),
        ] = None,
        fresh: Annotated[
            bool,
            Field(
                description="Read again: give no answer found in the traces (the same question, documents, model and"
                " settings), and continue no earlier run over an earlier version of the documents."
            ),
        ] = False,
    ) -> Annotated[CallToolResult, AskOutput]:
        asked = ([question] if question else []) + list(questions or [])
        budgets = {
            "chunk_tokens": chunk_tokens,
            "memory_tokens": memory_tokens,
            "temperature": temperature,
            "instructions": instructions.strip() if instructions else None,
        }
        return await shared.result(
            tools.ask(
                shared.roots_of(roots),
                shared.host(ctx),
                sources or [],
                asked,
                each=each,
                budgets=budgets,
                include=include or (),
                exclude=exclude or (),
                model=model,
                schema=schema,
                schema_multi=schema_multi,
                fresh=fresh,
                conversation=conversation,
            )
        )


def _add_inspect_resume(server: MCPServer[Any], tools: Tools, shared: _Shared, AskOutput: type[BaseModel]) -> None:
    """Registers the inspect and resume tools."""
    budget = shared.settings.config

    @server.tool(name="inspect", title="Inspect documents", description=shared.text(INSPECT), annotations=shared.read_only)
    async def inspect(
        ctx: Context[Any, Any],
        roots: ClientRoots,
        sources: Annotated[list[str], Field(description="Files and folders, as for ask.", min_length=1, max_length=MAX_FILES)],
        question: Annotated[Optional[str], Field(description="The question, for the prompt's size.")] = None,
        chunk_tokens: Annotated[
            Optional[int], Field(description="Document tokens per memory step.", ge=1, le=budget.chunk_tokens)
        ] = None,
        include: IncludeGlobs = None,
        exclude: ExcludeGlobs = None,
    ) -> Annotated[CallToolResult, dict[str, Any]]:
        return await shared.result(
            tools.inspect(shared.roots_of(roots), shared.host(ctx), sources, question, chunk_tokens, include or (), exclude or ())
        )

    @server.tool(name="resume", title="Resume a run", description=shared.text(RESUME), annotations=shared.read_only)
    async def resume(
        ctx: Context[Any, Any],
        roots: ClientRoots,
        id: Annotated[str, Field(description='The run\'s trace id, a unique prefix of it, or "last".', min_length=1)],
    ) -> Annotated[CallToolResult, AskOutput]:
        return await shared.result(tools.resume(shared.roots_of(roots), shared.host(ctx), id))


def _add_traces(server: MCPServer[Any], tools: Tools, shared: _Shared) -> None:
    """Registers the traces_list and trace_show tools and the trace resource."""
    import anyio.to_thread
    from mcp.server.mcpserver.exceptions import ResourceError

    roots_of = shared.roots_of

    @server.tool(
        name="traces_list", title="List recorded runs", description=shared.text(TRACES_LIST), annotations=shared.read_only
    )
    async def traces_list(
        roots: ClientRoots,
        status: Annotated[
            Optional[str],
            Field(description="Only runs with this status.", pattern="^(running|complete|interrupted|failed)$"),
        ] = None,
        source: Annotated[Optional[str], Field(description="Only runs whose document paths contain this text.")] = None,
        limit: Annotated[int, Field(description="At most this many runs.", ge=1, le=200)] = 20,
    ) -> Annotated[CallToolResult, dict[str, Any]]:
        return await shared.result(anyio.to_thread.run_sync(lambda: tools.traces_list(roots_of(roots), status, source, limit)))

    @server.tool(
        name="trace_show", title="Show a recorded run", description=shared.text(TRACE_SHOW), annotations=shared.read_only
    )
    async def trace_show(
        roots: ClientRoots,
        id: Annotated[str, Field(description='A trace id, a unique prefix of it, or "last".', min_length=1)],
        step: Annotated[Optional[int], Field(description="Only this step, with its memory.", ge=1)] = None,
        memories: Annotated[bool, Field(description="Include every step's memory text (long runs: large).")] = False,
    ) -> Annotated[CallToolResult, dict[str, Any]]:
        return await shared.result(anyio.to_thread.run_sync(lambda: tools.trace_show(roots_of(roots), id, step, memories)))

    @server.resource(
        "memagent://traces/{run_id}",
        name="trace",
        title="A recorded run",
        description=TRACE_RESOURCE,
        mime_type="application/json",
    )
    async def trace(run_id: str) -> str:
        allow = shared.settings.allow
        try:
            found, _ = await anyio.to_thread.run_sync(lambda: tools.trace_show(Roots(allow), run_id, None, True))
        except MemagentError as exc:
            raise ResourceError(str(exc)) from None
        return json.dumps(found, ensure_ascii=False)


class _StaticToken:
    """The SDK's TokenVerifier for one shared secret (--token), compared in constant time."""

    def __init__(self, token: str):
        self._token = token.encode("utf-8")

    async def verify_token(self, token: str) -> "Optional[AccessToken]":
        from mcp.server.auth.provider import AccessToken

        if hmac.compare_digest(token.encode("utf-8"), self._token):
            return AccessToken(token=token, client_id="memagent-mcp", scopes=[])
        return None


def transport_security(address: HttpAddress) -> "TransportSecuritySettings":
    """Host and Origin checks against DNS rebinding: a page in a browser may reach a server on
    this machine, but only with its own origin, which is refused. Bound to a named address, the
    requests must name it (or the loopback names); bound to every address (0.0.0.0, ::), the
    Host cannot be listed and is not checked (the token guards it) while Origin still is."""
    from mcp.server.transport_security import TransportSecuritySettings

    if _wildcard(address.host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    named = f"[{address.host}]" if ":" in address.host else address.host
    hosts, origins = list(LOOPBACK_HOSTS), list(LOOPBACK_ORIGINS)
    if not address.loopback or address.host not in ("127.0.0.1", "localhost", "::1"):
        hosts.append(f"{named}:*")
        origins += [f"http://{named}:*", f"https://{named}:*"]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


class _OriginCheck:
    """For a server bound to every address, where the SDK's check is off: a request that carries
    an Origin (a browser's) other than this machine's loopback names is refused."""

    def __init__(self, app: "ASGIApp"):
        self.app = app

    async def __call__(self, scope: "Scope", receive: "Receive", send: "Send") -> None:
        if scope["type"] == "http":
            origin = dict(scope.get("headers") or []).get(b"origin")
            if origin is not None and not _loopback_origin(origin.decode("latin-1")):
                from starlette.responses import Response

                await Response("Invalid Origin header", status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _loopback_origin(origin: str) -> bool:
    from urllib.parse import urlparse

    from ..model.served.hosts import is_loopback

    parsed = urlparse(origin)
    return parsed.scheme in ("http", "https") and is_loopback(parsed.hostname or "")


async def _serve_http(
    server: MCPServer[Any], settings: ServerSettings, address: HttpAddress, announce: Callable[[str], None]
) -> None:
    import uvicorn

    app: Any = server.streamable_http_app(host=address.host, transport_security=transport_security(address))
    if _wildcard(address.host):
        app = _OriginCheck(app)
    config = uvicorn.Config(app, host=address.host, port=address.port, log_level=settings.log_level.lower(), lifespan="on")
    runner = uvicorn.Server(config)
    announce(f"memagent mcp: serving {address.url}" + (" (bearer token required)" if settings.token else ""))
    await runner.serve()
