"""`memagent eval DATA` and `memagent eval make-niah`: measure a model on a data set.

`eval DATA` is the group's default command, so `memagent eval items.jsonl` runs it while
`memagent eval make-niah ...` reaches the generator.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from ..runs.setup import RunSetup
from .common import check_outputs, command_group, fail, open_store, stderr_console, warner
from .options import RESULTS_HELP, JsonOpt, ParallelOpt, flag_groups
from .run_flags import RunFlags, check_same_setup, setup
from .textout import SafeConsole

if TYPE_CHECKING:
    from rich.progress import TaskID

    from ..core.events import Event
    from ..core.jobs import Job
    from ..traces.recorder import Recorder
    from ..traces.store import TraceStore


class MetricChoice(str, enum.Enum):
    """--metric: the choices of evals.scoring.METRICS (a test keeps the two alike)."""

    auto = "auto"
    sub_em = "sub_em"
    mrcr = "mrcr"


class _DefaultRun(TyperGroup):
    """Treats an argument that names no subcommand as the DATA of `run`."""

    # ctx: click's Context, which recent typer versions vendor privately (typer._click); Any keeps
    # the override valid whichever click a typer brings.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = command_group(
    cls=_DefaultRun,
    help="Measure a model: run a data set of questions and score the answers as the paper does.\n\n"
    "  memagent eval items.jsonl --out results.jsonl\n"
    "  memagent eval make-niah --tokens 32000 --needles 4 --n 20 -o niah.jsonl\n\n"
    "The options of a run (model, engine, budgets, sampling, --out, --limit, --metric): memagent eval run --help",
)


DataArg = Annotated[
    Path,
    typer.Argument(
        help="JSONL (or a JSON array) of items with context, input (the question), "
        "answers and optionally id: the authors' RULER-HotpotQA format. Also read: question for input, "
        "answer (a text) for answers, instructions (added to the final prompt only) and MRCR's "
        "random_string_to_prepend.",
        show_default=False,
    ),
]
OutOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--out",
        "-o",
        metavar="FILE.jsonl",
        show_default=False,
        help=RESULTS_HELP,
    ),
]
LimitOpt = Annotated[Optional[int], typer.Option(min=1, show_default=False, help="Run at most this many items.")]
ReuseOpt = Annotated[
    bool,
    typer.Option(
        "--reuse",
        help="Score an item from the answer the trace store has for it (the same question, context, model and"
        " settings) instead of reading it again, and record the runs it makes so that the next --reuse finds"
        " them. Without it eval reads every item: it measures.",
    ),
]
MetricOpt = Annotated[
    MetricChoice,
    typer.Option(
        help="sub_em, em and f1 are always scored. [b]auto[/]: MRCR's grade too for the items with a "
        "random_string_to_prepend; [b]mrcr[/]: for every item; [b]sub_em[/]: for none.",
    ),
]


@app.command("run", help="Run every item of DATA and score it (the default: `memagent eval DATA`).")
@flag_groups
def run(
    data: DataArg,
    out: OutOpt = None,
    parallel: ParallelOpt = 8,
    limit: LimitOpt = None,
    metric: MetricOpt = MetricChoice.auto,
    reuse: ReuseOpt = False,
    json_out: JsonOpt = False,
    flags: RunFlags = RunFlags(final="answer-is"),  # a score is compared with the paper's table, which was made with it
) -> None:
    from ..core.events import RunFailed
    from ..evals.evaluation import ItemScored, done_ids, evaluate_events, summary
    from .textout import json_text, print_json

    err = stderr_console()
    traced: _Traced | None = None
    try:
        if not data.is_file():
            raise MemagentError(
                f"{data} is not a file.", "Give a JSONL data set, or make one: memagent eval make-niah", exit_code=EXIT_USAGE
            )
        check_outputs({"--out": out}, inputs=[data])
        setup_ = setup(flags, err)
        check_same_setup(out, setup_)
        if reuse:
            store = open_store(err)
            traced = _Traced(store, setup_, err) if store is not None else None
        previous = done_ids(out)
        rows = [r for r in previous.values() if "sub_em" in r]
        failures: list[tuple[str, MemagentError]] = []
        sink = open(out, "a", encoding="utf-8") if out is not None else None
        progress = _Progress(err)
        try:
            with progress:
                for item, event in evaluate_events(
                    data,
                    **setup_.args(),
                    parallel=parallel,
                    skip=set(previous),
                    limit=limit,
                    metric=metric.value,
                    answered=traced.answered if traced is not None else None,
                    observe=traced.observe if traced is not None else None,
                ):
                    if isinstance(event, ItemScored):
                        rows.append(event.row)
                        if sink is not None:
                            sink.write(json_text(event.row, indent=None) + "\n")
                            sink.flush()
                        progress.done(event.row, summary(rows))
                    elif isinstance(event, RunFailed):
                        if not isinstance(event.error, MemagentError):
                            raise event.error
                        failures.append((item.id, event.error))
                        progress.failed(item.id, event.error)
                    else:
                        progress.event(item.id, event)
        finally:
            if sink is not None:
                sink.close()
    except MemagentError as exc:
        fail(err, exc)
    except KeyboardInterrupt:
        if traced is not None:
            traced.interrupted()
        err.print(
            f"interrupted. Results so far are in {out}; run the same command to go on." if out else "interrupted",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED)
    result = summary(rows)
    if json_out:
        print_json({**result, "failed": len(failures), "out": str(out) if out else None})
    else:
        _print_table(data, result)
    if failures:
        err.print(
            f"error: {len(failures)} item(s) failed (first: {failures[0][0]}: {failures[0][1]}); "
            + ("run the same command again to retry them." if out else "use --out to keep results across runs."),
            style="red",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)


class _Traced:
    """`eval --reuse`: each item's answer looked up in the trace store, and each run recorded."""

    def __init__(self, store: TraceStore, run: RunSetup, err: Console):
        from ..core.pipeline import SourceOptions
        from ..runs.planning import Runs

        self.store, self.run, self.err = store, run, err
        self.warn = warner(err)
        self.runs = Runs(store, run, SourceOptions(), fresh=False, warn=self.warn)
        self.recorders: dict[int, Recorder] = {}

    def answered(self, job: Job) -> dict[str, Any] | None:
        """The item's stored answer (its record, with `reused_from`), or None."""
        found = self.runs.plan_job(job).reused
        return found.record if found is not None else None

    def observe(self, job: Job, event: Event) -> None:
        """A run's event to its recorder, made when it starts with the run's keys."""
        from ..core.events import RunFailed, RunFinished, RunStarted

        if isinstance(event, RunStarted):
            recorder = self.runs.plan_job(job, fresh=True).recorder()  # fresh: its keys, nothing looked up again
            assert recorder is not None  # eval --reuse keeps a store
            self.recorders[id(job)] = recorder
        recorder = self.recorders.get(id(job))
        if recorder is None:
            return
        if isinstance(event, RunFailed):
            recorder.stopped("failed", str(event.error))
            del self.recorders[id(job)]
            return
        recorder.handle(event)
        if isinstance(event, RunFinished):
            del self.recorders[id(job)]

    def interrupted(self) -> None:
        for recorder in self.recorders.values():
            recorder.stopped("interrupted")


def _print_table(data: Path, result: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{data.name}: {result['n']} items", title_justify="left")
    keys = [key for key in ("mrcr", "sub_em", "em", "f1", "quote_hit") if key in result]  # MRCR first: Table 9's number
    table.add_column("n", justify="right")
    for key in keys:
        table.add_column(key, justify="right")
    table.add_row(str(result["n"]), *(f"{result[key]:.2f}" for key in keys))
    SafeConsole(highlight=False).print(table)


class _Progress:
    """A progress bar with the running score on a terminal; a line per item elsewhere."""

    def __init__(self, console: Console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.live = console.is_terminal
        self.bar = (
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            )
            if self.live
            else None
        )
        self.task: TaskID | None = None
        self.count = 0

    def __enter__(self) -> _Progress:
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task("items", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def event(self, item_id: str, event: Event) -> None:
        from ..core.events import Notice

        if isinstance(event, Notice):
            self.console.print(f"{item_id}: {event.message}", style="yellow", markup=False, soft_wrap=True)

    def done(self, row: dict[str, Any], running: dict[str, Any]) -> None:
        self.count += 1
        # MRCR's grade is a similarity, not right or wrong: an item graded by it shows its grade.
        verdict = f"mrcr {row['mrcr']:.2f}" if "mrcr" in row else ("right" if row["sub_em"] else "wrong")
        key = "mrcr" if "mrcr" in running else "sub_em"
        line = (
            f"{row['id']}: {verdict} ({row['steps']} steps, {row['seconds']:.1f}s); "
            f"{key} so far {running[key]:.2f}% of {running['n']}"
        )
        if self.bar is not None:
            assert self.task is not None  # __enter__ adds the task whenever there is a bar
            self.bar.update(self.task, completed=self.count, description=f"{key} {running[key]:.1f}%")
        else:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def failed(self, item_id: str, error: BaseException) -> None:
        self.console.print(f"{item_id}: failed: {error}", style="red", markup=False, soft_wrap=True)


@app.command("make-niah", help="Write needle-in-a-haystack items (RULER style) for a length you choose; offline.")
def make_niah(
    tokens: Annotated[int, typer.Option(min=1, help="Context length of each item, in tokens.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL file to write.", show_default=False)],
    needles: Annotated[int, typer.Option(min=1, help="Facts planted per item; one is asked for.")] = 1,
    n: Annotated[int, typer.Option("--n", min=1, help="Number of items.")] = 20,
    seed: Annotated[int, typer.Option(help="Same seed, same items.")] = 0,
    model: Annotated[
        Optional[str],
        typer.Option(
            "--model",
            "-m",
            show_default=False,
            help="Size contexts with this GGUF's tokenizer (exact); default: an estimate for Qwen2-style vocabularies.",
        ),
    ] = None,
) -> None:
    from ..evals import niah

    err = stderr_console()
    try:
        check_outputs({"--out": out})
        count: Callable[[str], int] | None = None
        if model is not None:
            from ..install.registry import resolve_model
            from ..model.gguf import read_gguf
            from ..model.tokenizer import load_tokenizer

            tok = load_tokenizer(read_gguf(resolve_model(model)))
            count = lambda text: len(tok.encode(text))  # noqa: E731
        items = niah.make_items(tokens, needles, n, seed, count_tokens=count)
        niah.write_items(items, out)
    except MemagentError as exc:
        fail(err, exc)
    err.print(f"wrote {len(items)} items of ~{tokens:,} tokens to {out}", markup=False, highlight=False, soft_wrap=True)
    sys.stdout.flush()
