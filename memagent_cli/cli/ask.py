"""`memagent ask`: one question, or several over the same reading, with the live view, traces,
resume and the JSON record; what it prints and how its errors map to exit codes."""

from __future__ import annotations

import os
import shlex
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from ..runs.follow_ups import Conversation, changed_since, find_conversation
from ..runs.setup import RunSetup
from .answers import show_reused
from .ask_flags import AskFlags, QuestionArgs
from .common import check_outputs, check_paths, fail, noter, open_store, stderr_console
from .follow import turn_setup
from .many import resume_hint, run_many
from .options import OcrChoice, QuestionFlags, flag_groups
from .run_flags import RunFlags, setup
from .single import Output, TracedStdin, given_flags, show_one

if TYPE_CHECKING:
    from ..core.pipeline import SourceOptions
    from ..runs.planning import Runs
    from ..traces.recorder import Recorder
    from ..traces.store import TraceStore


@flag_groups
def ask(
    ctx: typer.Context,
    args: QuestionArgs = None,
    given: AskFlags = AskFlags(),
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
      memagent ask -c "And when does it end?"
      memagent ask contracts/ --each -q "Who signed it?" --csv signed.csv
      memagent ask --engine openai --base-url http://gpu-box:8000/v1 report.pdf "Who signed it?"
      memagent ask --resume last
    """
    err = stderr_console()
    source_flags = given.source_flags  # a follow-up or a resumed run reads scans as its first run did
    out = Output(**asdict(given.shown), svg=given.svg.resolve() if given.svg else None)  # resumed runs move
    recording = _Recording()
    try:
        _check_together(given)
        _check_follow(given)
        store = None if given.no_trace else open_store(err, required=bool(given.resume) or given.follow.following)
        traced = TracedStdin(err, store)
        request = _Request(store, traced)
        if given.follow.following:
            request.follow(
                find_conversation(request.given_store(), given.follow.ref), _follow_question(args), given.follow.standalone
            )
            source_flags = replace(given.source_flags, ocr=OcrChoice(request.ocr))
        elif given.resume:
            request.resume(given.resume)
            _refuse_changed_options(ctx, request.stored, flags)
            source_flags = replace(given.source_flags, ocr=OcrChoice(request.ocr))
        else:
            request.paths, request.questions = _questions(
                args, given.asked, given.each, traced.warn, schema=flags.schema is not None
            )
            check_paths(request.paths)  # a missing file is said before a missing model: nothing is fetched for it
        written = {**given.outputs.written(), "--svg": given.svg}
        check_outputs(written, inputs=[*request.paths, *given.asked.files()])
        request.prepare(ctx, flags, err, source_flags.settings(traced.stdin, written=written.values()), given.fresh)
        if given.each:
            from .each import EachOutput, run_each

            output = EachOutput(**asdict(given.shown), files=given.outputs)
            run_each(
                request.paths,
                request.questions,
                request.run,
                request.sources,
                given.parallel,
                request.runs,
                err,
                output,
            )
        elif len(request.questions) > 1:
            _ask_several(request, err, given.parallel, out)
        else:
            _ask_one(request, err, out, recording)
    except MemagentError as exc:
        if recording.recorder is not None:
            recording.recorder.stopped("failed", str(exc))
        fail(err, exc, resume_hint(recording.recorder))
    except KeyboardInterrupt:
        if recording.recorder is not None:
            recording.recorder.stopped("interrupted")
        err.print(Text.assemble(("interrupted", "yellow"), resume_hint(recording.recorder) or ""), soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    except Exception as exc:  # a bug: the run is kept as failed (resumable), main() reports it
        if recording.recorder is not None:
            recording.recorder.stopped("failed", f"internal error: {type(exc).__name__}: {exc}")
        raise


@dataclass
class _Recording:
    """The recorder of a single run, for ask's handlers: a run stopped is kept as such."""

    recorder: Recorder | None = None


@dataclass
class _Request:
    """What ask runs: the sources and questions (named; a stored run's, to resume; a conversation's,
    to follow up), then the run setup, how the sources are read, and the run layer that plans each run."""

    store: TraceStore | None
    traced: TracedStdin
    paths: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    stored: dict[str, Any] = field(default_factory=dict)  # a run to resume
    conversation: Conversation | None = None  # a conversation to follow up in
    standalone: bool = False
    changed: dict[str, Any] = field(default_factory=dict)  # what a follow-up gives over the conversation's settings
    run: RunSetup = field(init=False)
    sources: SourceOptions = field(init=False)
    runs: Runs = field(init=False)

    def given_store(self) -> TraceStore:
        assert self.store is not None  # required where this is called
        return self.store

    @property
    def ocr(self) -> str:
        settings = (self.conversation.first if self.conversation is not None else self.stored).get("settings") or {}
        return str(settings.get("ocr", "auto"))

    def follow(self, conversation: Conversation, question: str, standalone: bool) -> None:
        self.conversation, self.standalone = conversation, standalone
        self.paths, self.questions = conversation.paths, [question]
        _enter(conversation.cwd)

    def resume(self, ref: str) -> None:
        from ..traces.recorder import resume_plan, resumed_paths

        if self.store is None:
            raise MemagentError("--resume needs the trace store.", "Drop --no-trace.", exit_code=EXIT_USAGE)
        self.stored = resume_plan(self.store, ref)
        _enter(self.stored["settings"].get("cwd"))
        self.paths, self.questions = list(resumed_paths(self.stored)), [self.stored["question"]]

    def prepare(self, ctx: typer.Context, flags: RunFlags, err: Console, sources: SourceOptions, fresh: bool) -> None:
        """The run setup (a conversation's first run's, a stored run's, or the flags'), and the rest."""
        from ..traces.recorder import resumed_found

        if self.conversation is not None:
            self.run, self.changed = turn_setup(flags, given_flags(ctx), err, self.conversation.first)
        else:
            self.run = setup(flags, err, stored=self.stored or None)
        if self.stored:  # a file the run found in a folder is skipped again if it cannot be read
            sources = replace(sources, found=resumed_found(self.stored))
        self.sources = sources
        self.runs = self.traced.runs(self.run, sources, fresh)


def _ask_several(request: _Request, err: Console, parallel: int, out: Output) -> None:
    """Several questions over one reading; each looked up in the store on its own."""
    from ..core.pipeline import ask_many_events, found_sources

    questions = request.questions
    found = found_sources(request.paths, request.sources)
    plans = [request.runs.plan(q, found.sources) for q in questions]
    reused = {i: p.reused for i, p in enumerate(plans) if p.reused is not None}
    asked = [i for i in range(len(questions)) if i not in reused]
    if not asked:
        for note in found.notes:
            request.traced.warn(note)
    events = ask_many_events(
        [questions[i] for i in asked],
        request.paths,
        **request.run.args(),
        sources=request.sources,
        parallel=parallel,
        found=found,
        continued=[plans[i].continued() for i in asked],
    )
    recorders = [plans[i].recorder(turn=True) for i in asked]
    run_many(
        events if asked else iter(()),
        questions,
        err,
        recorders,
        quiet=out.quiet,
        json_out=out.json_out,
        raw=out.raw,
        cite=out.cite,
        asked=asked,
        reused=reused,
    )


def _ask_one(request: _Request, err: Console, out: Output, recording: _Recording) -> None:
    """One question: its answer from the store, or a reading (a resumed run's goes on from its steps)."""
    from ..core.pipeline import ask_events, found_sources

    question, conversation, traced = request.questions[0], request.conversation, request.traced
    named = found_sources(request.paths, request.sources) if not request.stored else None
    history = conversation.history if conversation is not None and not request.standalone else []
    if conversation is not None and named is not None:
        changed_since(conversation.first, list(named.sources), traced.warn)
    # a resumed run goes on from its own steps: no answer is looked up, nor an earlier run
    planned = request.runs.plan(question, named.sources, history=history) if named is not None else None
    reused = planned.reused if planned is not None else None
    following = conversation.id if conversation is not None else None
    if named is not None and reused is not None:
        for note in named.notes:
            traced.warn(note)
        if out.svg is not None:
            traced.warn(f"{out.svg} is not saved: nothing was read, so there is no live view to draw (--fresh reads again).")
        request.runs.turn_of_reused(reused, following, question, request.changed)
        show_reused(reused, err, quiet=out.quiet, json_out=out.json_out, raw=out.raw, cite=out.cite)
        return
    record = planned.recorder if planned is not None else request.runs.recorder
    recording.recorder = record(
        resume=request.stored or None, turn=True, conversation=following, asked=question, changed=request.changed
    )
    if conversation is not None and not out.quiet:
        noter(err)(conversation.next_turn())
    events = ask_events(
        question,
        request.paths,
        **request.run.args(),
        sources=request.sources,
        done_steps=request.stored["steps"] if request.stored else (),
        found=named,
        continued=planned.continued() if planned is not None else None,
        history=history,
    )
    show_one(events, err, recording.recorder, out, served=request.run.engine.served)


def _check_follow(given: AskFlags) -> None:
    """-c and --cid go alone: a follow-up is one question in a conversation kept in the trace store."""
    given.follow.check()
    if not given.follow.following:
        return
    for flagged, flag in (
        (given.each, "--each"),
        (given.resume, "--resume"),
        (given.no_trace, "--no-trace"),
        (given.asked.given, "-q or --questions"),
    ):
        if flagged:
            raise MemagentError(
                f"-c and --cid do not take {flag}.",
                'A follow-up is one question in a conversation the trace store keeps: memagent ask -c "QUESTION"',
                exit_code=EXIT_USAGE,
            )


def _follow_question(args: list[str] | None) -> str:
    """The question of a follow-up: its only argument (a conversation is about its sources)."""
    if not args:
        raise MemagentError("No question given.", 'Usage: memagent ask -c "QUESTION"', exit_code=EXIT_USAGE)
    if len(args) > 1:
        raise MemagentError(
            "A follow-up takes no sources: the conversation reads its own.",
            f'Give the question alone (memagent ask -c "QUESTION"), or ask anew: memagent ask {shlex.join(args)}',
            exit_code=EXIT_USAGE,
        )
    if not args[0].strip():
        from ..core.agent import empty_question

        raise empty_question()
    return args[0]


def _check_together(given: AskFlags) -> None:
    if not given.each and any(given.outputs.written().values()):
        raise MemagentError("--jsonl, --csv and --html go with --each.", "Add --each, or use --json.", exit_code=EXIT_USAGE)
    if given.each and (given.resume or given.svg):
        raise MemagentError(
            f"--each does not take {'--resume' if given.resume else '--svg'}.",
            "Resume one of its runs with memagent ask --resume ID; a picture is of one run.",
            exit_code=EXIT_USAGE,
        )


def _questions(
    args: list[str] | None,
    asked: QuestionFlags,
    each: bool,
    warn: Callable[[str], None],
    schema: bool = False,
) -> tuple[list[str], list[str]]:
    """(sources, questions): the questions of -q and --questions, every argument a source; else the
    last argument is the question. With --schema the question may be left out (an empty one: the
    run makes it of the schema's fields): the last argument is then a question only when it names
    no file."""
    questions = asked.gathered(warn)
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


def _refuse_changed_options(ctx: typer.Context, run: dict[str, Any], flags: RunFlags) -> None:
    """A resumed run keeps what decides its result: a protocol option given beside --resume must
    equal the run's (threads, GPU layers, the view and the like may differ)."""
    given = given_flags(ctx)

    def refuse(option: str, value: object, stored: object) -> NoReturn:
        raise MemagentError(
            f"--resume keeps the run's settings: {option} {value} differs from its {stored}.",
            f"Drop {option} to resume run {run['id'][:8]}, or start a new run with it.",
            exit_code=EXIT_USAGE,
        )

    if given & {"args", "question", "questions_file", "include", "exclude"}:
        raise MemagentError(
            "--resume takes no sources or questions: they come from the trace.",
            "Drop them, or start a new run.",
            exit_code=EXIT_USAGE,
        )
    from ..core.keys import differences

    settings = run["settings"]
    wanted = {**settings, **flags.given_settings(given)}
    for differs in differences(settings, wanted):
        refuse(differs.option, differs.wanted, differs.stored)
    if "model" in given and flags.model is not None:
        from ..install.registry import resolve_model

        stored_path = run["model"].get("path") or ""
        if os.path.realpath(resolve_model(flags.model)) != os.path.realpath(stored_path):
            refuse("--model", flags.model, stored_path or "the served model")
    stored_template = (settings.get("chat_template") or {}).get("path")
    if "template_file" in given and flags.template_file is not None:
        if stored_template is None or os.path.realpath(flags.template_file) != os.path.realpath(stored_template):
            refuse("--chat-template", flags.template_file, stored_template or "the model's own template")
    served = settings.get("engine") or {}
    if "engine" in given and flags.engine != served.get("kind", "llama"):
        refuse("--engine", flags.engine, served.get("kind", "llama"))
    for name, value in (("served_model", flags.served_model), ("tokenizer", flags.tokenizer)):
        if name in given and value != served.get(name):
            refuse("--" + name.replace("_", "-"), value, served.get(name))


def _enter(directory: str | None) -> None:
    # Relative source paths, and the titles the model saw for them, are as of the run's start.
    if directory and os.path.isdir(directory):
        os.chdir(directory)
