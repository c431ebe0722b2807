"""One run setup for every command that runs a model (`ask` and its `--resume`, `batch`, `watch`,
`chat`, `inspect`, `eval`, `mcp`, `serve`): the flags they share, declared once (`RunFlags`, which a
command takes as one parameter through options.flag_groups), and the one function that turns them,
or a stored run, into a `RunSetup`: the model file, the agent's settings, the engine, the chat
template. Every rule lives here once: `-m` as a served run's vocabulary, --offline, how a missing
model is reported, server URLs in their normal form; and the conversions from what the flags say to
what a run takes (--base-url's URLs and files, --chat-template, the protocol's budgets,
--gpu-layers)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Mapping, Sequence, cast

from rich.console import Console

from ..errors import EXIT_USAGE, MemagentError
from ..runs.setup import ChatTemplate, RunSetup
from .common import noter
from .options import (
    DEFAULTS,
    AnswerOpt,
    ApiKeyOpt,
    BaseUrlOpt,
    BatchOpt,
    ChatTemplateOpt,
    ChunkOpt,
    CtxOpt,
    EarlyStopOpt,
    EngineOpt,
    FinalOpt,
    FlashAttnOpt,
    GpuLayersOpt,
    InstructionsOpt,
    MemoryOpt,
    ModelOpt,
    OfflineOpt,
    ProtocolChoice,
    ProtocolOpt,
    SchemaMultiOpt,
    SchemaOpt,
    SeedOpt,
    ServedModelOpt,
    SpeculateOpt,
    TemperatureOpt,
    ThreadsOpt,
    TimeoutOpt,
    TokenizerOpt,
    TopPOpt,
    VerboseOpt,
)

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..core.schema import AnswerSchema
    from ..model.backends import EngineOptions
    from ..model.served.backend import ServedOptions


# The flags that are agent settings (core.config.AgentConfig) by the same name, as they are given.
_AGENT_SETTINGS = ("chunk_tokens", "memory_tokens", "answer_tokens", "temperature", "top_p", "seed", "final", "early_stop")


@dataclass(frozen=True)
class PromptFlags:
    """The flags that decide what the model is sent: the model (its tokenizer and chat template),
    the protocol, the budgets that cut the text and bound the memory, and what the final prompt
    asks for (instructions, a schema). `inspect` takes these, which is all it needs to count and show
    a run's prompts; RunFlags adds the rest. A field's name is its parameter's."""

    model: ModelOpt = None
    protocol: ProtocolOpt = None
    template_file: ChatTemplateOpt = None
    instructions: InstructionsOpt = None
    schema: SchemaOpt = None
    schema_multi: SchemaMultiOpt = None
    chunk_tokens: ChunkOpt = None
    memory_tokens: MemoryOpt = None

    def answer_schema(self) -> AnswerSchema | None:
        """--schema or --schema-multi, read and checked (a usage error when it cannot be used); None
        without either."""
        from ..core.schema import chosen_schema

        return chosen_schema(self.schema, self.schema_multi)

    def asked_for(self) -> dict[str, Any]:
        """What the final prompt asks for besides the question: --instructions and the schema, as
        the agent's settings."""
        schema = self.answer_schema()
        return {
            "answer_schema": schema.to_config() if schema else "",
            "answer_schema_multi": schema.multi if schema else False,
            "instructions": self.instructions or "",
        }


@dataclass(frozen=True)
class RunFlags(PromptFlags):
    """The flags of every command that runs a model, as given; a command takes them as one parameter
    (options.flag_groups). They stand by help panel, the panels in the order --help lists them (the
    first of each places its panel; PromptFlags' come first, each in its panel)."""

    # Model: how the embedded engine runs it
    offline: OfflineOpt = False
    gpu_layers: GpuLayersOpt = None
    threads: ThreadsOpt = None
    flash_attn: FlashAttnOpt = None
    speculate: SpeculateOpt = None
    batch: BatchOpt = None
    n_ctx: CtxOpt = None
    # Sampling and budgets: the agent's settings; a budget left None is the protocol's
    temperature: TemperatureOpt = None
    top_p: TopPOpt = None
    seed: SeedOpt = DEFAULTS.seed
    final: FinalOpt = DEFAULTS.final
    answer_tokens: AnswerOpt = None
    early_stop: EarlyStopOpt = DEFAULTS.early_stop
    # In no panel: listed with the command's own options
    verbose: VerboseOpt = False
    # Served engine: a server runs the model (--engine openai)
    engine: EngineOpt = "llama"
    base_url: BaseUrlOpt = None
    api_key: ApiKeyOpt = None
    served_model: ServedModelOpt = None
    tokenizer: TokenizerOpt = None
    timeout: TimeoutOpt = None

    def budgets(self) -> dict[str, Any]:
        """The agent's settings these flags give (None: the protocol's)."""
        return {**self.asked_for(), **{name: getattr(self, name) for name in _AGENT_SETTINGS}}

    def given_settings(self, given: Collection[str]) -> dict[str, Any]:
        """The agent's settings, the protocol among them, whose flags were `given` (by parameter name)."""
        from ..core.keys import flag_of

        values = {**self.budgets(), "protocol": self.protocol.value if self.protocol else None}
        return {name: value for name, value in values.items() if flag_of(name) in given}


# Conversions: from what the flags say to what a run takes -----------------------------------


def chat_template(path: Path | None, engine: str, *, expect_sha256: str | None = None) -> ChatTemplate | None:
    """The checked template at `path` (None: the GGUF's own). `expect_sha256`: a resumed run's,
    which the file must still match."""
    import hashlib

    from ..model.backends import backend
    from ..model.chat_template import read_template

    if path is None:
        return None
    if backend(engine).served:
        raise MemagentError(
            "--chat-template is for the embedded engine.",
            "A server applies the model's template itself; set it there.",
            exit_code=EXIT_USAGE,
        )
    text = read_template(path)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if expect_sha256 is not None and digest != expect_sha256:
        raise MemagentError(
            f"The chat template {path} has changed since the run began.",
            "Resuming would mix two prompt formats; start a new run.",
            exit_code=EXIT_USAGE,
        )
    return ChatTemplate(text, {"path": str(path.resolve()), "sha256": digest})


def base_urls(given: Sequence[str] | str | None) -> list[str]:
    """The servers --base-url names: each value a URL, or a file of URLs (one per line; blank lines
    and # comments skipped), each checked to be http(s), in order, once each."""
    urls: list[str] = []
    for value in [given] if isinstance(given, str) else list(given or []):
        if not value.startswith(("http://", "https://")) and os.path.isfile(value):
            try:
                with open(value, encoding="utf-8") as f:
                    lines = [line.split("#", 1)[0].strip() for line in f]
            except (OSError, UnicodeDecodeError) as exc:
                raise MemagentError(f"Cannot read the URLs in {value}: {exc}.", exit_code=EXIT_USAGE) from None
            found = [line for line in lines if line]
            if not found:
                raise MemagentError(f"{value} lists no server URL.", "Put one URL per line.", exit_code=EXIT_USAGE)
        else:
            found = [value]
        for url in found:
            if not url.startswith(("http://", "https://")):
                raise MemagentError(
                    f"--base-url {url!r} is not an http(s) URL, nor a file of them.",
                    "e.g. http://127.0.0.1:8000/v1",
                    exit_code=EXIT_USAGE,
                )
            if url not in urls:
                urls.append(url)
    return urls


def agent_config(
    protocol: ProtocolChoice | str | None, model_path: str | None, served_model: str | None = None, **settings: Any
) -> AgentConfig:
    """The AgentConfig the command's options ask for: the protocol asked for, else the model's
    (`model_path`: its GGUF, when there is one; `served_model`: its name on a server); budgets left
    unset (None) are the protocol's. A value it refuses is a usage error (exit 2)."""
    from ..core.config import AgentConfig
    from ..core.protocols import of_model

    name = protocol.value if isinstance(protocol, ProtocolChoice) else protocol
    try:
        return AgentConfig.with_protocol(name or of_model(model_path, served_model), **settings)
    except ValueError as exc:
        raise MemagentError(f"Invalid option: {exc}.", exit_code=EXIT_USAGE) from None


def gpu_layers_setting(flag: str | None) -> int | None:
    """--gpu-layers, else the configured value, else auto (None: planned from free GPU memory)."""
    from ..install.config_file import KEYS, get_setting

    value = flag if flag is not None else get_setting("gpu_layers")
    if value is None or value == "auto":
        return None
    layers = KEYS["gpu_layers"][0](str(value))
    return None if isinstance(layers, str) else layers  # the parser gives a str for "auto" alone


def quiet_library_logs(verbose: bool) -> None:
    # pypdf logs repairs of damaged files ("incorrect startxref pointer") as warnings, which
    # Python prints raw to stderr; what matters reaches the user as our own notes.
    logging.getLogger("pypdf").setLevel(logging.WARNING if verbose else logging.ERROR)


def setup(flags: RunFlags, err: Console, stored: Mapping[str, Any] | None = None) -> RunSetup:
    """The flags as one RunSetup; `stored`, a stored run to resume (traces' record), gives what
    decides its result (the model, the settings, the template, which engine) and the flags the rest
    (threads, GPU layers; a server's URL, since servers may move). Usage errors are MemagentErrors."""
    from ..traces.recorder import resumed_config
    from .model_choice import model_for_run

    quiet_library_logs(flags.verbose)
    settings: Mapping[str, Any] = stored["settings"] if stored is not None else {}
    budgets = flags.budgets() if stored is None else {}  # a bad --schema is said before a missing model
    if stored is not None:
        template = _stored_template(settings.get("chat_template"))
        engine = engine_options(flags, err, template, resumed=settings.get("engine") or {"kind": "llama"})
    else:
        template = chat_template(flags.template_file, flags.engine)
        engine = engine_options(flags, err, template)
    served = cast("ServedOptions", engine) if engine.served else None  # the served module loads only for it
    if served is not None:  # -m or --tokenizer: the GGUF whose vocabulary cuts the chunks; neither: the server's
        spec = served.tokenizer
    else:
        spec = stored["model"]["path"] if stored is not None else flags.model
    model = model_for_run(spec, err, flags.offline) if spec or served is None else None
    if stored is not None:
        config = resumed_config(settings)
    else:
        config = agent_config(flags.protocol, model, served.served_model if served else None, **budgets)
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
    from ..install.config_file import get_setting
    from ..model.llama import EmbeddedOptions

    if flags.base_url or flags.served_model:
        raise MemagentError("--base-url and --served-model need --engine openai.", exit_code=EXIT_USAGE)
    if flags.timeout is not None:
        raise MemagentError("--timeout needs --engine openai: the embedded engine waits on no server.", exit_code=EXIT_USAGE)
    if flags.tokenizer is not None:
        raise MemagentError(
            "--tokenizer needs --engine openai: the embedded engine reads its model's own vocabulary.",
            "Drop it, or give the model with -m.",
            exit_code=EXIT_USAGE,
        )
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
    from ..model.served.backend import ServedOptions, normal_servers

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
    say = noter(err)
    for note in notes:
        say(f"note: {note}")
    log = say if flags.verbose else None
    served = ServedOptions(
        servers=servers, api_key=flags.api_key, served_model=served_model, timeout=flags.timeout, tokenizer=tokenizer, log=log
    )
    hint = served.tokenizer_note()
    if hint is not None:
        say(f"note: {hint}")
    return served


# What a result line may set for itself (a batch line's, an eval item's): not the job's setup.
LINE_OWN = ("instructions", "answer_schema", "answer_schema_multi")


def check_same_setup(out: Path | None, run: RunSetup) -> None:
    """A rerun (`batch`, `eval`) goes on from its results file only where it would make its lines the
    same way: lines finished with another model or other protocol settings are not this job's, and
    keeping them as done would mix two setups in one file without a word. Lines that keep no
    settings (an older file) are taken as they are."""
    from ..core.keys import differences
    from ..core.records import written_records

    if out is None:
        return
    want = run.config.to_dict()
    model = os.path.realpath(run.model) if run.model and not run.engine.served else None
    for _, record in written_records(out):
        if record is None or record.get("error"):
            continue  # redone anyway
        for row in record.get("results") or [record]:
            settings = row.get("settings")
            for differs in differences(settings, want, ignore=LINE_OWN) if settings else ():
                raise _other_setup(out, differs.option, differs.wanted, differs.stored)
            path = (row.get("model") or {}).get("path")
            if model is not None and path and os.path.realpath(path) != model:
                raise _other_setup(out, "--model", run.model, path)


def _other_setup(out: Path, option: str, value: object, stored: object) -> MemagentError:
    return MemagentError(
        f"{out} holds results made with {option} {stored}; this run has {value}.",
        "Give the options it was made with to go on from it, or write to a new file with -o.",
        exit_code=EXIT_USAGE,
    )
