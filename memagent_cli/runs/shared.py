"""One loaded model serving runs in worker threads, for the front ends that stay up (the MCP server,
the page): `SharedModel` loads the model on first use (core.jobs.JobRunner: the model and its engine,
opened once) and shares it with every call. `SharedModel.run_one` takes one `RunRequest` run to its
`Outcome`: planned by the run layer (Runs.plan: the stored answer given again, reading nothing,
unless `fresh`; an earlier run over an earlier version of the documents gone on from), its events
fed to its Recorder (traced step by step, resumable) and turned into what the caller is told as it
goes (`Told`: a step done, the memory's text, a note). A cancelled run's `cancel` event is set; its
event generator is closed at the next event (every token is one), recorded as interrupted. A new
run with the same question, documents (unchanged), model and settings as an interrupted one
continues it instead of starting over.

How many runs go at once is the engine's (`SharedModel.slots`): one on the embedded engine on a CPU,
several where it batches (a GPU) or on a served engine; the front end queues the others in order.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..core import events as ev
from ..core.config import AgentConfig
from ..core.jobs import Job
from ..core.pipeline import SourceOptions
from ..errors import MemagentError

if TYPE_CHECKING:
    from ..core.jobs import JobRunner
    from ..ingest.base import OcrMode
    from ..traces.found import Reused
    from ..traces.recorder import Recorder
    from ..traces.store import TraceStore
    from .setup import RunSetup

REPLAY_TELL_SECONDS = 0.5  # steps taken from an interrupted run go fast: tell of them at most this often
ETA_WINDOW = 50  # the last steps whose pace predicts the rest


@dataclass(frozen=True)
class Told:
    """What a run tells while it goes, from its worker thread. `kind`: "step" (step `step` of
    `total` done, `tokens` read, `eta` seconds left), "prompt" (step `step` has read `read` of its
    prompt's tokens: a CPU takes tens of seconds before it writes), "memory" (`text`, the memory after step
    `step`), "answer" (the answer is being written), "note" (`text` at `level`), "traced" (`text`:
    the id of the run's trace, once it is recorded)."""

    run: int
    kind: str
    step: int = 0
    total: int | None = None
    tokens: int = 0
    eta: float | None = None
    text: str = ""
    level: str = "info"
    read: tuple[int, int] | None = None  # kind "prompt": (read, of) tokens of step `step`'s prompt


@dataclass(frozen=True)
class RunRequest:
    """One run a call asks for: its job and settings, what names it to the host (`label`, for a
    call of several runs), the stored run it continues (`resume`), if any, and whether it reads
    again whatever the traces hold (`fresh`)."""

    job: Job
    config: AgentConfig
    label: str = ""
    resume: Mapping[str, Any] | None = None
    fresh: bool = False  # read again: no answer from the traces, no earlier run continued
    turn: bool = False  # a turn of a conversation (a call of one question): of `conversation`, else the first of a new one
    conversation: str | None = None


@dataclass(frozen=True)
class Outcome:
    """How a planned run ended: its `result` (read now), or the stored answer given again (`reused`);
    the trace it is kept in (None where it could not be written); the steps it took from the
    interrupted run it continued (`resumed`); its conversation and turn (Recorder.conversation_record)."""

    result: ev.RunResult | None
    reused: Reused | None
    trace: str | None
    resumed: int = 0
    conversation: Mapping[str, Any] | None = None


class SharedModel:
    """The model a server runs, loaded on first use and shared by every call: made with `setup`,
    documents read with `ocr`, up to `parallel` runs at once where the engine takes several."""

    def __init__(self, setup: RunSetup, *, ocr: OcrMode = "auto", parallel: int = 4):
        self.setup, self.ocr, self.parallel = setup, ocr, parallel
        self._runner: JobRunner | None = None
        self._load = threading.Lock()
        self._busy: set[str] = set()  # ids of stored runs being continued now: not taken twice
        self._busy_lock = threading.Lock()

    @property
    def loaded(self) -> JobRunner | None:
        return self._runner

    def runner(self) -> JobRunner:
        """The loaded model, loading it now if no call has yet (blocking: call from a thread)."""
        from ..core.jobs import JobRunner

        with self._load:
            if self._runner is None:
                self._runner = JobRunner(**self.setup.args(), sources=SourceOptions(ocr=self.ocr), parallel=self.parallel)
            return self._runner

    @property
    def slots(self) -> int:
        return self._runner.slots if self._runner is not None else 1

    def close(self) -> None:
        with self._load:
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    def run_one(self, plan: RunRequest, *, index: int, cancel: threading.Event, tell: Callable[[Told], None]) -> Outcome | None:
        """The planned run to its outcome; None when `cancel` stopped it (recorded as interrupted).
        Raises MemagentError when it fails (recorded as failed). With `plan.turn`, the run is a turn of
        `plan.conversation` (its next one; a new conversation where None), answered from the store or not."""
        from ..traces.store import TraceStore
        from .planning import Runs

        job, config, resume, turn = plan.job, plan.config, plan.resume, plan.turn
        runner = self.runner()
        store = TraceStore()
        claimed: str | None = None

        def warn(message: str) -> None:
            tell(Told(index, "note", text=message, level="warning"))

        runs = Runs(store, self.setup, SourceOptions(ocr=self.ocr), plan.fresh, warn)
        try:
            planned = runs.plan(job.question, job.sources, config=config, history=job.history) if resume is None else None
            found = planned.reused if planned is not None else None
            if found is not None:
                tell(Told(index, "note", text=found.note(), level="info"))
                if turn:
                    runs.turn_of_reused(found, plan.conversation, job.question)
                return Outcome(None, found, found.run, conversation=found.record.get("conversation"))
            if resume is None:
                resume = self._interrupted_like(store, job, config, runner)
            if resume is not None:
                claimed = self._claim(resume["id"])
                job = dataclasses.replace(job, done_steps=tuple(resume["steps"]))
            elif planned is not None:
                job = planned.job(job)
            recorder = runs.recorder(
                key=planned.key if planned is not None and resume is None else None,
                resume=resume,
                turn=turn and resume is None,
                conversation=plan.conversation,
                asked=job.question,
            )
            assert recorder is not None  # a store is given
            result = _drive(runner, job, config, recorder, cancel, _Tracker(index, tell))
            if result is None:
                return None
            trace = recorder.run_id if recorder.failed_write is None else None
            resumed = len(resume["steps"]) if resume is not None else 0
            return Outcome(result, None, trace, resumed, recorder.conversation_record())
        finally:
            if claimed is not None:
                with self._busy_lock:
                    self._busy.discard(claimed)
            store.close()

    def _claim(self, run_id: str) -> str:
        with self._busy_lock:
            if run_id in self._busy:
                raise MemagentError(f"Run {run_id[:8]} is being continued by another call.", "Wait for that call to end.")
            self._busy.add(run_id)
        return run_id

    def _interrupted_like(self, store: TraceStore, job: Job, config: AgentConfig, runner: JobRunner) -> dict[str, Any] | None:
        """The newest interrupted run this run would repeat (same question, documents, model and
        settings, documents unchanged since), to continue rather than start over; None if none."""
        from ..traces.recorder import resume_plan

        question = job.question.strip()
        wanted = [(os.path.abspath(s.path), s.title, tuple(s.member)) for s in job.sources]
        for run in store.list_runs(status="interrupted", limit=200):
            if run["question"] != question or not self.same_setup(run, config, runner):
                continue
            had = [(s.get("abspath"), s.get("title"), tuple(s.get("member") or ())) for s in run["sources"]]
            if had != wanted:
                continue
            with self._busy_lock:
                if run["id"] in self._busy:
                    continue
            try:
                return resume_plan(store, run["id"])
            except MemagentError:  # a document changed since: a new run it is
                continue
        return None

    def same_setup(self, run: Mapping[str, Any], config: AgentConfig | None, runner: JobRunner) -> bool:
        """Whether a stored run was made with this server's model and engine (and, given
        `config`, these settings), so this server can continue it."""
        from ..core.keys import differences

        settings = run.get("settings") or {}
        s = self.setup
        if config is not None and differences(settings, config.to_dict()):
            return False
        if settings.get("engine") != (dict(s.engine_record) if s.engine_record else None):
            return False
        if settings.get("chat_template") != (dict(s.template_record) if s.template_record else None):
            return False
        if settings.get("ocr", "auto") != self.ocr:
            return False
        stored, here = str(run["model"]["path"]), runner.prep.model_path
        return stored == here or (os.path.isfile(here) and os.path.realpath(stored) == os.path.realpath(here))


def _drive(
    runner: JobRunner, job: Job, config: AgentConfig, recorder: Recorder, cancel: threading.Event, tracker: _Tracker
) -> ev.RunResult | None:
    """A run's events through the recorder and the tracker; None when cancelled."""
    events = runner.run(job, config)  # raises before the run starts when the budgets do not fit
    started = False
    result: ev.RunResult | None = None
    try:
        for event in events:
            if cancel.is_set():
                close = getattr(events, "close", None)  # a generator: stops within this token, lets the slot go
                try:
                    if close is not None:
                        close()
                except Exception:  # the engine's cleanup failing on an early stop must not cost the run its trace
                    pass
                recorder.stopped("interrupted")
                return None
            recorder.handle(event)
            if isinstance(event, ev.RunStarted):
                started = True
                if recorder.run_id is not None:
                    tracker.tell(Told(tracker.index, "traced", text=recorder.run_id))
            tracker.handle(event)
            if isinstance(event, ev.RunFinished):
                result = event.result
    except MemagentError as exc:
        if started:
            recorder.stopped("failed", str(exc))
        raise
    except BaseException as exc:  # a bug: the run is kept as failed (resumable); the SDK reports it
        if started:
            recorder.stopped("failed", f"internal error: {type(exc).__name__}: {exc}")
        raise
    if result is None:  # pragma: no cover - the core's events always end in RunFinished
        raise MemagentError("The run ended without an answer.")
    return result


class _Tracker:
    """Turns a run's events into what the host is told: each step done with the tokens read and
    an estimate of the time left, the memory after it, notes."""

    def __init__(self, index: int, tell: Callable[[Told], None]):
        self.index, self.tell = index, tell
        self.total: int | None = None
        self.tokens = 0
        self.began: dict[int, float] = {}
        self.paces: collections.deque[float] = collections.deque(maxlen=ETA_WINDOW)
        self.last_replay = 0.0

    def handle(self, event: ev.Event) -> None:
        now = time.monotonic()
        if isinstance(event, ev.Notice):
            self.tell(Told(self.index, "note", text=event.message, level="warning" if event.level == "warning" else "info"))
        elif isinstance(event, ev.DocumentRead):
            self.total = event.steps
        elif isinstance(event, ev.StepStarted):
            self.total = event.total_steps or self.total
            self.began[event.index] = now
        elif isinstance(event, ev.StepFinished):
            step = event.step
            self.tokens = step.chunk.end_token
            if event.replayed:
                if now - self.last_replay < REPLAY_TELL_SECONDS:
                    return
                self.last_replay = now
            else:
                self.paces.append(now - self.began.pop(step.index, now))
            eta = None
            if self.total is not None and self.paces:
                pace = sum(self.paces) / len(self.paces)
                eta = pace * (self.total - step.index + 1)  # the steps left, and the answer
            self.tell(Told(self.index, "step", step.index, self.total, self.tokens, eta))
            if not event.replayed:
                self.tell(Told(self.index, "memory", step.index, self.total, text=step.memory))
        elif isinstance(event, ev.PromptProgressed) and event.step > 0 and event.done < event.total:
            self.tell(Told(self.index, "prompt", event.step, self.total, self.tokens, read=(event.done, event.total)))
        elif isinstance(event, ev.AnswerStarted):
            self.tell(Told(self.index, "answer", self.total or 0, self.total, self.tokens))
        elif isinstance(event, ev.StepPlanned):  # InfMem: each step's search or STOP, as the live view says it
            self.tell(Told(self.index, "note", event.index, self.total, text=f"plan {event.index}: {event.decision.describe()}"))
