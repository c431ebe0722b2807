"""`memagent watch SOURCES -q QUESTION`: the answers to fixed questions about every document of a
folder, kept current while the folder changes.

First a pass like `ask --each` (what the trace store answers is given at once), then it waits for
changes: watchfiles (the Rust `notify` crate: inotify, FSEvents, ReadDirectoryChangesW) tells of them,
or it looks every --poll seconds where a file system sends no events (network shares, some
containers). A change only wakes it: the sources are then found again, as `ask --each` finds them,
and compared by size and modification time. A new or changed document is read once it has settled
(neither has changed for --settle seconds), so a file still being copied is not read half-written;
one that changes while it is read has that run stopped (resumable, in the trace store) and waits to
settle again. Reading goes through the run layer (runs/planning.py) like every run: a document whose text is known
(renamed, or changed back) is answered from the store, one that grew is continued from its last
reading, so a watched log costs only its new chunks. A document gone takes its rows with it.

The outputs (--csv, --jsonl, --html) are written whole after every change, each put in place at once
(a file beside it, renamed over it): a spreadsheet, `watch -n1 cat signed.csv` or a script never sees
half a table. A document that fails has its row with the error, and is read again only when it
changes. Ctrl-C stops the run in flight (resumable) and leaves the outputs complete for what was
answered; exit 130.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Iterable, Iterator, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from ..runs.planning import Runs
from ..runs.setup import RunSetup
from .common import check_outputs, fail, open_store, sigterm_as_interrupt, stderr_console, warner
from .jobs import Finished, Interrupted, atomic_write, drive, write_records
from .options import (
    FreshOpt,
    JsonLinesOpt,
    OutputFlags,
    ParallelOpt,
    QuestionFlags,
    QuietOpt,
    SourceFlags,
    flag_groups,
    option,
)
from .setup import RunFlags, setup
from .textout import json_text, visible

if TYPE_CHECKING:
    from ..core.events import Event
    from ..core.jobs import Job, JobRunner
    from ..core.pipeline import SourceOptions
    from ..ingest.sources import Source
    from ..runs.planning import Plan
    from ..traces.recorder import Recorder
    from ..traces.store import TraceStore
    from .views.watchview import WatchView

SETTLE_SECONDS = 2.0
NO_EVENT_WAIT = 60.0  # the longest a quiet folder is left unlooked at, events or not

SourcesArg = Annotated[
    list[str],
    typer.Argument(
        metavar="SOURCE...", show_default=False, help="Folders (watched with what they hold) and files to keep answered."
    ),
]


PollOpt = Annotated[
    Optional[float],
    option(
        "Look for changes every SECONDS instead of waiting for the file system's events: for network shares and"
        " containers that send none.",
        metavar="SECONDS",
        min=0.1,
    ),
]
SettleOpt = Annotated[
    float,
    option(
        "A new or changed file is read once its size and modification time have not changed for this long:"
        " a file still being copied is not read half-written.",
        metavar="SECONDS",
        min=0.0,
    ),
]


@flag_groups
def watch(
    args: SourcesArg,
    source_flags: SourceFlags = SourceFlags(),
    asked: QuestionFlags = QuestionFlags(),
    outputs: OutputFlags = OutputFlags(),
    parallel: ParallelOpt = 4,
    poll: PollOpt = None,
    settle: SettleOpt = SETTLE_SECONDS,
    fresh: FreshOpt = False,
    json_out: JsonLinesOpt = False,
    quiet: QuietOpt = False,
    flags: RunFlags = RunFlags(),
) -> None:
    """Keep the answers to fixed questions current while a folder changes.

    Every document is asked each question, as [b]ask --each[/] asks it; then each new or changed
    document is read once it has settled, a document that grew is read from where it changed, and a
    deleted one leaves the outputs. Answers known to the trace store are never read twice, so a
    restart reads nothing it has answered. Ctrl-C stops it; the outputs are complete for what was
    answered.

    [dim]Examples:[/]
      memagent watch contracts/ -q "Who signed it?" --schema 'signer, date' --csv signed.csv
      memagent watch build.log -q "Why did the build fail?" --json
      memagent watch /mnt/share/reports -q "What is the total?" --poll 30 --csv totals.csv
    """
    err = stderr_console()
    warn = warner(err)
    try:
        questions = asked.gathered(warn)
        if not questions:
            if flags.schema is None:
                raise MemagentError(
                    "No question given.", 'Give one with -q, e.g. memagent watch docs/ -q "Who signed it?"', exit_code=EXIT_USAGE
                )
            questions = [""]  # a schema's fields make the question
        _check_watched(args)
        written = outputs.written()
        check_outputs(written, inputs=[*args, *asked.files()])
        run = setup(flags, err)
        store = open_store(err)
        sources = source_flags.settings(None, written=written.values())
    except MemagentError as exc:
        fail(err, exc)
    schema = run.config.schema()
    files = _Outputs(outputs, tuple(schema.fields) if schema is not None else (), store)
    runs = Runs(store, run, sources, fresh, warn)
    keeper = Keeper(args, questions, run, sources, runs, parallel, settle, files, err, json_out=json_out, quiet=quiet)
    try:
        keeper.keep(poll)
    except MemagentError as exc:
        fail(err, exc)


def _check_watched(paths: Iterable[str]) -> None:
    """Each path a folder or a file there, and readable: said in one line before anything loads."""
    for path in paths:
        if path == "-":
            raise MemagentError(
                "watch reads files: standard input cannot be watched.",
                'Pipe it into ask, or name the file it comes from: memagent watch build.log -q "…"',
                exit_code=EXIT_USAGE,
            )
        if not os.path.exists(path):
            raise MemagentError(f"{path}: no such file or folder.", "Name a folder (or a file) to watch.", exit_code=EXIT_USAGE)
        folder = os.path.isdir(path)
        if not os.access(path, os.R_OK | (os.X_OK if folder else 0)):
            what = "folder" if folder else "file"
            raise MemagentError(f"{path}: this {what} cannot be read (permission denied).", exit_code=EXIT_USAGE)
        if not folder and not os.path.isfile(path):
            raise MemagentError(f"{path} is not a file or a folder.", "Name a folder (or a file) to watch.", exit_code=EXIT_USAGE)


@dataclass
class _Doc:
    """A document as last seen: its source, size and modification time, since when they have not
    changed (a wall-clock time), and the size and time its rows were made for."""

    source: Source
    stat: tuple[int, int]
    since: float
    done: tuple[int, int] | None = None

    def ready(self, now: float, settle: float) -> bool:
        return self.done != self.stat and now - self.since >= settle


@dataclass
class _Outputs:
    """Where the rows go: the files, rewritten whole at each change."""

    given: OutputFlags
    fields: tuple[str, ...]
    store: TraceStore | None

    def write(self, records: list[dict[str, Any]]) -> None:
        given = self.given
        if given.jsonl is not None or given.csv_file is not None:
            write_records(records, jsonl=given.jsonl, csv_path=given.csv_file, name_field="document", fields=self.fields)
        if given.html is not None:
            from ..traces.report import each_report_html
            from .each import html_rows, stored_runs

            atomic_write(given.html, each_report_html(html_rows(records), stored_runs(records, self.store)))


class _Changes:
    """The file system's news of the watched paths, from watchfiles in threads of its own: folders
    with what they hold, a file by its folder (an editor saves by renaming a new file over it)."""

    def __init__(self, paths: list[str], poll: float | None):
        self.queue: queue.SimpleQueue[set[str]] = queue.SimpleQueue()
        self.stop = threading.Event()
        folders = sorted({os.path.abspath(p) for p in paths if os.path.isdir(p)})
        parents = sorted({os.path.dirname(os.path.abspath(p)) for p in paths if not os.path.isdir(p)})
        self.threads = [
            threading.Thread(target=self._follow, args=(targets, recursive, poll), daemon=True, name="memagent-watch")
            for targets, recursive in ((folders, True), (parents, False))
            if targets
        ]
        for thread in self.threads:
            thread.start()

    def _follow(self, targets: list[str], recursive: bool, poll: float | None) -> None:
        import watchfiles

        for changes in watchfiles.watch(
            *targets,
            watch_filter=None,  # which files count is decided when the sources are found again
            debounce=400,
            step=50,
            stop_event=self.stop,
            rust_timeout=500,
            raise_interrupt=False,
            recursive=recursive,
            force_polling=poll is not None,
            poll_delay_ms=int((poll or 0.3) * 1000),
            ignore_permission_denied=True,
        ):
            self.queue.put({path for _, path in changes})

    def wait(self, timeout: float | None) -> set[str]:
        """The paths changed since last asked, waiting up to `timeout` seconds for one."""
        got: set[str] = set()
        try:
            got |= self.queue.get(timeout=timeout) if timeout is None or timeout > 0 else self.queue.get_nowait()
        except queue.Empty:
            return got
        return got | self.pending()

    def pending(self) -> set[str]:
        got: set[str] = set()
        while True:
            try:
                got |= self.queue.get_nowait()
            except queue.Empty:
                return got

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)


@dataclass
class _Forward:
    """The view as `drive` is given it: the watch keeps it up between runs, so drive neither starts nor stops it."""

    view: WatchView | None

    def handle(self, job: Job, event: Event) -> None:
        if self.view is not None:
            self.view.handle(job, event)

    def __enter__(self) -> _Forward:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class Keeper:
    """One watch: the documents as last seen, their rows, the model (loaded when a run first needs it)."""

    paths: list[str]
    questions: list[str]
    run: RunSetup
    sources: SourceOptions
    runs: Runs
    parallel: int
    settle: float
    outputs: _Outputs
    err: Console
    json_out: bool = False
    quiet: bool = False
    docs: dict[str, _Doc] = field(default_factory=dict)  # by title
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # by job key (Job.each: title and question)
    order: list[str] = field(default_factory=list)  # the titles, in the order the sources were found
    said: set[str] = field(default_factory=set)
    runner: JobRunner | None = None
    view: WatchView | None = None
    stirred: bool = False  # changes arrived while runs went on: look again before waiting

    def keep(self, poll: float | None) -> None:
        """The first pass, then a look at every change, until Ctrl-C (exit 130)."""
        from .views.watchview import WatchView

        self.view = None if self.quiet else WatchView(self.err, live=self.err.is_terminal, several=len(self.questions) > 1)
        changes = _Changes(self.paths, poll)
        self.changes = changes
        try:
            with sigterm_as_interrupt(), self.view if self.view is not None else _Forward(None):
                self.cycle()
                self.runs.fresh = False  # --fresh is the first pass's: a change later reads what changed
                while True:
                    changes.wait(0 if self.stirred else self._wait())
                    self.stirred = False
                    self.cycle()
        except (KeyboardInterrupt, Interrupted) as stop:
            stopped = stop.stopped.traces if isinstance(stop, Interrupted) else []
            done = sum(1 for row in self.rows.values() if not row.get("error"))
            hint = f"; {len(stopped)} run(s) stopped, each resumable" if stopped else ""
            self.err.print(
                Text.assemble(("interrupted", "yellow"), f": {done} answer(s) kept in the outputs{hint}."), soft_wrap=True
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            changes.close()
            if self.runner is not None:
                self.runner.close()

    def _wait(self) -> float:
        """Seconds until the first document not yet settled would be, else a minute."""
        now = time.time()
        waits = [d.since + self.settle - now for d in self.docs.values() if d.done != d.stat]
        return max(0.05, min(waits)) if waits else NO_EVENT_WAIT

    # What is there now ----------------------------------------------------------------------

    def scan(self) -> list[Source]:
        """The documents the paths name now, each one's size and time noted; those gone leave."""
        from ..core.pipeline import find_sources

        notes: list[str] = []
        there = [p for p in self.paths if os.path.exists(p)]
        found = find_sources(there, self.sources, notes.append) if there else []
        for note in notes:
            if note not in self.said:  # a skipped file is said once, not at every look
                self.said.add(note)
                self._tell(f"note: {visible(note)}")
        now = time.time()
        current: list[Source] = []
        for source in found:
            try:
                info = os.stat(source.path)
            except OSError:  # gone since it was found: the next look says so
                continue
            stat = (info.st_size, info.st_mtime_ns)
            doc = self.docs.get(source.title)
            if doc is None:
                # first seen: settled already if it has not changed for `settle` (a file being copied has)
                self.docs[source.title] = _Doc(source, stat, min(now, info.st_mtime))
                self._state(source, "settling" if now - info.st_mtime < self.settle else "queued")
            elif doc.stat != stat:
                doc.source, doc.stat, doc.since = source, stat, now
                self._state(source, "settling")
            else:
                doc.source = source
            current.append(source)
        titles = {s.title for s in current}
        for title in [t for t in self.docs if t not in titles]:
            self._gone(self.docs.pop(title).source)
        self.order = [s.title for s in current]
        return current

    def _state(self, source: Source, state: str) -> None:
        from ..core.jobs import Job

        if self.view is not None:
            for question in self.questions:
                self.view.state(Job.each(source, question), state)

    def _gone(self, source: Source) -> None:
        from ..core.jobs import Job

        jobs = [Job.each(source, question) for question in self.questions]
        for job in jobs:
            if self.rows.pop(job.key, None) is not None:
                self.stirred = True
        self._write()  # the outputs lose its rows before the line says it is gone
        if self.view is not None:
            for job in jobs:
                self.view.gone(job)

    # One look -------------------------------------------------------------------------------

    def cycle(self) -> None:
        """Finds the documents again; answers what has settled and changed (from the store, or by reading)."""
        from ..core.jobs import Job

        now = time.time()
        to_read: list[Job] = []
        plans: dict[int, Plan] = {}
        for source in self.scan():
            doc = self.docs[source.title]
            if not doc.ready(now, self.settle):
                continue
            doc.done = doc.stat
            for question in self.questions:
                job = Job.each(source, question)
                plan = self.runs.plan_job(job)
                found = plan.reused
                if found is not None:
                    self._row(job, {"document": job.title, **found.record})  # in the outputs before it is said
                    if self.view is not None:
                        self.view.state(job, "answered before", found.answer, found.note())
                    continue
                job = plan.job(job)
                plans[id(job)] = plan
                to_read.append(job)
                if self.view is not None:
                    self.view.state(job, "queued")
        if to_read:
            self.read(to_read, plans)

    def read(self, jobs: list[Job], plans: dict[int, Plan]) -> None:
        """The runs, `parallel` at a time where the engine takes several; one whose document changes
        while it is read is stopped."""
        from ..core.jobs import run_on

        runner = self._runner()
        started = {id(job): self.docs[job.title].stat for job in jobs}
        cancels = {id(job): threading.Event() for job in jobs}
        live = self.view is not None and self.view.live is not None
        events = run_on(runner, jobs, stream_text=live, cancels=cancels)

        def recorder_for(job: Job) -> Recorder | None:
            return plans[id(job)].recorder(warn=self._warn)

        drive(
            self._watched(events, jobs, started, cancels),
            view=_Forward(self.view),
            recorder_for=recorder_for,
            finished=self._finished,
        )

    def _watched(
        self,
        events: Iterator[tuple[Job, Event]],
        jobs: list[Job],
        started: dict[int, tuple[int, int]],
        cancels: dict[int, threading.Event],
    ) -> Iterator[tuple[Job, Event]]:
        """The runs' events; where the file system told of a change, each run whose document is no
        longer as it was when the batch began is stopped."""
        for job, event in events:
            yield job, event
            if not self.changes.pending():
                continue
            self.stirred = True
            for other in jobs:
                if cancels[id(other)].is_set():
                    continue
                try:
                    info = os.stat(other.sources[0].path)
                    now = (info.st_size, info.st_mtime_ns)
                except OSError:
                    now = (-1, -1)
                if now != started[id(other)]:
                    cancels[id(other)].set()

    def _finished(self, done: Finished) -> None:
        from ..core.jobs import Cancelled

        job = done.job
        doc = self.docs.get(job.title)
        if isinstance(done.error, Cancelled):
            if doc is not None:
                doc.done = None  # read again once it has settled
                doc.since = time.time()
            if self.view is not None:
                self.view.state(job, "settling", "", "changed while it was read: read again once it settles")
            return
        record = done.record(document=job.title)
        if doc is not None:  # not gone meanwhile; in the outputs before the line says it is answered
            self._row(job, record)
        if done.result is None:
            if self.view is not None:
                self.view.state(job, "failed", record.get("error"), f"failed: {record.get('error')}")
        elif self.view is not None:
            steps = len(done.result.steps)
            self.view.state(job, "answered", done.result.answer, f"answered in {steps} step{'s' if steps != 1 else ''}")

    def _row(self, job: Job, record: dict[str, Any]) -> None:
        self.rows[job.key] = record
        if self.json_out and not record.get("error"):
            print(json_text(record, indent=None), flush=True)
        self._write()

    def _write(self) -> None:
        """Every row, in the order documents are found, each document's questions together."""
        from ..core.jobs import Job

        ordered = []
        for title in self.order:
            doc = self.docs.get(title)
            if doc is None:
                continue
            for question in self.questions:
                row = self.rows.get(Job.each(doc.source, question).key)
                if row is not None:
                    ordered.append(row)
        self.outputs.write(ordered)

    def _runner(self) -> JobRunner:
        from ..core.jobs import JobRunner

        if self.runner is None:
            self._tell("loading the model")
            self.runner = JobRunner(
                **self.run.args(), sources=self.sources, parallel=self.parallel, questions=self.questions, count=None
            )
        return self.runner

    def _warn(self, message: str) -> None:
        self._tell(f"warning: {visible(message)}")

    def _tell(self, line: str) -> None:
        if self.view is not None:  # none with --quiet
            self.view.tell(line)
