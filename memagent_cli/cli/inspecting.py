"""`memagent inspect`: what a question would cost without loading weights, the prompt a step
would send, and (`--text`) the document text exactly as the model will read it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Callable, Optional

import typer
from rich.console import Console

from ..errors import EXIT_USAGE, MemagentError
from ..install.config_file import whole_number
from ..model.runtime import MAX_SEQUENCES
from .ask_flags import AskFlags, QuestionArgs
from .common import check_paths, fail, noter, stderr_console, warner
from .follow import FollowFlags
from .options import ProtocolChoice, QuestionFlags, SourceFlags, flag_groups
from .run_flags import PromptFlags, RunFlags, chat_template, quiet_library_logs
from .single import given_flags
from .textout import SafeConsole, print_json

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..ingest.base import OcrProgress


TextOpt = Annotated[
    bool,
    typer.Option(
        "--text",
        help="Print on stdout exactly the document text the model will read, laid out as ask lays it out. Needs no "
        "model; with -m, normalized as that model's tokenizer normalizes it (NFC for Qwen models).",
    ),
]
ShowPromptOpt = Annotated[
    Optional[str],
    typer.Option(
        "--show-prompt",
        metavar="K|final",
        show_default=False,
        help="Print exactly the text sent for memory step K, or for the final answer (needs --question or --schema).",
    ),
]
SequencesOpt = Annotated[
    int,
    typer.Option(
        "--sequences",
        metavar="N",
        min=1,
        max=MAX_SEQUENCES,
        help="Size the context for N questions batched in one llama.cpp context, as `ask --batch` does "
        "with N questions (-q ... up to --parallel; batching is on by default where layers run on a GPU).",
    ),
]


@flag_groups
def inspect(
    ctx: typer.Context,
    args: QuestionArgs = None,
    show_text: TextOpt = False,
    show_prompt: ShowPromptOpt = None,
    sequences: SequencesOpt = 1,
    given: AskFlags = AskFlags(),
    flags: RunFlags = RunFlags(),
) -> None:
    """Count what a question would cost, without loading any weights; or show what memagent reads.

    Shows files and pages, the exact token count in the model's own tokenizer, the number of
    steps, the llama.cpp context and its KV cache, and an estimate of the run time;
    --show-prompt prints what the model would see. A vocabulary-only GGUF is enough.
    --text prints the document text itself (no model needed): what a Word file, a web page or a
    scan became.

    It takes `ask`'s arguments and flags: an ask line is an inspect line with its verb changed (a flag
    that changes how a run goes, not what it reads, is said once and ignored).

    [dim]Examples:[/]
      memagent inspect report.pdf --model m.gguf
      memagent inspect report.pdf "Who signed the 2019 amendment?" -m m.gguf --show-prompt final
      memagent inspect -c --question "And when does it end?" --show-prompt 1
      memagent inspect deck.pptx --text | less
      memagent inspect scan.pdf --text --ocr always
    """
    from ..core.inspection import final_prompt, inspect_sources, step_prompt
    from ..traces.calibration import recorded_runs
    from .model_choice import installed_model
    from .views.reports import render_inspection

    err = stderr_console()
    quiet_library_logs(False)
    warn = warner(err)
    if show_text:
        _print_document_text(args or [], given.source_flags, warn, err, flags.model)
        return
    try:
        _ignored(given_flags(ctx), err)
        sources, question = _sources_and_question(args, given.asked, given.follow.following, warn)
        json_out = given.shown.json_out
        answer = _answer_config(flags)
        question, step = _prompt_plan(show_prompt, question, answer)
        template = chat_template(flags.template_file, "llama")
        read = _Reading(sources, flags.model, flags.chunk_tokens, flags.memory_tokens, flags.protocol)
        read = read.following(given.follow, question, err)
        check_paths(read.paths)  # a missing file is said before a missing model
        report = inspect_sources(
            read.paths,
            model=installed_model(read.model),
            question=question,
            **read.budgets(),
            sources=given.source_flags.settings(_stdin()),
            keep_chunk=step or None,
            chat_template=template.text if template is not None else None,
            sequences=sequences,
            warn=warn,
            recorded=recorded_runs,
        )
        if show_prompt is not None:
            _print_prompt(*(step_prompt(report, step) if step else final_prompt(report, answer)), err)
            return
    except MemagentError as exc:
        fail(err, exc)
    if json_out:
        print_json(report.to_dict())
    else:
        SafeConsole(highlight=False).print(render_inspection(report))


@dataclass(frozen=True)
class _Reading:
    """What inspect reads and with what: the sources, model, budgets and protocol given, or, for a
    follow-up (-c, --cid), its conversation's where not given, and the turns its question follows."""

    paths: list[str]
    model: str | None
    chunk_tokens: int | None
    memory_tokens: int | None
    protocol: ProtocolChoice | None
    history: tuple[tuple[str, str], ...] = ()

    def budgets(self) -> dict[str, Any]:
        return {
            "chunk_tokens": self.chunk_tokens,
            "memory_tokens": self.memory_tokens,
            "protocol": self.protocol.value if self.protocol else None,
            "history": self.history,
        }

    def following(self, follow: FollowFlags, question: str | None, err: Console) -> _Reading:
        """This reading, or a follow-up's: it reads its conversation's own sources, from where it began."""
        from ..runs.follow_ups import find_conversation
        from ..traces.store import TraceStore

        follow.check()
        if not follow.following:
            return self
        if self.paths:
            raise MemagentError("A follow-up takes no sources: the conversation reads its own.", exit_code=EXIT_USAGE)
        if not question:
            raise MemagentError("-c and --cid need the follow-up's --question.", exit_code=EXIT_USAGE)
        with TraceStore() as store:
            found = find_conversation(store, follow.ref)
        if found.cwd and os.path.isdir(found.cwd):
            os.chdir(found.cwd)  # its sources' relative paths are from where it began
        noter(err)(found.next_turn())
        settings = found.first.get("settings") or {}
        return _Reading(
            found.paths,
            self.model or (found.first.get("model") or {}).get("path"),
            self.chunk_tokens or settings.get("chunk_tokens"),
            self.memory_tokens or settings.get("memory_tokens"),
            self.protocol or ProtocolChoice(settings.get("protocol") or "memagent"),
            () if follow.standalone else tuple(found.history),
        )


# ask's flags that change how a run goes, not what it reads or sends: inspect takes them and says so once
_IGNORED = {
    "resume": "--resume",
    "no_trace": "--no-trace",
    "fresh": "--fresh",
    "each": "--each",
    "jsonl": "--jsonl",
    "csv_file": "--csv",
    "html": "--html",
    "parallel": "--parallel",
    "raw": "--raw",
    "cite": "--cite",
    "quiet": "--quiet",
    "svg": "--svg",
    "offline": "--offline",
    "gpu_layers": "--gpu-layers",
    "threads": "--threads",
    "flash_attn": "--flash-attn",
    "speculate": "--speculate",
    "batch": "--batch",
    "n_ctx": "--ctx",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "seed": "--seed",
    "final": "--final",
    "answer_tokens": "--answer-tokens",
    "early_stop": "--early-stop",
    "engine": "--engine",
    "base_url": "--base-url",
    "api_key": "--api-key",
    "served_model": "--served-model",
    "tokenizer": "--tokenizer",
    "timeout": "--timeout",
}


def _ignored(given: set[str], err: Console) -> None:
    """One line naming the flags of `ask` given here that change nothing inspect counts or shows."""
    names = [flag for name, flag in _IGNORED.items() if name in given]
    if names:
        noter(err)(f"inspect ignores {', '.join(names)}: they change how a run goes, not what it reads or sends")


def _sources_and_question(
    args: list[str] | None, asked: QuestionFlags, following: bool, warn: Callable[[str], None]
) -> tuple[list[str], str | None]:
    """The sources and the question, as `ask` reads its arguments: -q's (the first, of several), else
    the last argument where it names no file; a follow-up's argument is its question."""
    given = list(args or [])
    questions = asked.gathered(warn)
    if len(questions) > 1:
        warn(f"inspect sizes one question: the first of the {len(questions)} given")
    if questions:
        return given, questions[0]
    if following:  # its sources are the conversation's: any named is refused (_Reading.following)
        return given[:-1], (given[-1] if given else None)
    # sources, then the question: a lone argument is a source (inspect's own use: `inspect doc.pdf`),
    # so that a mistyped file name is said as one
    if len(given) > 1 and given[-1] != "-" and not os.path.lexists(given[-1]):
        return given[:-1], given[-1]
    return given, None


def _answer_config(flags: PromptFlags) -> AgentConfig:
    """What --instructions and --schema add to the final prompt, as the run setup reads them."""
    from ..core.config import AgentConfig

    return AgentConfig(**flags.asked_for())


def _print_prompt(text: str, note: str | None, err: Console) -> None:
    if note:
        noter(err)(note)
    sys.stdout.write(text)
    sys.stdout.flush()


def _prompt_plan(show_prompt: str | None, question: str | None, answer: AgentConfig) -> tuple[str | None, int]:
    """The question (--question, else the one --schema's fields make) and --show-prompt's step."""
    schema = answer.schema()
    question = question or (schema.question() if schema else None)
    if show_prompt is not None and not question:
        raise MemagentError("--show-prompt needs --question (or --schema).", exit_code=EXIT_USAGE)
    return question, _prompt_step(show_prompt)


def _prompt_step(value: str | None) -> int:
    """--show-prompt's K (a step from 1), or 0 for `final`."""
    if value is None or value.strip().lower() == "final":
        return 0
    return whole_number(value, f"--show-prompt takes a step number from 1, or final; not {value!r}.")


def _print_document_text(
    paths: list[str], source_flags: SourceFlags, warn: Callable[[str], None], err: Console, model: str | None
) -> None:
    """`inspect --text`: the laid-out document on stdout as it is read, notes on stderr."""
    from ..core.pipeline import document_text

    options = source_flags.settings(_stdin(), on_ocr=_ocr_reporter(err))
    from .textout import visible

    ended_with_newline = True
    # On a terminal the document is displayed, never obeyed (an escape sequence in it is shown as
    # a control picture); piped, it is data, exactly as the model reads it.
    shown = visible if sys.stdout.isatty() else str
    try:
        for piece in document_text(paths, options, warn, model):
            sys.stdout.write(shown(piece))
            ended_with_newline = piece.endswith("\n")
    except MemagentError as exc:
        sys.stdout.flush()
        fail(err, exc)
    if sys.stdout.isatty() and not ended_with_newline:
        sys.stdout.write("\n")  # the shell's prompt on a line of its own; piped, the text stays exact
    sys.stdout.flush()


def _stdin() -> BinaryIO | None:
    return sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None


def _ocr_reporter(err: Console) -> Callable[[OcrProgress], None] | None:
    """OCR progress on stderr for `inspect --text`, one line per page (a live view has none)."""
    from .views.live import ocr_line

    say = noter(err)

    def report(progress: OcrProgress) -> None:
        say(ocr_line(progress.title, progress.done, progress.total, progress.seconds))

    return report
