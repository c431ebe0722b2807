"""`memagent ask`: one question, or several over the same reading, with the live view, traces,
resume and the JSON record; what it prints and how its errors map to exit codes."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Callable, Iterable, NoReturn, Optional, Protocol

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from ..model.runtime import MAX_SEQUENCES
from .common import check_outputs, check_paths, fail, open_store, sigterm_as_interrupt, stderr_console
from .many import resume_hint, run_many
from .options import FreshOpt, JsonOpt, OcrChoice, SourceFlags, flag_groups, option, quiet_library_logs, read_questions
from .reuse import Lookup, record_text, show_reused
from .setup import RunFlags, RunSetup, setup
from .textout import SafeConsole, print_json

if TYPE_CHECKING:
    from ..core.events import Event, RunResult
    from ..core.reuse import AnswerKey
    from ..traces.recorder import HashingReader, Recorder
    from ..traces.store import TraceStore
    from .views.live import LiveView, PlainProgress


QuestionArgs = Annotated[
    Optional[list[str]],
    typer.Argument(
        metavar="[SOURCE]... QUESTION",
        show_default=False,
        help="PDFs, text files, folders or - for stdin, then the question. With no source, piped stdin is read.",
    ),
]
ResumeOpt = Annotated[
    Optional[str],
    option(
        "Continue an interrupted run from its last completed step, with its sources, question and settings.",
        metavar="ID|last",
        panel="Traces",
    ),
]
NoTraceOpt = Annotated[bool, option("Do not record this run in the trace store.", "--no-trace", panel="Traces")]
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
EachOpt = Annotated[
    bool,
    option(
        "Ask every document on its own: each file (in folders and archives too) x each question is its "
        "own run, with its own memory and trace, on one loaded model.",
        "--each",
        panel="Questions",
    ),
]


def _each_file(help: str, *names: str) -> Any:
    return option(help, *names, metavar="FILE", panel="Questions")


JsonlOpt = Annotated[Optional[Path], _each_file("With --each: append each run's JSON record to FILE as it finishes.")]
CsvOpt = Annotated[
    Optional[Path],
    _each_file("With --each: a spreadsheet of the runs (document, question, answer, evidence, trace, error).", "--csv"),
]
HtmlOpt = Annotated[
    Optional[Path],
    _each_file("With --each: one self-contained page to share: the table, the evidence, each run's memory timeline."),
]
ParallelOpt = Annotated[
    int,
    option(
        "Model calls in flight at once: on a served engine, or batched in one context on the embedded "
        f"engine (at most {MAX_SEQUENCES}; see --batch).",
        min=1,
        panel="Questions",
    ),
]
RawOpt = Annotated[bool, option("Print the whole final reply, not just the extracted answer.", "--raw")]
CiteOpt = Annotated[
    bool,
    option(
        'Print under the answer the sentences of the sources it rests on, each with where it is: [1] report.pdf p. 12: "…".',
        "--cite",
    ),
]
QuietOpt = Annotated[bool, option("Print only the answer: no live view, no progress.", "--quiet")]
SvgOpt = Annotated[Optional[Path], option("Save a picture of the live view (SVG) when the run ends.")]


@flag_groups
def ask(
    ctx: typer.Context,
    args: QuestionArgs = None,
    source_flags: SourceFlags = SourceFlags(),
    resume: ResumeOpt = None,
    no_trace: NoTraceOpt = False,
    fresh: FreshOpt = False,
    question: QuestionOpt = None,
    questions_file: QuestionsFileOpt = None,
    each: EachOpt = False,
    jsonl: JsonlOpt = None,
    csv_file: CsvOpt = None,
    html: HtmlOpt = None,
    parallel: ParallelOpt = 4,
    json_out: JsonOpt = False,
    raw: RawOpt = False,
    cite: CiteOpt = False,
    quiet: QuietOpt = False,
    svg: SvgOpt = None,
    flags: RunFlags = RunFlags(),
) -> None:
    """Answer a question about documents.

    Every run is recorded (see [b]memagent traces[/]); Ctrl-C stops it and prints how to resume.
    The same question about the same unchanged text is answered from the record at once (--fresh reads
    again), and a document that grew at its end is read from where it changed.

    [dim]Examples:[/]
      memagent ask report.pdf "Who signed the 2019 amendment?"
      memagent ask notes/ --include "*.md" "What did we decide about pricing?"
      cat build.log | memagent ask "Why did the build fail?"
      memagent ask contract.pdf -q "Who signed it?" -q "When does it end?"
      memagent ask contracts/ --each -q "Who signed it?" --csv signed.csv
      memagent ask --engine openai --base-url http://gpu-box:8000/v1 report.pdf "Who signed it?"
      memagent ask --resume last
    """
    from ..core.pipeline import ask_events, ask_many_events, found_sources
    from ..traces.recorder import resume_plan, resumed_found, resumed_paths

    err = stderr_console()
    quiet_library_logs(flags.verbose)
    out = _Output(quiet=quiet, json_out=json_out, raw=raw, cite=cite, svg=svg.resolve() if svg else None)  # resumed runs move
    recorder: Recorder | None = None
    try:
        _check_together(each=each, resume=resume, svg=svg, each_files=(jsonl, csv_file, html))
        store = None if no_trace else open_store(err, required=bool(resume))
        traced = _Traced(err, store)
        run = None
        if resume:
            if store is None:
                raise MemagentError("--resume needs the trace store.", "Drop --no-trace.", exit_code=EXIT_USAGE)
            run = resume_plan(store, resume)
            _refuse_changed_options(ctx, run, flags)
            _enter(run["settings"].get("cwd"))
            source_flags = replace(source_flags, ocr=OcrChoice(run["settings"].get("ocr", "auto")))
            paths, questions = list(resumed_paths(run)), [run["question"]]
        else:
            paths, questions = _questions(args, question, questions_file, each, traced.warn, schema=flags.schema is not None)
            check_paths(paths)  # a missing file is said before a missing model: nothing is fetched for it
        written = {"--jsonl": jsonl, "--csv": csv_file, "--html": html, "--svg": svg}
        check_outputs(written, inputs=[*paths, *([questions_file] if questions_file else [])])
        setup_ = setup(flags, err, stored=run)
        traced.setup = setup_
        sources = source_flags.settings(traced.stdin, written=written.values())
        if run is not None:  # a file the run found in a folder is skipped again if it cannot be read
            sources = replace(sources, found=resumed_found(run))
        lookup = Lookup(store if run is None else None, setup_, sources, fresh, traced.warn)
        if each:
            from .each import EachOutput, run_each

            output = EachOutput(quiet=quiet, json_out=json_out, raw=raw, cite=cite, jsonl=jsonl, csv=csv_file, html=html)
            run_each(paths, questions, setup_, sources, parallel, lookup, traced.recorder if store else None, err, output)
        elif len(questions) > 1:
            found = found_sources(paths, sources)
            keys = [lookup.key(q, found.sources) for q in questions]
            reused = {i: r for i, key in enumerate(keys) if (r := lookup.reused(key, found.sources)) is not None}
            asked = [i for i in range(len(questions)) if i not in reused]
            if not asked:
                for note in found.notes:
                    traced.warn(note)
            events = ask_many_events(
                [questions[i] for i in asked],
                paths,
                **setup_.args(),
                sources=sources,
                parallel=parallel,
                found=found,
                continued=[lookup.continued(keys[i]) for i in asked],
            )
            recorders = [traced.recorder(key=keys[i]) if store is not None else None for i in asked]
            run_many(
                events if asked else iter(()),
                questions,
                err,
                recorders,
                quiet=quiet,
                json_out=json_out,
                raw=raw,
                cite=cite,
                asked=asked,
                reused=reused,
            )
        else:
            named = found_sources(paths, sources) if run is None else None
            key = lookup.key(questions[0], named.sources) if named is not None else None
            reused_one = lookup.reused(key, named.sources) if named is not None else None
            if named is not None and reused_one is not None:
                for note in named.notes:
                    traced.warn(note)
                if svg is not None:
                    traced.warn(f"{svg} is not saved: nothing was read, so there is no live view to draw (--fresh reads again).")
                show_reused(reused_one, err, quiet=quiet, json_out=json_out, raw=raw, cite=cite)
                return
            recorder = traced.recorder(run, key) if store is not None else None
            steps = run["steps"] if run else ()
            one = ask_events(
                questions[0],
                paths,
                **setup_.args(),
                sources=sources,
                done_steps=steps,
                found=named,
                continued=lookup.continued(key),
            )
            _show_one(one, err, recorder, out, served=setup_.engine.served)
    except MemagentError as exc:
        if recorder is not None:
            recorder.stopped("failed", str(exc))
        fail(err, exc, resume_hint(recorder))
    except KeyboardInterrupt:
        if recorder is not None:
            recorder.stopped("interrupted")
        err.print(Text.assemble(("interrupted", "yellow"), resume_hint(recorder) or ""), soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    except Exception as exc:  # a bug: the run is kept as failed (resumable), main() reports it
        if recorder is not None:
            recorder.stopped("failed", f"internal error: {type(exc).__name__}: {exc}")
        raise


@dataclass(frozen=True)
class _Output:
    """How one run's result is shown: the live view or progress, and what stdout gets."""

    quiet: bool
    json_out: bool
    raw: bool
    cite: bool
    svg: Path | None


class _Traced:
    """Standard input (fingerprinted when runs are traced) and a recorder for each run."""

    def __init__(self, err: Console, store: TraceStore | None):
        from ..traces.recorder import HashingReader

        self.err, self.store = err, store
        self.setup: RunSetup | None = None
        raw: BinaryIO | None = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
        self.hashing = HashingReader(raw) if store is not None and raw is not None else None
        self.stdin: HashingReader | BinaryIO | None = self.hashing or raw

    def warn(self, message: str) -> None:
        self.err.print(f"warning: {message}", style="yellow", markup=False, soft_wrap=True)

    def recorder(self, resume: dict[str, Any] | None = None, key: AnswerKey | None = None) -> Recorder:
        from ..traces.recorder import Recorder

        assert self.store is not None and self.setup is not None
        s = self.setup
        return Recorder(
            self.store,
            warn=self.warn,
            resume=resume,
            stdin=self.hashing,
            engine=s.engine_record,
            chat_template=s.template_record,
            key=key,
        )


def _check_together(*, each: bool, resume: str | None, svg: Path | None, each_files: tuple[Path | None, ...]) -> None:
    if not each and any(each_files):
        raise MemagentError("--jsonl, --csv and --html go with --each.", "Add --each, or use --json.", exit_code=EXIT_USAGE)
    if each and (resume or svg):
        raise MemagentError(
            f"--each does not take {'--resume' if resume else '--svg'}.",
            "Resume one of its runs with memagent ask --resume ID; a picture is of one run.",
            exit_code=EXIT_USAGE,
        )


def _questions(
    args: list[str] | None,
    question: list[str] | None,
    questions_file: Path | None,
    each: bool,
    warn: Callable[[str], None],
    schema: bool = False,
) -> tuple[list[str], list[str]]:
    """(sources, questions): the questions of -q and --questions, every argument a source; else the
    last argument is the question. With --schema the question may be left out (an empty one: the
    run makes it of the schema's fields): the last argument is then a question only when it names
    no file."""
    questions = list(question or []) + (read_questions(questions_file, warn) if questions_file else [])
    if questions:
        paths = list(args or [])
        if each and not paths:
            raise MemagentError(
                "--each needs the sources to ask.", "e.g. memagent ask docs/ --each -q QUESTION", exit_code=EXIT_USAGE
            )
        return paths, questions
    if schema and (not args or args[-1] == "-" or os.path.lexists(args[-1])):
        return list(args or []), [""]
    if not args:
        raise MemagentError("No question given.", 'Usage: memagent ask [SOURCE ...] "QUESTION"', exit_code=EXIT_USAGE)
    last = args[-1]
    if last == "-" or os.path.lexists(last):  # a source where the question goes: it was left out
        raise MemagentError(
            f"No question given: the last argument, {last}, names a source.",
            f'Put the question last: memagent ask {shlex.join(args)} "QUESTION" (or give it with -q).',
            exit_code=EXIT_USAGE,
        )
    if not last.strip():
        from ..core.agent import empty_question

        raise empty_question()
    return args[:-1], [last]


def _show_one(events: Iterable[Event], err: Console, recorder: Recorder | None, out: _Output, *, served: bool) -> None:
    """One run through the views to its answer on stdout (or its JSON record)."""

    gpu_hint = None
    if not served and not out.quiet:
        from ..install.doctor import gpu_hint_due, remember_gpu_hint

        gpu_hint = gpu_hint_due()
    result = _consume(events, err, recorder, quiet=out.quiet, svg=out.svg, gpu_hint=None if out.json_out else gpu_hint)
    if gpu_hint:
        remember_gpu_hint(gpu_hint)
    record = result.to_dict()
    if out.json_out:
        if gpu_hint:
            record["gpu"]["hint"] = gpu_hint
        if recorder is not None and recorder.failed_write is None:
            record["trace"] = recorder.run_id
        print_json(record)
    else:
        # On a terminal, what the model wrote is displayed, not obeyed; piped, it is data.
        print(record_text(record, raw=out.raw, cite=out.cite, tty=sys.stdout.isatty()))


def _refuse_changed_options(ctx: typer.Context, run: dict[str, Any], flags: RunFlags) -> None:
    """A resumed run keeps what decides its result: a protocol option given beside --resume must
    equal the run's (threads, GPU layers, the view and the like may differ)."""

    def given_here(name: str) -> bool:
        source = ctx.get_parameter_source(name)  # by name: typer may bring its own copy of click's enum
        return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")

    def refuse(option: str, value: object, stored: object) -> NoReturn:
        raise MemagentError(
            f"--resume keeps the run's settings: {option} {value} differs from its {stored}.",
            f"Drop {option} to resume run {run['id'][:8]}, or start a new run with it.",
            exit_code=EXIT_USAGE,
        )

    for name in ("args", "question", "questions_file", "include", "exclude"):
        if given_here(name):
            raise MemagentError(
                "--resume takes no sources or questions: they come from the trace.",
                "Drop them, or start a new run.",
                exit_code=EXIT_USAGE,
            )
    from ..core.reuse import differences

    settings = run["settings"]
    given = {**flags.budgets(), "protocol": flags.protocol.value if flags.protocol else None, "instructions": flags.instructions}
    flag_of = {"answer_schema": "schema", "answer_schema_multi": "schema_multi"}
    wanted = {**settings, **{name: value for name, value in given.items() if given_here(flag_of.get(name, name))}}
    for differs in differences(settings, wanted):
        refuse(differs.option, differs.wanted, differs.stored)
    if given_here("model") and flags.model is not None:
        from ..install.registry import resolve_model

        stored_path = run["model"].get("path") or ""
        if os.path.realpath(resolve_model(flags.model)) != os.path.realpath(stored_path):
            refuse("--model", flags.model, stored_path or "the served model")
    stored_template = (settings.get("chat_template") or {}).get("path")
    if given_here("template_file") and flags.template_file is not None:
        if stored_template is None or os.path.realpath(flags.template_file) != os.path.realpath(stored_template):
            refuse("--chat-template", flags.template_file, stored_template or "the model's own template")
    served = settings.get("engine") or {}
    if given_here("engine") and flags.engine != served.get("kind", "llama"):
        refuse("--engine", flags.engine, served.get("kind", "llama"))
    for name, value in (("served_model", flags.served_model), ("tokenizer", flags.tokenizer)):
        if given_here(name) and value != served.get(name):
            refuse("--" + name.replace("_", "-"), value, served.get(name))


def _enter(directory: str | None) -> None:
    # Relative source paths, and the titles the model saw for them, are as of the run's start.
    if directory and os.path.isdir(directory):
        os.chdir(directory)


class _Consumer(Protocol):
    """What a run's events are fed to: the recorder and the views."""

    def handle(self, event: Event) -> None: ...


def _consume(
    events: Iterable[Event], err: Console, recorder: Recorder | None, *, quiet: bool, svg: Path | None, gpu_hint: str | None
) -> RunResult:
    """Feeds the run's events to the recorder (first, so a step is saved before it is drawn)
    and the views; returns the result."""
    from ..core.events import RunFinished
    from .views.live import LiveView, PlainProgress

    live = not quiet and err.is_terminal
    views: list[LiveView | PlainProgress] = (
        [LiveView(err, gpu_hint=gpu_hint)] if live else ([] if quiet else [PlainProgress(err)])
    )
    if gpu_hint and not live and not quiet:
        err.print(f"note: {gpu_hint}", style="yellow", markup=False, soft_wrap=True)
    if svg is not None and not live:  # draw off screen, for the picture alone
        views.append(LiveView(SafeConsole(file=io.StringIO(), width=110, force_terminal=True), fps=1))
    consumers: list[_Consumer] = [*([recorder] if recorder is not None else []), *views]
    result = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(sigterm_as_interrupt())
        for view in views:
            if isinstance(view, LiveView):
                stack.enter_context(view)
        for event in events:
            for consumer in consumers:
                consumer.handle(event)
            if isinstance(event, RunFinished):
                result = event.result
    if svg is not None:
        _save_svg(next(v for v in views if isinstance(v, LiveView)), svg, err)
    assert result is not None
    return result


def _save_svg(view: LiveView, path: Path, err: Console) -> None:
    recorder = SafeConsole(record=True, file=io.StringIO(), width=110, force_terminal=True, color_system="truecolor")
    recorder.print(view.snapshot())
    try:
        recorder.save_svg(str(path), title="memagent ask")
    except OSError as exc:  # the answer is worth more than the picture: warn, go on
        err.print(f"warning: could not save {path}: {exc.strerror}", style="yellow", markup=False, soft_wrap=True)
