"""Command-line options that several commands share (the budgets, sampling, threads, the served
engine's, the sources'), each declared once as a typer `Annotated` alias, and the small parsers
behind them (--base-url's URLs and files, --questions, --chat-template, --gpu-layers). setup.py
gathers the options of every command that runs a model into RunFlags and turns them into a run."""

from __future__ import annotations

import enum
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional, Sequence

import typer

from ..core.config import AgentConfig
from ..errors import EXIT_USAGE, MemagentError
from ..model.runtime import MAX_SEQUENCES

if TYPE_CHECKING:
    from ..core.pipeline import SourceOptions
    from ..ingest.base import OcrProgress
    from ..ingest.text import ByteStream

DEFAULTS = AgentConfig()  # the reference's settings: the defaults of the options below

ChunkOpt = Annotated[
    Optional[int],
    typer.Option(
        help="Document tokens read per memory update. Default: the protocol's (memagent 5000, qwenlong 32768).",
        min=1,
        rich_help_panel="Budgets",
        show_default=False,
    ),
]
MemoryOpt = Annotated[
    Optional[int],
    typer.Option(
        help="Most tokens a memory update may write (the memory's bound)."
        " Default: the protocol's (memagent 1024, qwenlong 15360).",
        min=1,
        rich_help_panel="Budgets",
        show_default=False,
    ),
]
AnswerOpt = Annotated[
    Optional[int],
    typer.Option(
        help="Most tokens the final answer may use. Default: the protocol's (memagent 1024, qwenlong 8192).",
        min=1,
        rich_help_panel="Budgets",
        show_default=False,
    ),
]
TemperatureOpt = Annotated[
    float, typer.Option(help="Sampling temperature; 0 is greedy (repeatable runs).", min=0.0, rich_help_panel="Sampling")
]
TopPOpt = Annotated[
    float, typer.Option(help="Nucleus sampling, applied after temperature.", min=0.0, max=1.0, rich_help_panel="Sampling")
]
SeedOpt = Annotated[Optional[int], typer.Option(help="Seed for sampling.", rich_help_panel="Sampling", show_default=False)]
FinalOpt = Annotated[
    str,
    typer.Option(
        help="The memagent protocol's final prompt: [b]boxed[/] (trained with) or [b]answer-is[/]"
        " (the paper's table was made with it).",
        rich_help_panel="Sampling",
    ),
]


class ProtocolChoice(str, enum.Enum):
    memagent = "memagent"
    qwenlong = "qwenlong"


ProtocolOpt = Annotated[
    Optional[ProtocolChoice],
    typer.Option(
        "--protocol",
        help="The memory-agent protocol the model was trained on: [b]memagent[/] (RL-MemoryAgent) or [b]qwenlong[/]"
        " (QwenLong-L1.5: memory and plan, 32K-token chunks). Default: the model's (its catalog entry or name), else memagent.",
        rich_help_panel="Model",
        show_default=False,
    ),
]
InstructionsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--instructions",
        help='How the answer should be written, e.g. "Answer in one word.": added after the question in the final'
        " prompt only; the memory updates see the question alone.",
        rich_help_panel="Sampling",
        show_default=False,
    ),
]
ThreadsOpt = Annotated[
    Optional[int],
    typer.Option(
        help="CPU threads for generation (embedded engine). Default: the cores not already busy (all on an idle machine).",
        min=1,
        rich_help_panel="Model",
        show_default=False,
    ),
]
FlashAttnOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--flash-attn/--no-flash-attn",
        help="llama.cpp's flash attention (embedded engine). Default: on when layers run on a GPU, off on a CPU "
        "(where it measured slower).",
        rich_help_panel="Model",
        show_default=False,
    ),
]
SpeculateOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--speculate/--no-speculate",
        help="Draft each memory rewrite from the previous memory and the chunk, and let the model check the drafts "
        "in one pass (embedded engine). Exact: the output is the same either way, only faster or slower. "
        "Default: what measured faster on this kind of device.",
        rich_help_panel="Model",
        show_default=False,
    ),
]
BatchOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--batch/--no-batch",
        rich_help_panel="Model",
        show_default=False,
        help="Run up to --parallel questions (or eval items) in one llama.cpp context on the embedded engine, "
        f"each generation step of all of them one pass (at most {MAX_SEQUENCES}). Default: on where layers run "
        "on a GPU, where it measured faster; off on a CPU, where it did not.",
    ),
]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Show llama.cpp's own log, or each request sent to a served engine.")
]

EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        metavar="llama|openai",
        rich_help_panel="Served engine",
        help="llama: run the GGUF here. openai: a server with an OpenAI-compatible API runs the model "
        "(vLLM, SGLang, llama-server).",
    ),
]
BaseUrlOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--base-url",
        show_default=False,
        rich_help_panel="Served engine",
        help="The server's API, e.g. http://127.0.0.1:8000/v1 (with --engine openai). Repeat it, or name a file "
        "with one URL per line, for a pool of servers of one model: requests spread by load, and a server "
        "that fails is left for the others.",
    ),
]
ApiKeyOpt = Annotated[
    Optional[str],
    typer.Option(
        "--api-key",
        envvar="MEMAGENT_API_KEY",
        show_default=False,
        show_envvar=True,
        rich_help_panel="Served engine",
        help="Bearer token for the server.",
    ),
]
ServedModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--served-model",
        show_default=False,
        rich_help_panel="Served engine",
        help="The model's name on the server. Default: the one it serves.",
    ),
]
TokenizerOpt = Annotated[
    Optional[str],
    typer.Option(
        "--tokenizer",
        metavar="PATH|NAME",
        show_default=False,
        rich_help_panel="Served engine",
        help="GGUF (or installed/catalog model) whose vocabulary cuts the chunks. Default: the server's own tokenize endpoint.",
    ),
]

ChatTemplateOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--chat-template",
        metavar="FILE",
        show_default=False,
        rich_help_panel="Model",
        help="The model's chat template (Jinja, or a tokenizer_config.json holding one), for a GGUF without one "
        "or to replace its own. Embedded engine only: a server applies its own.",
    ),
]

TimeoutOpt = Annotated[
    Optional[float],
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        show_default=False,
        rich_help_panel="Served engine",
        help="The longest the server may stay silent (no reply, or no new token) before a request is tried again; "
        "after its last attempt the run stops, resumable. Default: 300.",
    ),
]


class ChatTemplate:
    """A --chat-template the user gave: its text, and what a trace keeps to resume with it."""

    def __init__(self, text: str, record: dict[str, str]):
        self.text, self.record = text, record


def chat_template(path: Path | None, engine: str, *, expect_sha256: str | None = None) -> ChatTemplate | None:
    """The checked template at `path` (None: the GGUF's own). `expect_sha256`: a resumed run's,
    which the file must still match."""
    import hashlib

    from ..model.backends import backend
    from ..model.chat import read_template

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
    from ..core.protocols import of_model

    name = protocol.value if isinstance(protocol, ProtocolChoice) else protocol
    try:
        return AgentConfig.with_protocol(name or of_model(model_path, served_model), **settings)
    except ValueError as exc:
        raise MemagentError(f"Invalid option: {exc}.", exit_code=EXIT_USAGE) from None


ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-m",
        help="GGUF model file, or an installed model's name. Default: $MEMAGENT_MODEL. With --engine openai: "
        "the GGUF whose vocabulary cuts the chunks (as --tokenizer).",
        show_default=False,
        rich_help_panel="Model",
    ),
]
IncludeOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--include",
        help="Only files matching this glob inside folders (repeatable).",
        rich_help_panel="Sources",
        show_default=False,
    ),
]
ExcludeOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--exclude",
        help="Skip files matching this glob inside folders (repeatable).",
        rich_help_panel="Sources",
        show_default=False,
    ),
]
PasswordOpt = Annotated[
    Optional[str], typer.Option(help="Password for encrypted PDFs.", rich_help_panel="Sources", show_default=False)
]


class OcrChoice(str, enum.Enum):
    auto = "auto"
    always = "always"
    never = "never"


OcrOpt = Annotated[
    OcrChoice,
    typer.Option(
        "--ocr",
        case_sensitive=False,
        rich_help_panel="Sources",
        help="Read scanned PDF pages and images with OCR: auto (only pages with no text layer), always (every "
        "PDF page), never. Needs the ocr extra: pip install 'memagent-cli\\[ocr]'.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of text.")]


def quiet_library_logs(verbose: bool) -> None:
    # pypdf logs repairs of damaged files ("incorrect startxref pointer") as warnings, which
    # Python prints raw to stderr; what matters reaches the user as our own notes.
    logging.getLogger("pypdf").setLevel(logging.WARNING if verbose else logging.ERROR)


def stdin_piped() -> bool:
    try:
        return not sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def source_settings(
    include: list[str] | None,
    exclude: list[str] | None,
    password: str | None,
    ocr: OcrChoice,
    stdin: ByteStream | None,
    on_ocr: Callable[[OcrProgress], None] | None = None,
) -> SourceOptions:
    """What to read and how, from the source flags every reading command shares (ask, inspect)."""
    from ..core.pipeline import SourceOptions

    return SourceOptions(
        include=include or (),
        exclude=exclude or (),
        password=password,
        ocr=ocr.value,
        stdin=stdin,
        stdin_is_piped=stdin_piped(),
        on_ocr=on_ocr,
    )


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


def gpu_layers_setting(flag: str | None) -> int | None:
    """--gpu-layers, else the configured value, else auto (None: planned from free GPU memory)."""
    from ..install.settings import KEYS, get_setting

    value = flag if flag is not None else get_setting("gpu_layers")
    if value is None or value == "auto":
        return None
    layers = KEYS["gpu_layers"][0](str(value))
    return None if isinstance(layers, str) else layers  # the parser gives a str for "auto" alone


GpuLayersOpt = Annotated[
    Optional[str],
    typer.Option(
        metavar="auto|N",
        help="Layers to offload to the GPU: auto (all that fit in free GPU memory), -1 (all), 0 (none) or a number.",
        rich_help_panel="Model",
        show_default=False,
    ),
]
