"""The CLI's front end of core/jobs.py, what `ask --each`, `batch` and `watch` share: feeding many
runs' events to their traces and the view, turning each finished run into its record, the files
records go to as they land (`--jsonl`, `--csv`, `--html`), and a job's page.

A record is `ask --json`'s, with "trace" (the run's id) and what names the run within the job
("document" for `--each`, "custom_id" for `batch`); a run that failed has "question", "error" and
"trace" in its place (docs/JSON.md, "job result").
"""

from __future__ import annotations

import contextlib
import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence

from ..core.events import RunFailed, RunFinished, RunStarted
from ..core.provenance import describe_spans
from ..errors import EXIT_USAGE, MemagentError
from .common import interrupts_held, noter, sigterm_as_interrupt
from .textout import json_text

if TYPE_CHECKING:
    from rich.console import Console

    from ..core.events import Event, RunResult
    from ..core.jobs import Job
    from ..traces.recorder import Recorder
    from ..traces.store import TraceStore


@dataclass
class Finished:
    """A run that ended: its result, or the error that stopped it; its trace's id when recorded."""

    job: Job
    result: RunResult | None
    error: BaseException | None
    trace: str | None
    conversation: dict[str, Any] | None = None  # the run's conversation and turn (its own, of one turn)

    def record(self, **names: Any) -> dict[str, Any]:
        """The run's record (see the module docstring), `names` first."""
        if self.result is not None:
            out = {**names, **self.result.to_dict()}
        else:
            out = {**names, "question": self.job.question, "error": error_text(self.error)}
        out["trace"] = self.trace
        out["conversation"] = self.conversation
        return out


def error_text(error: BaseException | None) -> str:
    if isinstance(error, MemagentError) or error is None:
        return str(error)
    return f"internal error: {type(error).__name__}: {error}"  # a bug; the run is kept, the others go on


@dataclass
class Unfinished:
    """Runs that Ctrl-C stopped, each recorded as interrupted."""

    traces: list[str] = field(default_factory=list)


def _handle(job: Job, event: Event, recorders: dict[int, Recorder | None], view: RunsView | None) -> None:
    """One event to its run's recorder (first, so a step is saved before it is drawn), then the view."""
    from ..core.jobs import Cancelled

    rec = recorders.get(id(job))
    if rec is not None:
        if isinstance(event, RunFailed) and isinstance(event.error, Cancelled):  # stopped on purpose: resumable
            rec.stopped("interrupted")
        elif isinstance(event, RunFailed):
            rec.stopped("failed", error_text(event.error))
        else:
            rec.handle(event)
    if view is not None:
        view.handle(job, event)


class RunsView(Protocol):
    """What `drive` shows runs in (JobView; `watch` its own): entered while they run."""

    def handle(self, job: Job, event: Event) -> None: ...

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> object: ...


def drive(
    events: Iterable[tuple[Job, Event]],
    *,
    view: RunsView | None,
    recorder_for: Callable[[Job], Recorder | None],
    finished: Callable[[Finished], None],
    first: Callable[[], None] | None = None,
) -> None:
    """Feeds each run's events to its recorder (first, so a step is saved before it is drawn) and
    to the view, and hands each run that ends to `finished`; `first` is called once the view is up,
    before any event (to show what needs no run). Ctrl-C or SIGTERM raises KeyboardInterrupt with
    every run in flight recorded as interrupted (see `Interrupted`)."""
    recorders: dict[int, Recorder | None] = {}
    try:
        with sigterm_as_interrupt(), view if view is not None else contextlib.nullcontext():
            if first is not None:
                first()
            for job, event in events:
                if isinstance(event, (RunFinished, RunFailed)):
                    with interrupts_held():  # its trace, its line, its answer: all or none
                        _handle(job, event, recorders, view)
                        rec = recorders.pop(id(job), None)
                        trace = rec.run_id if rec is not None and rec.failed_write is None else None
                        turn = rec.conversation_record() if rec is not None else None
                        if isinstance(event, RunFinished):
                            finished(Finished(job, event.result, None, trace, turn))
                        else:
                            finished(Finished(job, None, event.error, trace, turn))
                else:
                    if isinstance(event, RunStarted):
                        recorders[id(job)] = recorder_for(job)
                    _handle(job, event, recorders, view)
    except KeyboardInterrupt:
        stopped = Unfinished()
        for rec in recorders.values():
            if rec is not None and rec.run_id is not None:
                rec.stopped("interrupted")
                stopped.traces.append(rec.run_id)
        raise Interrupted(stopped) from None
    except MemagentError as exc:  # the whole job stopped (the model would not load, every server gone)
        for rec in recorders.values():
            if rec is not None and rec.run_id is not None:
                rec.stopped("failed", str(exc))
        raise


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a job; `stopped` has the runs in flight, each recorded as interrupted."""

    def __init__(self, stopped: Unfinished):
        super().__init__()
        self.stopped = stopped


def evidence_text(record: dict[str, Any]) -> str:
    """Where a record's evidence lies, in words: each evidence step's places, joined by " | "."""
    return " | ".join(describe_spans(e.get("spans") or []) for e in record.get("evidence") or [])


CSV_FIELDS = ("document", "question", "answer", "evidence", "quote", "quote_location", "trace", "error")


def cell(value: Any) -> str:
    """A field of an answer's data as a CSV cell: text as it is, true/false, numbers, nested values as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json_text(value, indent=None)


def csv_header(name_field: str, fields: Sequence[str] = ()) -> list[str]:
    """The CSV's first row: `name_field` and the question, a column per field of a --schema, then the rest of CSV_FIELDS."""
    header = [name_field if f == "document" else f for f in CSV_FIELDS]
    return header[:2] + list(fields) + header[2:]


def csv_rows(record: dict[str, Any], name_field: str, fields: Sequence[str] = ()) -> list[list[str]]:
    """A record's rows in the CSV: one, or with --schema-multi (`fields` given, its data a list) one per item."""
    first_quote = (record.get("quotes") or [{}])[0]
    data = record.get("data")
    items = (data or [{}]) if isinstance(data, list) else [data if isinstance(data, dict) else {}]
    return [
        [
            record.get(name_field, ""),
            record.get("question", ""),
            *(cell(item.get(f)) for f in fields),
            record.get("answer", ""),
            evidence_text(record),
            first_quote.get("text", ""),
            first_quote.get("location", ""),
            record.get("trace") or "",
            record.get("error", ""),
        ]
        for item in (items if fields else [{}])
    ]


class Sinks:
    """The files records go to as runs finish: JSON lines (appended where `append`, else written
    anew), CSV (one row per run, with a header; what a spreadsheet opens). Each is flushed per
    record, so what finished is on disk whatever happens next. Under --schema (`fields`: its
    top-level fields) the CSV has a column per field after the question, and with --schema-multi a
    row per item of each answer."""

    def __init__(
        self, jsonl: Path | None, csv_path: Path | None, name_field: str, fields: Sequence[str] = (), *, append: bool = True
    ):
        self._fields = list(fields)
        self._files: list[IO[str]] = []
        self._jsonl: IO[str] | None = None
        self._csv: Any = None
        self._csv_file: IO[str] | None = None
        self._name = name_field
        try:
            if jsonl is not None:
                self._jsonl = self._open(jsonl, "a" if append else "w")
            if csv_path is not None:
                self._csv_file = self._open(csv_path, "w", newline="")
                self._csv = csv.writer(self._csv_file)
                self._csv.writerow(csv_header(self._name, self._fields))
                self._csv_file.flush()
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, mode: str, newline: str | None = None) -> IO[str]:
        try:
            # utf-8-sig: spreadsheets (Excel) take a CSV without the mark for their locale's code page.
            encoding = "utf-8-sig" if path.suffix.lower() == ".csv" and mode == "w" else "utf-8"
            handle = open(path, mode, encoding=encoding, newline=newline, errors="backslashreplace")
        except OSError as exc:
            raise MemagentError(
                f"Cannot write {path}: {exc.strerror}.", "Name a file in a folder you can write to.", exit_code=EXIT_USAGE
            ) from None
        self._files.append(handle)
        return handle

    def add(self, record: dict[str, Any]) -> None:
        try:
            if self._jsonl is not None:
                self._jsonl.write(json_text(record, indent=None) + "\n")
                self._jsonl.flush()
            if self._csv is not None and self._csv_file is not None:
                self._csv.writerows(csv_rows(record, self._name, self._fields))
                self._csv_file.flush()
        except OSError as exc:
            raise MemagentError(f"Cannot write the results: {exc.strerror}.", "Free some disk space and run it again.") from None

    def close(self) -> None:
        for handle in self._files:
            with contextlib.suppress(OSError):
                handle.close()
        self._files = []


def write_whole(path: Path, text: str) -> None:
    """`text` to `path` whole or not at all (paths.atomic_write): a reader (a spreadsheet, a script
    polling the file) sees the old file or the new one, never part of it."""
    from ..paths import atomic_write

    try:
        with atomic_write(path, encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
    except OSError as exc:
        raise MemagentError(f"Cannot write {path}: {exc.strerror}.", "Name a file in a folder you can write to.") from None


def write_html(path: Path, records: list[dict[str, Any]], store: TraceStore | None, err: Console) -> None:
    """The job's page: the table, each answer's evidence, each run's memory timeline."""
    from ..traces.report import each_report_html

    write_whole(path, each_report_html(html_rows(records), stored_runs(records, store)))
    noter(err)(f"wrote {path}")


def stored_runs(records: list[dict[str, Any]], store: TraceStore | None) -> dict[str, Mapping[str, Any]]:
    """The stored run of each record that has one (the page draws its memory timeline)."""
    runs: dict[str, Mapping[str, Any]] = {}
    for record in records:
        trace = record.get("trace")
        if store is not None and trace:
            try:
                runs[trace] = store.get_run(trace)
            except MemagentError:  # removed meanwhile: the row stays, without its timeline
                continue
    return runs


def html_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's rows (traces/report.py) of the job's records."""
    return [
        {
            "document": r.get("document") or r.get("custom_id") or "",
            "question": r.get("question", ""),
            "answer": r.get("answer"),
            "evidence": r.get("evidence") or [],
            "quotes": r.get("quotes") or [],
            "error": r.get("error"),
            "trace": r.get("trace"),
            "steps": len(r.get("steps") or []),
        }
        for r in records
    ]
