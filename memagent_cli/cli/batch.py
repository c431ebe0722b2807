"""`memagent batch JOB.jsonl -o RESULTS.jsonl`: a job file's runs, resumable as one job.

Each line of the job file is `{"custom_id", "sources": [...] | "context": "...", "question" |
"questions": [...]}`, with optional `"instructions"` (how its answers are written) and `"schema"`
(its answers as data: a JSON Schema, or the concise form as a string; `"schema_multi"` in its place for a
list), under which the question may be left out; each question is
its own run on one loaded model (or pool of servers), and each line's result is appended to the
results file, keyed by its custom_id, as it finishes. A rerun skips the ids already there, redoes
the lines that ended in an error, and resumes a run that was interrupted from its last recorded
step, through the trace store (each run's trace names the results file and its key). The whole file
is checked before any model loads. A run whose answer the trace store has (the same question,
text, model and settings, from this job or any other) reads nothing: it is written from the store
before the model loads, and only the rest load it (runs/planning.py).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Sequence

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from .common import check_outputs, fail, open_store, stderr_console, warner
from .options import (
    RESULTS_HELP,
    CsvOpt,
    FreshOpt,
    JsonOpt,
    NoTraceOpt,
    ParallelOpt,
    QuietOpt,
    SourceFlags,
    flag_groups,
    option,
)
from .run_flags import RunFlags, check_same_setup, setup
from .textout import print_json, visible

if TYPE_CHECKING:
    from ..core.config import AgentConfig
    from ..core.jobs import Job
    from ..core.schema import AnswerSchema
    from ..ingest.sources import Source
    from ..runs.planning import Plan, Runs
    from ..traces.found import Reused
    from ..traces.recorder import Recorder
    from ..traces.store import TraceStore
    from .job_runs import Finished
    from .views.jobview import JobView


@dataclass(frozen=True)
class Line:
    """One line of the job file, checked."""

    custom_id: str
    questions: tuple[str, ...]
    several: bool  # "questions" (a list, answered as "results") rather than "question"
    sources: tuple[str, ...] = ()
    context: str | None = None
    instructions: str | None = None  # how its answers are written (the final prompt only), over --instructions
    schema: AnswerSchema | None = None  # its answers as data, over --schema


# A line of the job file, as JSON Schema (docs/JSON.md shows it; tests/test_docs.py keeps the two the
# same). Each check's one-line message is in _SAID, by the property (or the rule) it is about.
JOB_LINE: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "A line of a memagent batch job file",
    "type": "object",
    "required": ["custom_id"],
    "properties": {
        "custom_id": {"type": ["string", "integer"], "minLength": 1},
        "sources": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "context": {"type": "string"},
        "question": {"type": "string", "pattern": "\\S"},
        "questions": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "\\S"}},
        "instructions": {"type": "string"},
        "schema": {"type": ["object", "string"]},
        "schema_multi": {"type": ["object", "string"]},
    },
    "oneOf": [{"required": ["sources"]}, {"required": ["context"]}],
    "not": {"required": ["question", "questions"]},
}
_SAID = {
    "": "not a JSON object",
    "custom_id": '"custom_id" must be a non-empty string',
    "sources": '"sources" must be a non-empty list of paths',
    "context": '"context" must be a string',
    "question": '"question" must be a non-empty string',
    "questions": '"questions" must be a non-empty list of strings',
    "instructions": '"instructions" must be a string',
    "schema": '"schema" is a JSON Schema object or a string of fields',
    "schema_multi": '"schema_multi" is a JSON Schema object or a string of fields',
    "oneOf": 'give exactly one of "sources" (a list of paths) and "context" (the text)',
    "not": 'give exactly one of "question" and "questions"',
}


@functools.cache
def _job_line_validator() -> Any:
    """JOB_LINE's validator, made once: a job file of 10,000 lines is checked line by line."""
    import jsonschema

    return jsonschema.Draft202012Validator(JOB_LINE)


def _check(obj: object, where: str, schema_flag: bool = False) -> Line:
    """A line, checked against JOB_LINE (a usage error in one line); `schema_flag`: --schema was
    given, so a line may leave its question out."""
    import jsonschema

    def bad(what: str) -> MemagentError:
        return MemagentError(
            f"{where}: {what}.",
            'Each line is {"custom_id", "sources" or "context", "question" or "questions"}.',
            exit_code=EXIT_USAGE,
        )

    error = jsonschema.exceptions.best_match(_job_line_validator().iter_errors(obj))
    if error is not None:
        if not isinstance(obj, dict):
            raise bad(_SAID[""])
        about = str(error.absolute_path[0]) if error.absolute_path else error.validator
        if error.validator == "required":
            about = "custom_id"
        raise bad(_SAID.get(str(about), error.message))
    assert isinstance(obj, dict)
    from ..core.schema import chosen_schema

    schema = chosen_schema(obj.get("schema"), obj.get("schema_multi"), where)
    if "question" not in obj and "questions" not in obj and schema is None and not schema_flag:
        raise bad('give one of "question" and "questions" (or a "schema", whose fields make one)')
    questions = tuple(obj["questions"]) if "questions" in obj else (obj.get("question", ""),)
    sources = obj.get("sources") or ()
    return Line(
        str(obj["custom_id"]), questions, "questions" in obj, tuple(sources), obj.get("context"), obj.get("instructions"), schema
    )


def read_lines(path: Path, schema_flag: bool = False) -> Iterator[Line]:
    """The job file's lines, checked one at a time (blank lines skipped); a bad one is a usage
    error naming its line number."""
    from ..core.records import json_records

    for _, where, obj in json_records(path, what="job file"):
        yield _check(obj, where, schema_flag)


@dataclass
class Progress:
    """Where the job stands: the runs left, and what is already in the results."""

    runs: int = 0
    lines: int = 0
    done: set[str] = field(default_factory=set)
    resumable: dict[str, dict[str, Any]] = field(default_factory=dict)  # run key -> the stored run to go on from


def finished_ids(out: Path) -> tuple[set[str], list[str], bool]:
    """The ids the results file has a result for, the lines to keep, and whether any line is to be
    dropped (a result that is an error, a line cut off by a crash): those are redone."""
    from ..core.records import written_records

    done: set[str] = set()
    keep: list[str] = []
    dropped = False
    for text, row in written_records(out):
        if row is None or "custom_id" not in row or row.get("error"):
            dropped = True
            continue
        done.add(str(row["custom_id"]))
        keep.append(text)
    return done, keep, dropped


def run_key(line: Line, n: int) -> str:
    """A run's key within the job: the custom_id, and the question's number when there are several."""
    return f"{line.custom_id}#{n + 1}" if line.several else line.custom_id


JobFileArg = Annotated[
    Path,
    typer.Argument(
        metavar="JOB.jsonl",
        show_default=False,
        help='Lines of {"custom_id", "sources": [...] or "context", "question" or "questions": [...]}.',
    ),
]
ResultsOpt = Annotated[
    Path,
    option(
        RESULTS_HELP,
        "--out",
        "-o",
        metavar="RESULTS.jsonl",
        show_default=False,
    ),
]


@flag_groups
def batch(
    job_file: JobFileArg,
    out: ResultsOpt,
    source_flags: SourceFlags = SourceFlags(),
    parallel: ParallelOpt = 8,
    csv_file: CsvOpt = None,
    no_trace: NoTraceOpt = False,
    fresh: FreshOpt = False,
    quiet: QuietOpt = False,
    json_out: JsonOpt = False,
    flags: RunFlags = RunFlags(),
) -> None:
    """Run a job file: every line's question(s) over its sources or context, each its own run.

    Results go to RESULTS.jsonl as each line finishes. Ctrl-C keeps everything: run the same command again to go on.

    A rerun skips the finished lines, redoes those that failed, and resumes interrupted runs from their last step.

    A run whose answer is in the trace store (the same question, text, model and settings) is written from it at once.
    --csv is written from RESULTS.jsonl when the command ends, so it holds every line done so far.

    [dim]Examples:[/]
      memagent batch contracts.jsonl -o signed.jsonl -m memagent-7b
      memagent batch job.jsonl -o out.jsonl --engine openai --base-url urls.txt --parallel 64
    """
    err = stderr_console()
    try:
        check_outputs({"--out": out, "--csv": csv_file}, inputs=[job_file])
        progress = _progress(job_file, out, flags.schema is not None)
        run = setup(flags, err)
        check_same_setup(out, run)
        store = None if no_trace else open_store(err)
        if store is not None:
            progress.resumable = _resumable(store, os.path.abspath(out), run.config, err)
        sources = source_flags.settings(None, written=(out, csv_file))
    except MemagentError as exc:
        fail(err, exc)
    schema = run.config.schema()
    fields = schema.fields if schema is not None else []
    from ..runs.planning import Runs

    runs = Runs(store, run, sources, fresh, warner(err))
    try:
        _run_lines(job_file, out, progress, runs, parallel, err, quiet=quiet, json_out=json_out)
    finally:
        if csv_file is not None:
            write_csv(out, csv_file, fields)


def write_csv(out: Path, path: Path, fields: Sequence[str]) -> None:
    """The results file as a spreadsheet: a row per run (a line of several questions, a row each)."""
    from ..core.records import written_records
    from .job_runs import Sinks

    sinks = Sinks(None, path, "custom_id", fields)
    try:
        for _, record in written_records(out):
            if record is None:  # a line a crash cut off: redone by the next run
                continue
            for row in record.get("results") or [record]:
                sinks.add({"custom_id": record.get("custom_id"), **row})
    finally:
        sinks.close()


def _run_lines(
    job_file: Path,
    out: Path,
    progress: Progress,
    runs: Runs,
    parallel: int,
    err: Console,
    *,
    quiet: bool,
    json_out: bool,
) -> None:
    from ..core.jobs import run_jobs
    from .job_runs import Interrupted, drive
    from .views.jobview import JobView

    if progress.runs == 0:
        if json_out:
            print_json({"done": 0, "failed": 0, "skipped": len(progress.done), "reused": 0, "out": str(out)})
        else:
            done = len(progress.done)
            err.print(f"Nothing to do: all {done} lines of {job_file} have results in {out}.", markup=False, soft_wrap=True)
        return
    if progress.done and not quiet:
        resumed = f", resuming {len(progress.resumable)} interrupted run(s)" if progress.resumable else ""
        err.print(f"{len(progress.done)} line(s) already done in {out}: skipped{resumed}.", markup=False, soft_wrap=True)
    lines = _Lines(out, err, progress, runs)
    view = None if quiet else JobView(err, progress.runs, live=err.is_terminal, several=False)
    try:
        try:
            left = lines.look_up(job_file)
            events = run_jobs(
                lines.jobs(job_file),
                **runs.setup.args(),
                sources=runs.sources,
                parallel=parallel,
                count=left,
                stream_text=view is not None and view.live is not None,  # only the table shows text as it comes
            )
            drive(
                events if left else iter(()),
                view=view,
                recorder_for=lines.recorder_for,
                finished=lines.finished,
                first=lambda: lines.answered_before(view),
            )
        finally:
            lines.sinks.close()
    except Interrupted as stop:
        err.print(
            Text.assemble(
                ("interrupted", "yellow"),
                f": {lines.tally.lines} line(s) done this time, in {out}; {len(stop.stopped.traces)} run(s) stopped. "
                "Run the same command again to go on.",
            ),
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except MemagentError as exc:
        fail(err, exc, f" after {lines.tally.lines} line(s); they are in {out}. Run the same command again to go on.")
    _report(lines.tally, progress, out, view, err, json_out=json_out)


def _progress(job_file: Path, out: Path, schema_flag: bool = False) -> Progress:
    """What is left to do: the job file checked whole (before any model loads; only ids are kept),
    the results file's finished ids; failed and cut-off result lines are dropped, to be redone."""
    if not job_file.is_file():
        raise MemagentError(
            f"{job_file} is not a file.", 'Give a JSONL job file: one {"custom_id", ...} per line.', exit_code=EXIT_USAGE
        )
    done, keep, dropped = finished_ids(out)
    progress = Progress(done=done)
    seen: set[str] = set()
    for line in read_lines(job_file, schema_flag):
        if line.custom_id in seen:
            raise MemagentError(
                f"{job_file}: custom_id {line.custom_id!r} is used twice.",
                "Each line needs its own custom_id.",
                exit_code=EXIT_USAGE,
            )
        seen.add(line.custom_id)
        if line.custom_id not in done:
            progress.lines += 1
            progress.runs += len(line.questions)
    if dropped:  # a reader then finds one line per id
        from .job_runs import write_whole

        write_whole(out, "".join(keep))
    return progress


class _Lines:
    """The job's runs as they start and finish: each line's jobs, its runs' recorders, and its
    results appended to the results file (a line of several questions once all are in)."""

    def __init__(self, out: Path, err: Console, progress: Progress, runs: Runs):
        self.err, self.progress, self.runs = err, progress, runs
        self.run, self.store = runs.setup, runs.store
        self.results = os.path.abspath(out)
        self.tally = _Tally()
        from .job_runs import Sinks

        self.sinks = Sinks(out, None, "custom_id")
        self.counts: dict[str, int] = {}  # lines with several questions that are in flight
        self.partial: dict[str, dict[int, dict[str, Any]]] = {}  # their results, until all are in
        self.plans: dict[str, Plan] = {}  # a run's plan (its answer key), by its key in the job
        self.reused: dict[str, tuple[Job, Reused]] = {}  # the runs the store answers, by their key in the job

    def _lines(self, job_file: Path) -> Iterator[tuple[Line, list[Job]]]:
        """The lines not done yet, each with its runs' jobs."""
        from ..core.jobs import Job

        flag_schema = self.run.config.schema()
        for line in read_lines(job_file, flag_schema is not None):
            if line.custom_id in self.progress.done:
                continue
            schema = line.schema or flag_schema
            jobs = []
            for n, question in enumerate(line.questions):
                # Left out under a schema: the one its fields make, so a rerun finds the stored run by it.
                question = question.strip() or (schema.question() if schema else question)
                key = run_key(line, n)
                stored = self.progress.resumable.get(key)
                steps = tuple(stored["steps"]) if stored is not None and stored["question"] == question else ()
                jobs.append(
                    Job(
                        key=key,
                        question=question,
                        paths=line.sources,
                        context=line.context,
                        title=line.custom_id,
                        done_steps=steps,
                        instructions=line.instructions,
                        schema=line.schema,
                    )
                )
            yield line, jobs

    def look_up(self, job_file: Path) -> int:
        """Finds each run's keys, and the answers the trace store has (before any model loads);
        the runs left to read."""
        from ..core.pipeline import found_sources

        left = 0
        for line, jobs in self._lines(job_file):
            if line.several:
                self.counts[line.custom_id] = len(line.questions)
            for job in jobs:
                if job.context is not None:
                    documents: tuple[Source, ...] = (job.stand_in,)
                else:
                    try:
                        documents = found_sources(job.paths, self.runs.sources).sources
                    except MemagentError:  # said when the run starts, as it would have been
                        left += 1
                        continue
                # an interrupted run goes on from its steps: its answer is not looked up
                plan = self.runs.plan_job(job, documents, fresh=True if job.done_steps else None)
                if plan.key is None:
                    left += 1
                    continue
                self.plans[job.key] = plan
                found = plan.reused
                if found is not None:
                    self.reused[job.key] = (job, found)
                else:
                    left += 1
        return left

    def answered_before(self, view: JobView | None) -> None:
        """The runs the store answers, as if they had just finished."""
        for job, found in self.reused.values():
            if view is not None:
                view.answered(job, found.record, found.note())
            self.tally.reused += 1
            self._finished(job, {"custom_id": job.title, **found.record})

    def jobs(self, job_file: Path) -> Iterator[Job]:
        """The file again, now one line at a time: only runs in flight are held."""

        for _, jobs in self._lines(job_file):
            for job in jobs:
                if job.key in self.reused:
                    continue
                plan = self.plans.get(job.key)
                if plan is not None and not job.done_steps:
                    job = plan.job(job)
                yield job

    def recorder_for(self, job: Job) -> Recorder | None:
        plan = self.plans.get(job.key)
        return self.runs.recorder(
            key=plan.key if plan is not None else None,
            resume=self.progress.resumable.get(job.key) if job.done_steps else None,
            job={"file": self.results, "key": job.key},
        )

    def finished(self, run: Finished) -> None:
        self._finished(run.job, run.record(custom_id=run.job.title))

    def _finished(self, job: Job, record: dict[str, Any]) -> None:
        custom_id = job.title
        key = job.key
        if key == custom_id:  # one question: the line is the run's record
            self.tally.add(record)
            self.sinks.add(record)
            return
        got = self.partial.setdefault(custom_id, {})
        got[int(key.rsplit("#", 1)[1])] = {k: v for k, v in record.items() if k != "custom_id"}
        if len(got) == self.counts[custom_id]:
            del self.partial[custom_id], self.counts[custom_id]
            listed = [got[n] for n in sorted(got)]
            failed = sum(1 for r in listed if r.get("error"))
            line: dict[str, Any] = {"custom_id": custom_id, "results": listed}
            if failed:
                line["error"] = f"{failed} of {len(listed)} questions failed"
            self.tally.add(line)
            self.sinks.add(line)


def _report(tally: _Tally, progress: Progress, out: Path, view: JobView | None, err: Console, *, json_out: bool) -> None:
    if json_out:
        summary = {"done": tally.lines, "failed": tally.failed, "skipped": len(progress.done), "reused": tally.reused}
        print_json({**summary, "out": str(out)})
    elif view is not None and view.live is None:  # a terminal's table ends with it already
        err.print(view.summary(), style="cyan", markup=False, soft_wrap=True)
    if tally.failed:
        err.print(
            Text.assemble(
                ("error: ", "bold red"),
                visible(f"{tally.failed} line(s) failed (first: {tally.first}); run the same command again to retry them."),
            ),
            soft_wrap=True,
        )
        raise typer.Exit(1)


@dataclass
class _Tally:
    lines: int = 0
    failed: int = 0
    reused: int = 0  # runs answered from the trace store
    first: str = ""

    def add(self, line: dict[str, Any]) -> None:
        self.lines += 1
        if line.get("error"):
            self.failed += 1
            if not self.first:
                self.first = f"{line['custom_id']}: {line['error']}"


def _resumable(store: TraceStore, results: str, config: AgentConfig, err: Any) -> dict[str, dict[str, Any]]:
    """This job's interrupted runs that can go on: same settings, sources unchanged."""
    from ..core.keys import differences
    from ..traces.recorder import resume_plan
    from .run_flags import LINE_OWN

    found: dict[str, dict[str, Any]] = {}
    for key, run_id in store.unfinished_job_runs(results).items():
        try:
            run = resume_plan(store, run_id)
        except MemagentError as exc:
            warner(err)(f"{exc} It starts over.")
            continue
        # A line's own instructions and schema are in its run's settings; they shape the answer, not the steps.
        if differences(run["settings"], config.to_dict(), ignore=LINE_OWN):
            continue  # other budgets, sampling or protocol: its steps are not this job's
        if run["steps"]:
            found[key] = run
    return found
