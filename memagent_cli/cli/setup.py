"""One run setup for every command that runs a model (`ask`, `batch`, `eval`, `mcp`, and `ask
--resume`): the flags they share, declared once (`RunFlags`, added to a command by `run_flags`), and
the one function that turns them, or a stored run, into a `RunSetup`: the model file, the agent's
settings, the engine, the chat template. Every rule lives here once: `-m` as a served run's
vocabulary, --offline, how a missing model is reported, server URLs in their normal form."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Mapping, Optional, TypeVar

import typer
from rich.console import Console

from ..errors import EXIT_USAGE, MemagentError
from .options import (
    DEFAULTS,
    AnswerOpt,
    ApiKeyOpt,
    BaseUrlOpt,
    BatchOpt,
    ChatTemplate,
    ChatTemplateOpt,
    ChunkOpt,
    EngineOpt,
    FinalOpt,
    FlashAttnOpt,
    GpuLayersOpt,
    InstructionsOpt,
    MemoryOpt,
    ModelOpt,
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
    base_urls,
    chat_template,
    gpu_layers_setting,
)

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..model.backends import EngineOptions

CtxOpt = Annotated[
    Optional[int],
    typer.Option(
        "--ctx",
        help="Context size (embedded engine). Default: just enough for the budgets.",
        min=64,
        rich_help_panel="Model",
        show_default=False,
    ),
]
OfflineOpt = Annotated[
    bool,
    typer.Option(
        "--offline",
        rich_help_panel="Model",
        help="Never touch the network: a model not installed is an error (also HF_HUB_OFFLINE=1).",
    ),
]


@dataclass(frozen=True)
class RunFlags:
    """The flags of every command that runs a model, as given. A field's name is its parameter's."""

    model: ModelOpt = None
    protocol: ProtocolOpt = None
    instructions: InstructionsOpt = None
    chunk_tokens: ChunkOpt = None
    memory_tokens: MemoryOpt = None
    answer_tokens: AnswerOpt = None
    temperature: TemperatureOpt = DEFAULTS.temperature
    top_p: TopPOpt = DEFAULTS.top_p
    seed: SeedOpt = DEFAULTS.seed
    final: FinalOpt = DEFAULTS.final
    offline: OfflineOpt = False
    gpu_layers: GpuLayersOpt = None
    threads: ThreadsOpt = None
    flash_attn: FlashAttnOpt = None
    speculate: SpeculateOpt = None
    batch: BatchOpt = None
    n_ctx: CtxOpt = None
    template_file: ChatTemplateOpt = None
    engine: EngineOpt = "llama"
    base_url: BaseUrlOpt = None
    api_key: ApiKeyOpt = None
    served_model: ServedModelOpt = None
    tokenizer: TokenizerOpt = None
    timeout: TimeoutOpt = None
    verbose: VerboseOpt = False

    def budgets(self) -> dict[str, Any]:
        """The agent's settings these flags give (None: the protocol's)."""
        return {
            "chunk_tokens": self.chunk_tokens,
            "memory_tokens": self.memory_tokens,
            "answer_tokens": self.answer_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "final": self.final,
            "instructions": self.instructions or "",
        }


FLAG_NAMES = tuple(f.name for f in dataclasses.fields(RunFlags))
_Command = TypeVar("_Command", bound=Callable[..., Any])


def run_flags(**defaults: Any) -> Callable[[_Command], _Command]:
    """Adds RunFlags's options to a command, after its own, and hands it them as `flags`.
    `defaults` replaces a flag's default for this command (eval's --final)."""
    hints = typing.get_type_hints(RunFlags, include_extras=True)
    unknown = set(defaults) - set(FLAG_NAMES)
    if unknown:
        raise TypeError(f"not a run flag: {', '.join(sorted(unknown))}")

    def add(command: _Command) -> _Command:
        own = inspect.signature(command)
        own_hints = typing.get_type_hints(command, include_extras=True)
        params = [p.replace(annotation=own_hints.get(p.name, p.annotation)) for p in own.parameters.values() if p.name != "flags"]
        added = [
            inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(f.name, f.default), annotation=hints[f.name]
            )
            for f in dataclasses.fields(RunFlags)
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            flags = RunFlags(**{name: kwargs.pop(name) for name in FLAG_NAMES if name in kwargs})
            return command(*args, flags=flags, **kwargs)

        # typer reads a command's options from its signature and its type hints
        run.__signature__ = own.replace(parameters=[*params, *added])  # type: ignore[attr-defined]
        run.__annotations__ = {**{p.name: p.annotation for p in params}, **{p.name: p.annotation for p in added}}
        return typing.cast(_Command, run)

    return add


@dataclass(frozen=True)
class RunSetup:
    """What a command runs with, decided once."""

    model: str | None  # the GGUF: the embedded engine's model, or the vocabulary of a served run; None: the server's
    config: AgentConfig
    engine: EngineOptions
    template: ChatTemplate | None = None  # a --chat-template, checked

    @property
    def engine_record(self) -> dict[str, Any] | None:
        """What a trace keeps of the engine (never a key)."""
        return self.engine.record()

    @property
    def template_record(self) -> dict[str, str] | None:
        return self.template.record if self.template is not None else None


def setup(flags: RunFlags, err: Console, stored: Mapping[str, Any] | None = None) -> RunSetup:
    """The flags as one RunSetup; `stored`, a stored run to resume (traces' record), gives what
    decides its result (the model, the settings, the template, which engine) and the flags the rest
    (threads, GPU layers; a server's URL, since servers may move). Usage errors are MemagentErrors."""
    from ..model.served.options import ServedOptions
    from ..traces.recorder import resumed_config
    from .models import model_for_run

    settings: Mapping[str, Any] = stored["settings"] if stored is not None else {}
    if stored is not None:
        template = _stored_template(settings.get("chat_template"))
        engine = engine_options(flags, err, template, resumed=settings.get("engine") or {"kind": "llama"})
    else:
        template = chat_template(flags.template_file, flags.engine)
        engine = engine_options(flags, err, template)
    served = engine if isinstance(engine, ServedOptions) else None
    if served is not None:  # -m or --tokenizer: the GGUF whose vocabulary cuts the chunks; neither: the server's
        spec = served.tokenizer
    else:
        spec = stored["model"]["path"] if stored is not None else flags.model
    model = model_for_run(spec, err, flags.offline) if spec or served is None else None
    if stored is not None:
        config = resumed_config(settings)
    else:
        config = agent_config(flags.protocol, model, served.served_model if served else None, **flags.budgets())
    return RunSetup(model, config, engine, template)


def _stored_template(stored: Mapping[str, str] | None) -> ChatTemplate | None:
    """A resumed run's --chat-template: the file must still say what it said when the run began."""
    if stored is None:
        return None
    return chat_template(Path(stored["path"]), "llama", expect_sha256=stored["sha256"])


def engine_options(
    flags: RunFlags, err: Console, template: ChatTemplate | None = None, resumed: Mapping[str, Any] | None = None
) -> EngineOptions:
    """The engine the flags name, or `resumed` (a stored run's engine record), checked: a served
    engine's flags only with a served engine, its servers in their normal form."""
    from ..model.backends import backend

    chosen = backend(resumed.get("kind", "llama") if resumed is not None else flags.engine)
    if not chosen.served:
        return _embedded(flags, template)
    if flags.timeout is not None and not (0 < flags.timeout < float("inf")):
        raise MemagentError(f"--timeout {flags.timeout:g} is not a positive number of seconds.", exit_code=EXIT_USAGE)
    return _served_options(flags, err, resumed)


def _embedded(flags: RunFlags, template: ChatTemplate | None) -> EngineOptions:
    """The embedded engine: a flag given wins, else the configured setting (`memagent config`), else auto."""
    from ..install.settings import get_setting
    from ..model.llama import EmbeddedOptions

    if flags.base_url or flags.served_model:
        raise MemagentError("--base-url and --served-model need --engine openai.", exit_code=EXIT_USAGE)
    if flags.timeout is not None:
        raise MemagentError("--timeout needs --engine openai: the embedded engine waits on no server.", exit_code=EXIT_USAGE)
    return EmbeddedOptions(
        n_ctx=flags.n_ctx,
        gpu_layers=gpu_layers_setting(flags.gpu_layers),
        threads=flags.threads or get_setting("threads"),
        flash_attn=flags.flash_attn,
        speculate=flags.speculate,
        batch=flags.batch,
        verbose=flags.verbose,
        chat_template=template.text if template is not None else None,
    )


def _served_options(flags: RunFlags, err: Console, stored: Mapping[str, Any] | None) -> EngineOptions:
    from ..model.served.options import ServedOptions, normal_servers

    if stored is not None:  # the servers may have moved (--base-url); the model they serve may not
        urls = base_urls(flags.base_url) or list(stored.get("servers") or stored.get("base_urls") or [stored["base_url"]])
        served_model, tokenizer = stored.get("served_model"), stored.get("tokenizer")
    else:
        urls = base_urls(flags.base_url)
        served_model, tokenizer = flags.served_model, flags.tokenizer or flags.model
    if not urls:
        raise MemagentError(
            "--engine openai needs --base-url.",
            "e.g. --base-url http://127.0.0.1:8000/v1 for a local vLLM or llama-server.",
            exit_code=EXIT_USAGE,
        )
    servers, notes = normal_servers(urls)
    for note in notes:
        err.print(f"note: {note}", style="dim", markup=False, highlight=False, soft_wrap=True)
    log = (lambda line: err.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)) if flags.verbose else None
    return ServedOptions(
        servers=servers, api_key=flags.api_key, served_model=served_model, timeout=flags.timeout, tokenizer=tokenizer, log=log
    )
