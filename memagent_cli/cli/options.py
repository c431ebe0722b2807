"""Command-line options that several commands share (the model's, the budgets, sampling, the served
engine's, the sources', the outputs'), each declared once as a typer `Annotated` alias made by
`option`; the groups of them a command takes as one parameter (QuestionFlags, ShowFlags,
OutputFlags, SourceFlags) and `flag_groups`, which makes that work; and --questions' reader.
run_flags.py gathers the options of every command that runs a model into RunFlags, another group,
and turns them into a run."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterable, Optional, TypeVar

import typer

from ..core.config import AgentConfig
from ..core.protocols import NAMES as PROTOCOLS
from ..core.protocols import get as get_protocol
from ..errors import EXIT_USAGE, MemagentError
from ..model.runtime import MAX_SEQUENCES

if TYPE_CHECKING:
    from ..core.pipeline import SourceOptions
    from ..ingest.base import OcrProgress
    from ..ingest.text import ByteStream

DEFAULTS = AgentConfig()  # the reference's settings: the defaults of the options below


def option(help: str, *names: str, panel: str | None = None, **settings: Any) -> Any:
    """A typer option: its help, its names where they are not its parameter's, the help panel it is
    listed in, and typer.Option's other settings (min, metavar, envvar...). Its default is its
    parameter's (typer's rule for Annotated)."""
    return typer.Option(*names, help=help, rich_help_panel=panel, **settings)


def _protocols(what: str, setting: str, panel: str, **settings: Any) -> Any:
    """An option whose default is the protocol's (a budget, the sampling): unset (None), it is the
    protocol's, and its help says each protocol's."""
    defaults = ", ".join(f"{name} {getattr(get_protocol(name), setting)}" for name in PROTOCOLS)
    return option(f"{what} Default: the protocol's ({defaults}).", panel=panel, **settings)


def _budget(what: str, setting: str) -> Any:
    return _protocols(what, setting, "Budgets", min=1)


class ProtocolChoice(str, enum.Enum):
    memagent = "memagent"
    qwenlong = "qwenlong"
    infmem = "infmem"


# Model: which model, and how the embedded engine runs it.
ModelOpt = Annotated[
    Optional[str],
    option(
        "GGUF model file, or an installed model's name. Default: $MEMAGENT_MODEL. With --engine openai: "
        "the GGUF whose vocabulary cuts the chunks (as --tokenizer).",
        "--model",
        "-m",
        panel="Model",
    ),
]
ProtocolOpt = Annotated[
    Optional[ProtocolChoice],
    option(
        "The memory-agent protocol the model was trained on: [b]memagent[/] (RL-MemoryAgent), [b]qwenlong[/]"
        " (QwenLong-L1.5: memory and plan, 32K-token chunks) or [b]infmem[/] (InfMem: a search of the whole"
        " input before each chunk, early stopping). Default: the model's (its catalog entry or name), else memagent.",
        "--protocol",
        panel="Model",
    ),
]
OfflineOpt = Annotated[
    bool,
    option(
        "Never touch the network (also HF_HUB_OFFLINE=1): a model that is not installed is an error.", "--offline", panel="Model"
    ),
]
GpuLayersOpt = Annotated[
    Optional[str],
    option(
        "Layers to offload to the GPU: auto (all that fit in free GPU memory), -1 (all), 0 (none) or a number.",
        metavar="auto|N",
        panel="Model",
    ),
]
ThreadsOpt = Annotated[
    Optional[int],
    option(
        "CPU threads for generation (embedded engine). Default: the cores not already busy (all on an idle machine).",
        min=1,
        panel="Model",
    ),
]
FlashAttnOpt = Annotated[
    Optional[bool],
    option(
        "llama.cpp's flash attention (embedded engine). Default: on when layers run on a GPU, off on a CPU "
        "(where it measured slower).",
        "--flash-attn/--no-flash-attn",
        panel="Model",
    ),
]
SpeculateOpt = Annotated[
    Optional[bool],
    option(
        "Draft each memory rewrite from the previous memory and the chunk, and let the model check the drafts "
        "in one pass (embedded engine). Exact: the output is the same either way, only faster or slower. "
        "Default: what measured faster on this kind of device.",
        "--speculate/--no-speculate",
        panel="Model",
    ),
]
BatchOpt = Annotated[
    Optional[bool],
    option(
        "Run up to --parallel questions (or eval items) in one llama.cpp context on the embedded engine, "
        f"each generation step of all of them one pass (at most {MAX_SEQUENCES}). Default: on where layers run "
        "on a GPU, where it measured faster; off on a CPU, where it did not.",
        "--batch/--no-batch",
        panel="Model",
    ),
]
CtxOpt = Annotated[
    Optional[int], option("Context size (embedded engine). Default: just enough for the budgets.", "--ctx", min=64, panel="Model")
]
ChatTemplateOpt = Annotated[
    Optional[Path],
    option(
        "The model's chat template (Jinja, or a tokenizer_config.json holding one), for a GGUF without one "
        "or to replace its own. Embedded engine only: a server applies its own.",
        "--chat-template",
        metavar="FILE",
        panel="Model",
    ),
]

# Budgets and sampling: the agent's settings (AgentConfig).
ChunkOpt = Annotated[Optional[int], _budget("Document tokens read per memory update.", "chunk_tokens")]
MemoryOpt = Annotated[Optional[int], _budget("Most tokens a memory update may write (the memory's bound).", "memory_tokens")]
AnswerOpt = Annotated[Optional[int], _budget("Most tokens the final answer may use.", "answer_tokens")]
InstructionsOpt = Annotated[
    Optional[str],
    option(
        'How the answer should be written, e.g. "Answer in one word.": added after the question in the final'
        " prompt only; the memory updates see the question alone.",
        "--instructions",
        panel="Sampling",
    ),
]
SchemaOpt = Annotated[
    Optional[str],
    option(
        "Answer as data: the fields to fill, as a JSON Schema file, inline JSON, or a list such as"
        " [b]'invoice_number, date: the issue date, total float, paid bool'[/] (types str, int, float, bool)."
        " The answer is generated as JSON under it; --json gives it as [b]data[/], --csv a column per field."
        " With no question, one is made of the fields.",
        "--schema",
        panel="Sampling",
    ),
]
SchemaMultiOpt = Annotated[
    Optional[str],
    option(
        "Answer as a list of data: SCHEMA, as --schema takes it, for each item (every line item, party or date in a"
        " document), as llm's --schema-multi. --json gives the list as [b]data[/], --csv a row per item."
        " A list cut at --answer-tokens keeps its complete items.",
        "--schema-multi",
        panel="Sampling",
    ),
]


TemperatureOpt = Annotated[
    Optional[float], _protocols("Sampling temperature; 0 is greedy (repeatable runs).", "temperature", "Sampling", min=0.0)
]
TopPOpt = Annotated[
    Optional[float], _protocols("Nucleus sampling, applied after temperature.", "top_p", "Sampling", min=0.0, max=1.0)
]
EarlyStopOpt = Annotated[
    int,
    option(
        "infmem: end the reading when the planner says STOP this many times in a row (the paper's evaluation: 3).",
        "--early-stop",
        min=1,
        panel="Budgets",
    ),
]
SeedOpt = Annotated[Optional[int], option("Seed for sampling.", panel="Sampling")]
FinalOpt = Annotated[
    str,
    option(
        "The memagent protocol's final prompt: [b]boxed[/] (trained with) or [b]answer-is[/]"
        " (the paper's table was made with it).",
        panel="Sampling",
    ),
]

# Served engine: a server that runs the model (--engine openai).
EngineOpt = Annotated[
    str,
    option(
        "llama: run the GGUF here. openai: a server with an OpenAI-compatible API runs the model (vLLM, SGLang, llama-server).",
        "--engine",
        metavar="llama|openai",
        panel="Served engine",
    ),
]
BaseUrlOpt = Annotated[
    Optional[list[str]],
    option(
        "The server's API, e.g. http://127.0.0.1:8000/v1 (with --engine openai). Repeat it, or name a file "
        "with one URL per line, for a pool of servers of one model: requests spread by load, and a server "
        "that fails is left for the others.",
        "--base-url",
        panel="Served engine",
    ),
]
ApiKeyOpt = Annotated[
    Optional[str],
    option("Bearer token for the server.", "--api-key", envvar="MEMAGENT_API_KEY", show_envvar=True, panel="Served engine"),
]
ServedModelOpt = Annotated[
    Optional[str], option("The model's name on the server. Default: the one it serves.", "--served-model", panel="Served engine")
]
TokenizerOpt = Annotated[
    Optional[str],
    option(
        "GGUF (or installed/catalog model) whose vocabulary cuts the chunks. Default: the server's own tokenize endpoint.",
        "--tokenizer",
        metavar="PATH|NAME",
        panel="Served engine",
    ),
]
TimeoutOpt = Annotated[
    Optional[float],
    option(
        "The longest the server may stay silent (no reply, or no new token) before a request is tried again; "
        "after its last attempt the run stops, resumable. Default: 300.",
        "--timeout",
        metavar="SECONDS",
        panel="Served engine",
    ),
]

# Sources: what to read, and how.
IncludeOpt = Annotated[
    Optional[list[str]], option("Only files matching this glob inside folders (repeatable).", "--include", panel="Sources")
]
ExcludeOpt = Annotated[
    Optional[list[str]], option("Skip files matching this glob inside folders (repeatable).", "--exclude", panel="Sources")
]
PasswordOpt = Annotated[Optional[str], option("Password for encrypted PDFs.", panel="Sources")]


class OcrChoice(str, enum.Enum):
    auto = "auto"
    always = "always"
    never = "never"


OcrOpt = Annotated[
    OcrChoice,
    option(
        "Read scanned PDF pages and images with OCR: auto (only pages with no text layer), always (every "
        "PDF page), never. Needs the ocr extra: pip install 'memagent-cli\\[ocr]'.",
        "--ocr",
        case_sensitive=False,
        panel="Sources",
    ),
]

# Output.
VerboseOpt = Annotated[bool, option("Show llama.cpp's own log, or each request sent to a served engine.", "--verbose", "-v")]

# What commands print and write, and how they run their runs: each flag with one meaning and one
# help text wherever it is taken (a test holds them to it, tests/test_help.py). A command's own
# default may differ (typer shows it); where it does, the help says why.
JsonOpt = Annotated[bool, option("Print JSON on stdout instead of text (docs/JSON.md).", "--json")]
JsonLinesOpt = Annotated[
    bool, option("Print each answer's JSON record on stdout as it lands, one a line (docs/JSON.md).", "--json")
]
QuietOpt = Annotated[bool, option("No live view, table or progress: stderr has the errors alone.", "--quiet")]
RawOpt = Annotated[bool, option("Print the whole final reply, not just the extracted answer.", "--raw")]
CiteOpt = Annotated[
    bool,
    option(
        'Print under each answer the sentences of the sources it rests on, each with where it is: [1] report.pdf p. 12: "…".',
        "--cite",
    ),
]
ParallelOpt = Annotated[
    int,
    option(
        "Runs in flight at once where the engine takes several calls: a served engine (or pool), or the embedded"
        f" engine batching them in one context (at most {MAX_SEQUENCES}; see --batch). The job commands (batch,"
        " eval) default to more, having more runs to overlap.",
        min=1,
        metavar="N",
    ),
]
NoTraceOpt = Annotated[
    bool,
    option(
        "Record nothing in the trace store: no answer is found there again, and an interrupted run starts over.",
        "--no-trace",
        panel="Traces",
    ),
]
CsvOpt = Annotated[
    Optional[Path],
    option(
        "A spreadsheet of the answers: a row per run (its document or custom_id, the question, a column per --schema"
        " field, the answer, its evidence and first quote, the trace, any error), UTF-8 with a byte-order mark.",
        "--csv",
        metavar="FILE.csv",
        panel="Outputs",
    ),
]
JsonlOpt = Annotated[
    Optional[Path], option("Each run's JSON record, one a line (docs/JSON.md).", "--jsonl", metavar="FILE", panel="Outputs")
]
HtmlOpt = Annotated[
    Optional[Path],
    option(
        "One self-contained page to share: the table, each answer's evidence, each run's memory timeline.",
        "--html",
        metavar="FILE",
        panel="Outputs",
    ),
]
QuestionOpt = Annotated[
    Optional[list[str]],
    option(
        "A question (repeatable): each gets its own memory and trace; every argument is then a source.",
        "--question",
        "-q",
        panel="Questions",
    ),
]
QuestionsFileOpt = Annotated[
    Optional[Path],
    option(
        'Questions from a file: one per line, or JSONL with a "question" (or "input") field.',
        "--questions",
        metavar="FILE",
        panel="Questions",
    ),
]


@dataclass(frozen=True)
class QuestionFlags:
    """The questions given by flag (`ask`, `watch`): -q (repeatable) and --questions FILE."""

    question: QuestionOpt = None
    questions_file: QuestionsFileOpt = None

    @property
    def given(self) -> bool:
        return bool(self.question or self.questions_file)

    def gathered(self, note: Callable[[str], None] | None = None) -> list[str]:
        """The questions of -q, then those of the file (read_questions)."""
        return list(self.question or []) + (read_questions(self.questions_file, note) if self.questions_file else [])

    def files(self) -> list[Path]:
        """The files the questions are read from (which no output may overwrite)."""
        return [self.questions_file] if self.questions_file else []


@dataclass(frozen=True)
class ShowFlags:
    """How a command that answers as it reads prints each answer (ask, chat)."""

    json_out: JsonOpt = False
    raw: RawOpt = False
    cite: CiteOpt = False
    quiet: QuietOpt = False


@dataclass(frozen=True)
class LineShowFlags(ShowFlags):
    """ShowFlags where the answers come one after another (chat): --json prints a record a line."""

    json_out: JsonLinesOpt = False


@dataclass(frozen=True)
class OutputFlags:
    """The files a command of many runs writes its answers to (`ask --each`, `watch`)."""

    jsonl: JsonlOpt = None
    csv_file: CsvOpt = None
    html: HtmlOpt = None

    def written(self) -> dict[str, Path | None]:
        """Each file, by its flag (cli.common.check_outputs)."""
        return {"--jsonl": self.jsonl, "--csv": self.csv_file, "--html": self.html}


# The results file of a job (`batch`, `eval`): required where there is no job without one.
RESULTS_HELP = "Each result is appended here as it finishes; a rerun with the same model and settings goes on from it."


FreshOpt = Annotated[
    bool,
    option(
        "Read again: give no answer found in the trace store (the same question, text, model and settings),"
        " and continue no earlier run over an earlier version of the text. The new run is the one found next"
        " time. Also MEMAGENT_FRESH=1.",
        "--fresh",
        envvar="MEMAGENT_FRESH",
        show_envvar=False,
        panel="Traces",
    ),
]


def stdin_piped() -> bool:
    try:
        return not sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class SourceFlags:
    """The flags of every command that reads documents (ask, batch, inspect), as given: what to
    read and how. A field's name is its parameter's."""

    include: IncludeOpt = None
    exclude: ExcludeOpt = None
    password: PasswordOpt = None
    ocr: OcrOpt = OcrChoice.auto

    def settings(
        self,
        stdin: ByteStream | None,
        on_ocr: Callable[[OcrProgress], None] | None = None,
        written: Iterable[Path | None] = (),
    ) -> SourceOptions:
        """What to read and how, for the pipeline; `stdin`: where - reads from; `written`: the
        files the command writes, which a folder's walk skips."""
        from ..core.pipeline import SourceOptions

        return SourceOptions(
            include=self.include or (),
            exclude=self.exclude or (),
            password=self.password,
            ocr=self.ocr.value,
            stdin=stdin,
            stdin_is_piped=stdin_piped(),
            on_ocr=on_ocr,
            written=frozenset(str(path) for path in written if path is not None),
        )


_Command = TypeVar("_Command", bound=Callable[..., Any])


def flag_groups(command: _Command) -> _Command:
    """Lets a command take a group of flags as one parameter typed as its dataclass (SourceFlags,
    run_flags.RunFlags): the group's options stand in the command's signature where that parameter
    stands, their defaults the parameter's default's (else the group's own), and the command is
    handed the group made from them. A group's field may be a group itself (ask_flags.AskFlags)."""
    hints = typing.get_type_hints(command, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, _Group] = {}
    for param in inspect.signature(command).parameters.values():
        kind = hints.get(param.name, param.annotation)
        if _is_group(kind):
            groups[param.name] = _Group.of(kind, param.default, params)
        else:
            params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=kind))

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        for name, group in groups.items():
            kwargs[name] = group.made(kwargs)
        return command(**kwargs)

    # typer reads a command's options from its signature and its type hints
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return typing.cast(_Command, run)


def _is_group(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


@dataclass(frozen=True)
class _Group:
    """A group of flags: its dataclass, its own fields' names and its groups by field."""

    kind: type
    fields: tuple[str, ...]
    groups: tuple[tuple[str, _Group], ...]

    @classmethod
    def of(cls, kind: type, default: Any, params: list[inspect.Parameter]) -> _Group:
        """The group, its options appended to `params` with their defaults (`default`'s, where it is one)."""
        given = default if isinstance(default, kind) else kind()
        hints = typing.get_type_hints(kind, include_extras=True)
        fields, groups = [], []
        for name in (f.name for f in dataclasses.fields(kind)):
            if _is_group(hints[name]):
                groups.append((name, cls.of(hints[name], getattr(given, name), params)))
            else:
                fields.append(name)
                params.append(
                    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=getattr(given, name), annotation=hints[name])
                )
        return cls(kind, tuple(fields), tuple(groups))

    def made(self, kwargs: dict[str, Any]) -> Any:
        """The group, from the command's keyword arguments (its options taken out of them)."""
        own = {name: kwargs.pop(name) for name in self.fields if name in kwargs}
        return self.kind(**own, **{name: group.made(kwargs) for name, group in self.groups})


def read_questions(path: Path, note: Callable[[str], None] | None = None) -> list[str]:
    """One question per line, or JSONL objects with "question" or "input"; blank lines skipped. A
    file that is not UTF-8 is decoded as documents are (ingest.text.decode_text), told to `note`."""
    import json

    from ..ingest.text import decode_text

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MemagentError(f"Cannot read --questions {path}: {exc.strerror}.", exit_code=EXIT_USAGE) from None
    text, codec = decode_text(data.removeprefix(b"\xef\xbb\xbf"))
    if codec is not None and note is not None:
        note(f"{path} is not UTF-8; its questions were read as {codec}.")
    out: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MemagentError(f"{path} line {n} is not valid JSON: {exc.msg}.", exit_code=EXIT_USAGE) from None
            found = item.get("question", item.get("input")) if isinstance(item, dict) else None
            if not isinstance(found, str):
                raise MemagentError(f'{path} line {n} has no "question" or "input" text.', exit_code=EXIT_USAGE)
            line = found
        out.append(line)
    if not out:
        raise MemagentError(f"{path} holds no questions.", "Write one question per line.", exit_code=EXIT_USAGE)
    return out
