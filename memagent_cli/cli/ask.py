"""`memagent ask`: one question, or several over the same reading, with the live view, traces,
resume and the JSON record; what it prints and how its errors map to exit codes."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Callable, Iterable, NoReturn, Optional, Protocol

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from ..model.runtime import MAX_SEQUENCES
from .common import fail, open_store, sigterm_as_interrupt, stderr_console
from .many import resume_hint, run_many
from .models import model_for_run
from .options import (
    DEFAULTS,
    AnswerOpt,
    ApiKeyOpt,
    BaseUrlOpt,
    BatchOpt,
    ChatTemplateOpt,
    ChunkOpt,
    EngineOpt,
    ExcludeOpt,
    FinalOpt,
    FlashAttnOpt,
    GpuLayersOpt,
    IncludeOpt,
    InstructionsOpt,
    JsonOpt,
    MemoryOpt,
    ModelOpt,
    OcrChoice,
    OcrOpt,
    PasswordOpt,
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
    read_questions,
    served_options,
    source_settings,
)
from .textout import SafeConsole, print_json

if TYPE_CHECKING:
    from ..core.events import Event, RunResult
    from ..traces.recorder import HashingReader, Recorder
    from .views.live import LiveView, PlainProgress


def _split_question(args: list[str]) -> tuple[list[str], str]:
    if not args:
        raise MemagentError("No question given.", 'Usage: memagent ask [SOURCE ...] "QUESTION"', exit_code=EXIT_USAGE)
    return args[:-1], args[-1]


def ask(
    ctx: typer.Context,
    args: Annotated[
        Optional[list[str]],
        typer.Argument(
            metavar="[SOURCE]... QUESTION",
            show_default=False,
            help="PDFs, text files, folders or - for stdin, then the question. With no source, piped stdin is read.",
        ),
    ] = None,
    model: ModelOpt = None,
    protocol: ProtocolOpt = None,
    instructions: InstructionsOpt = None,
    chunk_tokens: ChunkOpt = None,
    memory_tokens: MemoryOpt = None,
    answer_tokens: AnswerOpt = None,
    temperature: TemperatureOpt = DEFAULTS.temperature,
    top_p: TopPOpt = DEFAULTS.top_p,
    seed: SeedOpt = DEFAULTS.seed,
    final: FinalOpt = DEFAULTS.final,
    gpu_layers: GpuLayersOpt = None,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            rich_help_panel="Model",
            help="Never touch the network: a model not installed is an error (also HF_HUB_OFFLINE=1).",
        ),
    ] = False,
    threads: ThreadsOpt = None,
    flash_attn: FlashAttnOpt = None,
    speculate: SpeculateOpt = None,
    batch: BatchOpt = None,
    n_ctx: Annotated[
        Optional[int],
        typer.Option(
            "--ctx",
            help="Context size. Default: just enough for the budgets.",
            min=64,
            rich_help_panel="Model",
            show_default=False,
        ),
    ] = None,
    template_file: ChatTemplateOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    password: PasswordOpt = None,
    ocr: OcrOpt = OcrChoice.auto,
    resume: Annotated[
        Optional[str],
        typer.Option(
            metavar="ID|last",
            show_default=False,
            rich_help_panel="Traces",
            help="Continue an interrupted run from its last completed step, with its sources, question and settings.",
        ),
    ] = None,
    no_trace: Annotated[
        bool, typer.Option("--no-trace", rich_help_panel="Traces", help="Do not record this run in the trace store.")
    ] = False,
    question: Annotated[
        Optional[list[str]],
        typer.Option(
            "--question",
            "-q",
            show_default=False,
            rich_help_panel="Questions",
            help="A question (repeatable): each gets its own memory and trace; every argument is then a source.",
        ),
    ] = None,
    questions_file: Annotated[
        Optional[Path],
        typer.Option(
            "--questions",
            metavar="FILE",
            show_default=False,
            rich_help_panel="Questions",
            help='Questions from a file: one per line, or JSONL with a "question" (or "input") field.',
        ),
    ] = None,
    each: Annotated[
        bool,
        typer.Option(
            "--each",
            rich_help_panel="Questions",
            help="Ask every document on its own: each file (in folders and archives too) x each question is its "
            "own run, with its own memory and trace, on one loaded model.",
        ),
    ] = False,
    jsonl: Annotated[
        Optional[Path],
        typer.Option(
            metavar="FILE",
            show_default=False,
            rich_help_panel="Questions",
            help="With --each: append each run's JSON record to FILE as it finishes.",
        ),
    ] = None,
    csv_file: Annotated[
        Optional[Path],
        typer.Option(
            "--csv",
            metavar="FILE",
            show_default=False,
            rich_help_panel="Questions",
            help="With --each: a spreadsheet of the runs (document, question, answer, evidence, trace, error).",
        ),
    ] = None,
    html: Annotated[
        Optional[Path],
        typer.Option(
            metavar="FILE",
            show_default=False,
            rich_help_panel="Questions",
            help="With --each: one self-contained page to share: the table, the evidence, each run's memory timeline.",
        ),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option(
            min=1,
            rich_help_panel="Questions",
            help="Model calls in flight at once: on a served engine, or batched in one context on the embedded "
            f"engine (at most {MAX_SEQUENCES}; see --batch).",
        ),
    ] = 4,
    engine: EngineOpt = "llama",
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    served_model: ServedModelOpt = None,
    tokenizer: TokenizerOpt = None,
    timeout: TimeoutOpt = None,
    json_out: JsonOpt = False,
    raw: Annotated[bool, typer.Option("--raw", help="Print the whole final reply, not just the extracted answer.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print only the answer: no live view, no progress.")] = False,
    verbose: VerboseOpt = False,
    svg: Annotated[
        Optional[Path], typer.Option(help="Save a picture of the live view (SVG) when the run ends.", show_default=False)
    ] = None,
) -> None:
    """Answer a question about documents.

    Every run is recorded (see [b]memagent traces[/]); Ctrl-C stops it and prints how to resume.

    [dim]Examples:[/]
      memagent ask report.pdf "Who signed the 2019 amendment?"
      memagent ask notes/ --include "*.md" "What did we decide about pricing?"
      cat build.log | memagent ask "Why did the build fail?"
      memagent ask contract.pdf -q "Who signed it?" -q "When does it end?"
      memagent ask contracts/ --each -q "Who signed it?" --csv signed.csv
      memagent ask --engine openai --base-url http://gpu-box:8000/v1 report.pdf "Who signed it?"
      memagent ask --resume last
    """
    from ..core.pipeline import ask_events, ask_many_events
    from ..traces.recorder import HashingReader, Recorder, resume_plan, resumed_config, resumed_paths

    err = stderr_console()
    quiet_library_logs(verbose)
    svg = svg.resolve() if svg else None  # a resumed run works from its own directory
    recorder: Recorder | None = None

    def warn(message: str) -> None:
        err.print(f"warning: {message}", style="yellow", markup=False, soft_wrap=True)

    try:
        # A resumed run's engine comes from its trace (checked below); a new run's from the options.
        served = None if resume else served_options(engine, base_url, api_key, served_model, tokenizer, verbose, err, timeout)
        store = None if no_trace else open_store(err, required=bool(resume))
        raw_stdin: BinaryIO | None = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
        stdin: HashingReader | BinaryIO | None = raw_stdin
        hashing: HashingReader | None = None  # what a trace fingerprints stdin with
        if store is not None and raw_stdin is not None:
            stdin = hashing = HashingReader(raw_stdin)
        run = None
        if not each and (jsonl or csv_file or html):
            raise MemagentError("--jsonl, --csv and --html go with --each.", "Add --each, or use --json.", exit_code=EXIT_USAGE)
        if each and (resume or svg):
            raise MemagentError(
                f"--each does not take {'--resume' if resume else '--svg'}.",
                "Resume one of its runs with memagent ask --resume ID; a picture is of one run.",
                exit_code=EXIT_USAGE,
            )
        if resume:
            if store is None:
                raise MemagentError("--resume needs the trace store.", "Drop --no-trace.", exit_code=EXIT_USAGE)
            run = resume_plan(store, resume)
            given = {
                "chunk_tokens": chunk_tokens,
                "memory_tokens": memory_tokens,
                "answer_tokens": answer_tokens,
                "temperature": temperature,
                "top_p": top_p,
                "seed": seed,
                "final": final,
                "protocol": protocol.value if protocol else None,
                "instructions": instructions,
            }
            _refuse_changed_options(ctx, run, given, model, template_file, engine, served_model, tokenizer)
            _enter(run["settings"].get("cwd"))
            ocr = OcrChoice(run["settings"].get("ocr", "auto"))
            paths, questions, config = resumed_paths(run), [run["question"]], resumed_config(run["settings"])
            model = run["model"]["path"]
            stored_template = run["settings"].get("chat_template")
            template = (
                chat_template(Path(stored_template["path"]), "llama", expect_sha256=stored_template["sha256"])
                if stored_template
                else None
            )
            if run["settings"].get("engine"):
                stored = run["settings"]["engine"]
                served = served_options(
                    "openai",
                    # the servers may have moved; the model they serve may not
                    base_url or stored.get("base_urls") or stored["base_url"],
                    api_key,
                    stored.get("served_model"),
                    stored.get("tokenizer"),
                    verbose,
                    err,
                    timeout,
                )
            else:  # the embedded engine: the served options, given, are refused as for a new run
                served_options("llama", base_url, api_key, None, None, verbose, err, timeout)
        else:
            questions = list(question or []) + (read_questions(questions_file, warn) if questions_file else [])
            if questions:
                paths = list(args or [])
                if each and not paths:
                    raise MemagentError(
                        "--each needs the sources to ask.", "e.g. memagent ask docs/ --each -q QUESTION", exit_code=EXIT_USAGE
                    )
            else:
                paths, one = _split_question(args or [])
                questions = [one]
            template = chat_template(template_file, engine)
        if served is not None:
            model = served.tokenizer and model_for_run(served.tokenizer, err, offline)
        else:
            model = model_for_run(model, err, offline)
        if not resume:
            config = agent_config(
                protocol,
                model,
                served.engine.served_model if served is not None else None,
                chunk_tokens=chunk_tokens,
                memory_tokens=memory_tokens,
                answer_tokens=answer_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                final=final,
                instructions=instructions or "",
            )
        engine_options = (
            served.engine
            if served is not None
            else embedded_engine(
                gpu_layers=gpu_layers,
                threads=threads,
                flash_attn=flash_attn,
                speculate=speculate,
                batch=batch,
                verbose=verbose,
                template=template,
                n_ctx=n_ctx,
            )
        )
        source_options = source_settings(include, exclude, password, ocr, stdin)
        engine_record = served.record if served is not None else None
        template_record = template.record if template is not None else None
        if each:
            from .each import EachOutput, run_each

            new_recorder: Callable[[], Recorder] | None = None
            if store is not None:
                traced = store

                def new_recorder() -> Recorder:
                    return Recorder(traced, warn=warn, stdin=hashing, engine=engine_record, chat_template=template_record)

            run_each(
                paths,
                questions,
                model=model,
                config=config,
                engine=engine_options,
                sources=source_options,
                parallel=parallel,
                store=store,
                recorder=new_recorder,
                err=err,
                output=EachOutput(quiet=quiet, json_out=json_out, raw=raw, jsonl=jsonl, csv=csv_file, html=html),
            )
            return
        if len(questions) > 1:
            recorders = [
                Recorder(store, warn=warn, stdin=hashing, engine=engine_record, chat_template=template_record)
                if store is not None
                else None
                for _ in questions
            ]
            run_many(
                ask_many_events(
                    questions, paths, model=model, config=config, engine=engine_options, sources=source_options, parallel=parallel
                ),
                questions,
                err,
                recorders,
                quiet=quiet,
                json_out=json_out,
                raw=raw,
            )
            return
        recorder = (
            Recorder(store, warn=warn, resume=run, stdin=hashing, engine=engine_record, chat_template=template_record)
            if store is not None
            else None
        )
        events = ask_events(
            questions[0],
            paths,
            model=model,
            config=config,
            engine=engine_options,
            sources=source_options,
            done_steps=run["steps"] if run else (),
        )
        gpu_hint = None
        if served is None and not quiet:
            from ..install.doctor import take_gpu_hint

            gpu_hint = take_gpu_hint()
        result = _consume(events, err, recorder, quiet=quiet, svg=svg, gpu_hint=None if json_out else gpu_hint)
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
    if json_out:
        out = result.to_dict()
        if gpu_hint:
            out["gpu"]["hint"] = gpu_hint
        if recorder is not None and recorder.failed_write is None:
            out["trace"] = recorder.run_id
        print_json(out)
    else:
        from .textout import visible

        answer = result.raw_answer if raw else result.answer
        # On a terminal, what the model wrote is displayed, not obeyed; piped, it is data.
        print(visible(answer) if sys.stdout.isatty() else answer)


def _refuse_changed_options(
    ctx: typer.Context,
    run: dict[str, Any],
    given: dict[str, Any],
    model: str | None,
    template_file: Path | None,
    engine: str,
    served_model: str | None,
    tokenizer: str | None,
) -> None:
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
    settings = run["settings"]
    for name, value in given.items():
        stored = settings.get(name, getattr(DEFAULTS, name, None))  # a trace older than the setting has its default
        if given_here(name) and value != stored:
            refuse("--" + name.replace("_", "-"), value, stored)
    if given_here("model") and model is not None:
        from ..install.registry import resolve_model

        stored_path = run["model"]["path"]
        if os.path.realpath(resolve_model(model)) != os.path.realpath(stored_path):
            refuse("--model", model, stored_path)
    stored_template = (settings.get("chat_template") or {}).get("path")
    if given_here("template_file") and template_file is not None:
        if stored_template is None or os.path.realpath(template_file) != os.path.realpath(stored_template):
            refuse("--chat-template", template_file, stored_template or "the model's own template")
    served = settings.get("engine") or {}
    if given_here("engine") and engine != served.get("kind", "llama"):
        refuse("--engine", engine, served.get("kind", "llama"))
    for name, value in (("served_model", served_model), ("tokenizer", tokenizer)):
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
