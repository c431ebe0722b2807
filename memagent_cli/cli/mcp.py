"""`memagent mcp`: serve memagent to MCP hosts (Claude Desktop, Claude Code, VS Code, Cursor)
over stdio, or streamable HTTP with --http. A thin layer: the options, which mean what they mean
for `ask`, become ServerSettings, and memagent_cli.mcp runs the server (docs/MCP.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..errors import EXIT_USAGE, MemagentError
from ..model.runtime import MAX_SEQUENCES
from .common import fail, stderr_console
from .options import (
    DEFAULTS,
    AnswerOpt,
    ApiKeyOpt,
    BaseUrlOpt,
    BatchOpt,
    ChatTemplateOpt,
    ChunkOpt,
    EngineOpt,
    FinalOpt,
    FlashAttnOpt,
    GpuLayersOpt,
    MemoryOpt,
    ModelOpt,
    OcrChoice,
    OcrOpt,
    ProtocolOpt,
    SeedOpt,
    ServedModelOpt,
    SpeculateOpt,
    TemperatureOpt,
    ThreadsOpt,
    TimeoutOpt,
    TokenizerOpt,
    TopPOpt,
    VerboseOpt,
    agent_config,
    chat_template,
    embedded_engine,
    quiet_library_logs,
    served_options,
)

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..core.pipeline import EngineOptions
    from ..mcp.settings import ServerSettings


def mcp(
    http: Annotated[
        Optional[str],
        typer.Option(
            "--http",
            metavar="[HOST:]PORT",
            show_default=False,
            rich_help_panel="Server",
            help="Serve the streamable HTTP transport at http://HOST:PORT/mcp (host 127.0.0.1 unless given) instead of stdio.",
        ),
    ] = None,
    token: Annotated[
        Optional[str],
        typer.Option(
            "--token",
            metavar="TOKEN",
            envvar="MEMAGENT_MCP_TOKEN",
            show_envvar=True,
            show_default=False,
            rich_help_panel="Server",
            help="With --http: the bearer token every request must carry (Authorization: Bearer TOKEN). "
            "Required when bound to an address other machines reach.",
        ),
    ] = None,
    allow: Annotated[
        Optional[list[Path]],
        typer.Option(
            "--allow",
            metavar="DIR",
            show_default=False,
            rich_help_panel="Server",
            help="A folder whose files the server may read (repeatable). Default: the directory it starts in. "
            "Hosts that declare roots narrow this further.",
        ),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option(
            min=1,
            rich_help_panel="Server",
            help="Runs in flight at once where the engine takes several: a served engine, or the embedded engine "
            f"batching on a GPU (at most {MAX_SEQUENCES}). Others wait in order.",
        ),
    ] = 4,
    model: ModelOpt = None,
    protocol: ProtocolOpt = None,
    chunk_tokens: ChunkOpt = None,
    memory_tokens: MemoryOpt = None,
    answer_tokens: AnswerOpt = None,
    temperature: TemperatureOpt = DEFAULTS.temperature,
    top_p: TopPOpt = DEFAULTS.top_p,
    seed: SeedOpt = DEFAULTS.seed,
    final: FinalOpt = DEFAULTS.final,
    gpu_layers: GpuLayersOpt = None,
    threads: ThreadsOpt = None,
    flash_attn: FlashAttnOpt = None,
    speculate: SpeculateOpt = None,
    batch: BatchOpt = None,
    n_ctx: Annotated[
        Optional[int],
        typer.Option("--ctx", help="Context size. Default: just enough for the budgets.", min=64, rich_help_panel="Model"),
    ] = None,
    template_file: ChatTemplateOpt = None,
    ocr: OcrOpt = OcrChoice.auto,
    engine: EngineOpt = "llama",
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    served_model: ServedModelOpt = None,
    tokenizer: TokenizerOpt = None,
    timeout: TimeoutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Serve memagent to MCP hosts: tools to ask, inspect and resume runs, and read traces.

    Speaks stdio by default (the host starts it); --http serves streamable HTTP.

    The model loads on the first call and serves every call after. Only files under --allow are read.

    [dim]Examples:[/]
      claude mcp add memagent -- memagent mcp --allow ~/papers
      memagent mcp --http 8765 --allow ~/docs
      memagent mcp --http 0.0.0.0:8765 --token "$SECRET" --allow /srv/docs
    """
    from ..install.registry import resolve_model

    err = stderr_console()
    quiet_library_logs(verbose)
    try:
        served = served_options(engine, base_url, api_key, served_model, tokenizer, verbose, err, timeout)
        template = chat_template(template_file, engine)
        if served is not None:  # the served model's vocabulary, when given, cuts the chunks
            model_path = str(resolve_model(served.tokenizer)) if served.tokenizer else None
            engine_options = served.engine
        else:
            model_path = str(resolve_model(model))  # found now, loaded on the first call
            engine_options = embedded_engine(
                gpu_layers=gpu_layers,
                threads=threads,
                flash_attn=flash_attn,
                speculate=speculate,
                batch=batch,
                verbose=verbose,
                template=template,
                n_ctx=n_ctx,
            )
        config = agent_config(
            protocol,
            model_path,
            served.engine.served_model if served is not None else None,
            chunk_tokens=chunk_tokens,
            memory_tokens=memory_tokens,
            answer_tokens=answer_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            final=final,
        )
        settings = _settings(
            model_path=model_path,
            config=config,
            engine=engine_options,
            http=http,
            token=token,
            allow=allow,
            parallel=parallel if served is not None else min(parallel, MAX_SEQUENCES),
            ocr=ocr,
            engine_record=served.record if served is not None else None,
            template_record=template.record if template is not None else None,
            verbose=verbose,
        )
    except MemagentError as exc:
        fail(err, exc)
    from ..mcp.server import serve

    try:
        serve(settings, announce=lambda line: err.print(line, style="dim", markup=False, soft_wrap=True))
    except MemagentError as exc:
        fail(err, exc)


def _settings(
    *,
    model_path: str | None,
    config: AgentConfig,
    engine: EngineOptions,
    http: str | None,
    token: str | None,
    allow: list[Path] | None,
    parallel: int,
    ocr: OcrChoice,
    engine_record: dict[str, Any] | None,
    template_record: dict[str, str] | None,
    verbose: bool,
) -> ServerSettings:
    """The server's settings, checked before it starts: the folders exist, the trace store opens."""
    from ..mcp.settings import ServerSettings, parse_http
    from ..traces.store import TraceStore

    folders = []
    for folder in allow or [Path.cwd()]:
        real = os.path.realpath(folder.expanduser())
        if not os.path.isdir(real):
            raise MemagentError(f"--allow {folder}: no such folder.", exit_code=EXIT_USAGE)
        folders.append(real)
    address = parse_http(http) if http else None
    if token and address is None:
        raise MemagentError("--token goes with --http: stdio has no requests to check.", exit_code=EXIT_USAGE)
    TraceStore().close()  # runs are recorded (resume needs them): a store that cannot open stops here
    return ServerSettings(
        model=model_path,
        config=config,
        engine=engine,
        allow=tuple(dict.fromkeys(folders)),
        ocr="always" if ocr is OcrChoice.always else "never" if ocr is OcrChoice.never else "auto",
        parallel=parallel,
        engine_record=engine_record,
        template_record=template_record,
        http=address,
        token=token,
        cwd=os.getcwd(),
        log_level="INFO" if verbose else "WARNING",
    )
