"""`memagent watch`: the command, and `Keeper`, which runs a watched folder's readings and keeps its
outputs and view. What the user sees is the command's help; what the folder holds and when each
document is due is runs/folder.py's (pure, on a clock it is given), and runs/finding.py finds the
documents at the paths the file system names (watchfiles) or a --poll look finds changed.

Readings go through the run layer (runs/planning.py) like every run, so a document whose text is
known is answered from the store and one that grew is continued from its last reading. A reading
whose document changes under it is stopped (resumable) and waits to settle again; one that fails
keeps a row with its error and is read again only when it changes. The outputs
(cli/watchout.py) are written whole, each renamed over the last, so that a reader never sees half a
table, and while runs go on at most as often as runs/folder.py's `writes` allows.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterable, Iterator, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, MemagentError
from ..runs.folder import SETTLE_SECONDS, Folder, Stat, looks, lost_some, writes
from ..runs.planning import Runs
from ..runs.setup import RunSetup
from .common import check_outputs, fail, open_store, sigterm_as_interrupt, stderr_console, warner
from .job_runs import Finished, Interrupted, drive
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
from .run_flags import RunFlags, setup
from .textout import json_text, visible
from .watchout import Outputs, TableLog

if TYPE_CHECKING:
    from ..core.events import Event
    from ..core.jobs import Job, JobRunner
    from ..runs.finding import Found
    from ..runs.planning import Plan
    from ..traces.recorder import Recorder
    from .views.watchview import WatchView

NO_EVENT_WAIT = 60.0  # the longest the loop sleeps with nothing due (it looks again only where something is)

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
        " a file still being copied is not read half-written. A text file seen growing (a log) has its"
        " complete chunks read meanwhile, its row the answer so far.",
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
    deleted one leaves the outputs. A log still being written is read as it grows (its complete
    chunks; the row says growing) and read to its end once it settles. Answers known to the trace
    store are never read twice, so a restart reads nothing it has answered. Ctrl-C stops it; the
    outputs are complete for what was answered.

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
    files = Outputs(outputs, tuple(schema.fields) if schema is not None else (), store)
    runs = Runs(store, run, sources, fresh, warn)
    keeper = Keeper(args, questions, runs, files, err, parallel=parallel, settle=settle, json_out=json_out, quiet=quiet)
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
class _KeptView:
    """The view as `drive` is given it: the watch keeps it up between runs, so drive neither starts nor stops it."""

    view: WatchView | None

    def handle(self, job: Job, event: Event) -> None:
        if self.view is not None:
            self.view.handle(job, event)

    def __enter__(self) -> _KeptView:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class Keeper:
    """One watch: what runs the documents' readings and writes their rows. What the folder holds and
    when each document is due is `folder`'s (runs/folder.py), finding it `finder`'s (runs/finding.py);
    this reads (the model loaded when a reading first needs it), stops a reading whose document
    changes under it, and keeps the outputs and the view."""

    def __init__(self, paths: list[str], questions: list[str], runs: Runs, outputs: Outputs, err: Console, **how: Any):
        from ..core.protocols import get as get_protocol

        self.questions = questions
        self.runs = runs
        self.run: RunSetup = runs.setup
        self.outputs = outputs
        self.err = err
        self.parallel: int = how.get("parallel", 4)
        self.json_out: bool = how.get("json_out", False)
        self.quiet: bool = how.get("quiet", False)
        config = self.run.config
        growing = None if get_protocol(config.protocol).planner else config.chunk_tokens  # InfMem reads anew
        self.folder = Folder(how.get("settle", SETTLE_SECONDS), growing)
        from ..runs.finding import Finder

        self.finder = Finder(paths, runs.sources, lambda note: self._tell(f"note: {visible(note)}"))
        self.looks = looks()
        self.writes = writes()
        self.paths = paths
        self.changed: set[str] = set()  # paths the file system named, not looked at yet
        self.whole = True  # look at everything next (the first pass)
        self.told: list[Callable[[], None]] = []  # what the view says once the outputs hold it
        self.runner: JobRunner | None = None
        self.view: WatchView | None = None
        self.changes: _Changes | None = None
        self.poll: float | None = None  # --poll: every known file's version is checked this often
        self.polled = 0.0  # when they last were (time.monotonic)
        self.log = TableLog(runs.store, paths, questions, self._warn)  # the table, for the page (memagent serve)

    def keep(self, poll: float | None) -> None:
        """The first pass, then a look at every change, until Ctrl-C (exit 130); the log of the table
        ends with it."""
        try:
            self._keep(poll)
        finally:
            self.log.end()

    def _keep(self, poll: float | None) -> None:
        from .views.watchview import WatchView

        self.view = None if self.quiet else WatchView(self.err, live=self.err.is_terminal, several=len(self.questions) > 1)
        changes = self.changes = _Changes(self.paths, poll)
        self.poll, self.polled = poll, time.monotonic()
        try:
            with sigterm_as_interrupt(), self.view if self.view is not None else _KeptView(None):
                self.cycle()
                self.runs.fresh = False  # --fresh is the first pass's: a change later reads what changed
                while True:
                    self.changed |= changes.wait(0 if self.changed else self._wait())
                    self.cycle()
        except (KeyboardInterrupt, Interrupted) as stop:
            self._flush()
            stopped = stop.stopped.traces if isinstance(stop, Interrupted) else []
            done = self.outputs.answers
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
        """Seconds until a document settles, or the whole folder is to be looked at again."""
        waits = [self.looks.wait(), NO_EVENT_WAIT]
        settles = self.folder.wait()
        if settles is not None:
            waits.append(settles)
        if self.poll is not None:
            waits.append(self.polled + self.poll - time.monotonic())
        return max(0.05, min(waits))

    # What is there now ----------------------------------------------------------------------

    def look(self) -> None:
        """The documents at the paths named since the last look (or all of them, where it is time
        to look at everything, or some changes may have been lost): each new, changed or gone."""
        if self.poll is not None and time.monotonic() >= self.polled + self.poll:
            self.changed |= self.finder.stale((d.at, d.stat) for d in self.folder.docs.values())
            self.polled = time.monotonic()
        changed, self.changed = self.changed, set()
        if self.whole or self.looks.due() or lost_some(len(changed)):
            started = time.monotonic()
            found = self.finder.everything()
            for each in found:
                self._found(each)
            for title in self.folder.others(f.source.title for f in found):
                self._gone(title)
            self.whole = False
            self.looks.done(time.monotonic() - started)
        elif changed:
            found = self.finder.at(changed)
            for each in found:
                self._found(each)
            there = {f.source.title for f in found}
            for path in changed:
                for title in self.folder.at(path):
                    if title not in there:
                        self._gone(title)

    def _found(self, found: Found) -> None:
        from ..core.jobs import Job

        state = self.folder.found(found.source, found.stat, found.mtime, found.place, found.at)
        if state is not None and self.view is not None:
            for question in self.questions:
                self.view.state(Job.each(found.source, question), state)

    def _gone(self, title: str) -> None:
        from ..core.jobs import Job

        doc = self.folder.gone(title)
        if doc is None:
            return
        jobs = [Job.each(doc.source, question) for question in self.questions]
        for job in jobs:
            self.outputs.drop(job.key)
            self.log.gone(job.key)
        if self.view is not None:  # said once the outputs have lost its rows
            view = self.view
            self.told += [functools.partial(view.gone, job) for job in jobs]

    # One look -------------------------------------------------------------------------------

    def cycle(self) -> None:
        """Looks at what changed; answers what is due (from the store, or by reading)."""
        from ..core.jobs import Job

        self.look()
        final, growing = self.folder.due()
        to_read: list[Job] = []
        plans: dict[int, Plan] = {}
        for doc, grows in [*((d, False) for d in final), *((d, True) for d in growing)]:
            self.folder.began(doc, grows)
            for question in self.questions:
                job = Job.each(doc.source, question)
                plan = self.runs.plan_job(job)
                found = plan.reused
                if found is not None:
                    self._row(job, {"document": job.title, **found.record}, grows, "answered before", found.answer, found.note())
                    continue
                job = dataclasses.replace(plan.job(job), growing=grows)
                plans[id(job)] = plan.so_far() if grows else plan  # an answer so far is no answer to the text there
                to_read.append(job)
                if self.view is not None and not grows:
                    self.view.state(job, "queued")
                self.log.row(job, "growing" if grows else "queued", None)
        self._flush()
        if to_read:
            self.read(to_read, plans)
            self._flush()

    def read(self, jobs: list[Job], plans: dict[int, Plan]) -> None:
        """The runs, `parallel` at a time where the engine takes several; one whose document changes
        while it is read is stopped (a growing one only where it did more than grow)."""
        from ..core.jobs import run_on

        runner = self._runner()
        started = {id(job): self.folder.docs[job.title].stat for job in jobs}
        cancels = {id(job): threading.Event() for job in jobs}
        live = self.view is not None and self.view.live is not None
        events = run_on(runner, jobs, stream_text=live, cancels=cancels)

        def recorder_for(job: Job) -> Recorder | None:
            return plans[id(job)].recorder(warn=self._warn)

        drive(
            self._watched(events, jobs, started, cancels),
            view=_KeptView(self.view),
            recorder_for=recorder_for,
            finished=self._finished,
        )

    def _watched(
        self,
        events: Iterator[tuple[Job, Event]],
        jobs: list[Job],
        started: dict[int, Stat],
        cancels: dict[int, threading.Event],
    ) -> Iterator[tuple[Job, Event]]:
        """The runs' events; where the file system names a document being read, its run is stopped
        if the document is no longer as it was when the batch began (or, growing, is not longer).
        Rows that came meanwhile are written when the pacer allows."""
        at: dict[str, list[Job]] = {}
        for job in jobs:
            at.setdefault(os.path.abspath(job.sources[0].path), []).append(job)
        assert self.changes is not None
        for job, event in events:
            yield job, event
            if self.told and self.writes.due():
                self._flush()
            named = self.changes.pending()
            if not named:
                continue
            self.changed |= named
            for path in named:
                for other in at.get(path, ()):
                    if not cancels[id(other)].is_set() and _changed(path, started[id(other)], other.growing):
                        cancels[id(other)].set()

    def _finished(self, done: Finished) -> None:
        from ..core.jobs import Cancelled, NothingNew

        job = done.job
        if isinstance(done.error, NothingNew):  # no complete chunk since its last reading: nothing to say
            self.folder.counted(job.title, done.error.size, done.error.tokens)
            return
        if isinstance(done.error, Cancelled):
            self.folder.stopped(job.title)
            if self.view is not None:
                self.view.state(job, "settling", "", "changed while it was read: read again once it settles")
            return
        if job.growing and done.result is None:  # read again once it settles; the error is that reading's
            if self.view is not None:
                self.view.state(job, "settling", None, f"not read as it grows ({done.error}): read once it settles")
            return
        if done.result is not None and done.result.sources:
            self.folder.counted(job.title, done.result.sources[0].get("size"), done.result.document_tokens)
        if job.title not in self.folder.docs:  # gone meanwhile
            return
        record = done.record(document=job.title)
        if done.result is None:
            self._row(job, record, False, "failed", record.get("error"), f"failed: {record.get('error')}")
        else:
            steps = len(done.result.steps)
            counted = f"{steps} step{'s' if steps != 1 else ''}"
            if job.growing:
                self._row(job, record, True, "growing", done.result.answer, f"so far, from {counted}: still being written")
            else:
                self._row(job, record, False, "answered", done.result.answer, f"answered in {counted}")
        if self.writes.due():
            self._flush()

    def _row(self, job: Job, record: dict[str, Any], growing: bool, state: str, said: Any, line: str) -> None:
        """A row's record to the outputs, its line said once they hold it."""
        record = {**record, "growing": growing}
        self.outputs.put(job.key, record)
        if self.json_out and not record.get("error"):
            print(json_text(record, indent=None), flush=True)
        if self.view is not None:
            self.told.append(functools.partial(self.view.state, job, state, said, line))
        self.log.row(job, state, record)

    def _flush(self) -> None:
        """The outputs written where a row came or went, then what the view waited to say."""
        from ..core.jobs import Job

        if self.outputs.dirty:
            started = time.monotonic()
            self.outputs.write(Job.each(doc.source, q).key for doc in self.folder.ordered() for q in self.questions)
            self.writes.done(time.monotonic() - started)
        self.log.flush()
        told, self.told = self.told, []
        for tell in told:
            tell()

    def _runner(self) -> JobRunner:
        from ..core.jobs import JobRunner

        if self.runner is None:
            self._tell("loading the model")
            self.runner = JobRunner(
                **self.run.args(), sources=self.runs.sources, parallel=self.parallel, questions=self.questions, count=None
            )
        return self.runner

    def _warn(self, message: str) -> None:
        self._tell(f"warning: {visible(message)}")

    def _tell(self, line: str) -> None:
        if self.view is not None:  # none with --quiet
            self.view.tell(line)


def _changed(path: str, before: Stat, growing: bool) -> bool:
    """Whether the file at `path` is no longer the version `before` (for a growing reading: is not
    that version grown longer, which leaves its complete chunks as they were)."""
    try:
        info = os.stat(path)
    except OSError:
        return True
    if growing and info.st_size > before.size:
        return False
    return (info.st_size, info.st_mtime_ns) != before
