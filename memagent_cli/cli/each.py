"""`memagent ask --each`: every document the sources name (each file, each file in folders and
archives) times every question, each its own run with its own memory and trace, on one loaded
model; answers as they land, a table on a terminal, and the job's files (--jsonl, --csv, --html).

A document whose answer is in the trace store (the same question, text, model and settings) reads
nothing: its row comes first, from the store; the model is loaded only for the others, and a
document that grew is continued from its earlier run (runs/planning.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Sequence

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from ..ingest.base import STDIN_PATH, printable
from .answers import record_text
from .common import fail, warner
from .job_runs import Finished, Interrupted, Sinks, drive, error_text, write_html
from .options import OutputFlags, ShowFlags
from .textout import print_json, visible

if TYPE_CHECKING:
    from ..core.jobs import Job
    from ..core.pipeline import SourceOptions
    from ..runs.planning import Plan, Runs
    from ..runs.setup import RunSetup
    from ..traces.recorder import Recorder


@dataclass(frozen=True)
class EachOutput(ShowFlags):
    """Where `ask --each` puts what it finds, besides stdout."""

    files: OutputFlags = OutputFlags()


def run_each(
    paths: Sequence[str],
    questions: list[str],
    run: RunSetup,
    sources: SourceOptions,
    parallel: int,
    runs: Runs,
    err: Console,
    output: EachOutput,
) -> None:
    """Runs the job and prints its answers; exits 1 when a run failed (after the others), 130 on
    Ctrl-C (each stopped run recorded as interrupted, resumable with `ask --resume`)."""
    from ..core.jobs import run_jobs
    from .views.jobview import JobView

    store = runs.store
    jobs, plans = _with_plans(_jobs(paths, questions, sources, err), runs)
    reused = {id(job): plan.reused for job, plan in zip(jobs, plans) if plan.reused is not None}
    plan_of = {id(job): plan for job, plan in zip(jobs, plans)}
    number = {id(job): questions.index(job.question) + 1 for job in jobs}
    order = {id(job): k for k, job in enumerate(jobs)}
    several = len(questions) > 1
    records: list[tuple[int, dict[str, Any]]] = []  # (job order, record): runs in flight together end in any order
    failures: list[Finished] = []
    stdout_tty = sys.stdout.isatty()
    late: list[str] = []  # a terminal's answers wait for the table to close; piped ones go at once
    schema = run.config.schema()
    sinks = Sinks(output.files.jsonl, output.files.csv_file, "document", schema.fields if schema else (), append=False)

    def answered(job: Job, record: dict[str, Any], shown: bool = True) -> None:
        """A run's record to the files, and its answer to stdout (`shown`: a failure's is said at the end)."""
        sinks.add(record)
        if output.json_out or output.files.html is not None:
            records.append((order[id(job)], record))
        if output.json_out or not shown:
            return
        answer = record_text(record, raw=output.raw, cite=output.cite, tty=stdout_tty)
        head = f"{job.title} · Q{number[id(job)]}: {job.question}" if several else job.title
        text = f"{visible(head) if stdout_tty else head}\n{answer}\n"
        if stdout_tty and not output.quiet and err.is_terminal:
            late.append(text)
        else:
            print(text, flush=True)

    def finished(done: Finished) -> None:
        if done.result is None:
            failures.append(done)
        answered(done.job, done.record(document=done.job.title), shown=done.result is not None)

    view = None if output.quiet else JobView(err, len(jobs), live=err.is_terminal, several=several)
    to_run = [job for job in jobs if id(job) not in reused]
    events = run_jobs(
        to_run,
        **run.args(),
        sources=sources,
        parallel=parallel,
        questions=questions,
        count=len(to_run),
        stream_text=view is not None and view.live is not None,  # only the table shows text as it comes
    )

    def recorder_for(job: Job) -> Recorder | None:
        return plan_of[id(job)].recorder()

    def answered_before() -> None:
        for job in jobs:  # what the store answers comes first: the model loads only for the rest
            found = reused.get(id(job))
            if found is not None:
                if view is not None:
                    view.answered(job, found.record, found.note())
                answered(job, {"document": job.title, **found.record})

    try:
        drive(events if to_run else iter(()), view=view, recorder_for=recorder_for, finished=finished, first=answered_before)
    except Interrupted as stop:
        sinks.close()
        for text in late:
            print(text)
        _interrupted(stop.stopped.traces, err)
    except MemagentError as exc:
        sinks.close()
        fail(err, exc)
    sinks.close()
    for text in late:
        print(text)
    ordered = [record for _, record in sorted(records, key=lambda pair: pair[0])]
    if output.files.html is not None:
        write_html(output.files.html, ordered, store, err)
    if view is not None and view.live is None:  # a terminal's table ends with it already
        err.print(view.summary(), style="cyan", markup=False, soft_wrap=True)
    if output.json_out:
        print_json({"results": ordered})
    for done in failures:
        err.print(Text.assemble(("error: ", "bold red"), visible(f"{done.job.title}: {error_text(done.error)}")), soft_wrap=True)
    if failures:
        raise typer.Exit(1)


def _with_plans(jobs: list[Job], runs: Runs) -> tuple[list[Job], list[Plan]]:
    """The jobs, each going on from its earlier run where there is one, and their plans (the answers
    the store has for them among them)."""
    plans = [runs.plan_job(job) for job in jobs]
    return [job if plan.reused is not None else plan.job(job) for job, plan in zip(jobs, plans)], plans


def _jobs(paths: Sequence[str], questions: list[str], sources: SourceOptions, err: Console) -> list[Job]:
    """A run for every document the paths name times every question, a document's questions
    together (its answers land together)."""
    from ..core.jobs import Job
    from ..core.pipeline import find_sources

    documents = find_sources(paths, sources, warner(err))
    if not documents:
        raise MemagentError("There is no document to read in the sources.", "The notes above say what was skipped and why.")
    streamed = next((d for d in documents if d.stream), None)
    if len(questions) > 1 and streamed is not None:
        what = "Standard input" if streamed.path == STDIN_PATH else f"{printable(streamed.title)}, a pipe,"
        raise MemagentError(
            f"{what} can be read once, so --each cannot ask it several questions.",
            "Save it to a file and name the file, or drop --each: -q several over one reading asks them together.",
            exit_code=EXIT_USAGE,
        )
    return [Job.each(d, q) for d in documents for q in questions]


def _interrupted(ids: list[str], err: Console) -> NoReturn:
    """Ctrl-C: each stopped run, with the command that resumes it; exit 130."""
    hint = "".join(f"\n  memagent ask --resume {run_id[:8]}" for run_id in ids[:5])
    more = f"\n  … and {len(ids) - 5} more (memagent traces list --status interrupted)" if len(ids) > 5 else ""
    err.print(
        Text.assemble(("interrupted", "yellow"), f"; {len(ids)} run(s) stopped, each resumable:{hint}{more}" if ids else ""),
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_INTERRUPTED) from None
