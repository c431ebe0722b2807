"""The server's one model, and one run on it (`Planned`, as a call asks for it) driven to its
record, in a worker thread.

`SharedModel` loads the model on first use (core.jobs.JobRunner: the model and its engine, opened
once) and shares it with every call. `SharedModel.run_one` drives one run: its events are fed to a
Recorder (so the run is traced, step by step, and resumable) and turned into what the host is
told as it goes (`Told`: a step done, the memory's text, a note); a cancelled call sets its
`cancel` event, and the run's event generator is closed at the next event (every token is one),
recorded as interrupted. A new run with the same question, documents (unchanged), model and
settings as an interrupted one continues it instead of starting over; as a finished one, its
answer is given again, reading nothing (unless the call asks `fresh`); as a finished one over an
earlier version of the documents, it goes on from where they changed (core/reuse.py).

How many runs go at once is the engine's (`SharedModel.slots`): one on the embedded engine on a CPU,
several where it batches (a GPU) or on a served engine; server.py queues the others in order.
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
from .excerpt import cite
from .settings import ServerSettings

if TYPE_CHECKING:
    from ..core.jobs import JobRunner
    from ..core.reuse import AnswerKey
    from ..ingest.sources import Source
    from ..traces.recorder import Recorder
    from ..traces.reuse import Reused
    from ..traces.store import TraceStore

REPLAY_TELL_SECONDS = 0.5  # steps taken from an interrupted run go fast: tell of them at most this often
ETA_WINDOW = 50  # the last steps whose pace predicts the rest


@dataclass(frozen=True)
class Told:
    """What a run tells while it goes, from its worker thread. `kind`: "step" (step `step` of
    `total` done, `tokens` read, `eta` seconds left), "prompt" (step `step` has read `read` of its
    prompt's tokens: a CPU takes tens of seconds before it writes), "memory" (`text`, the memory after step
    `step`), "answer" (the answer is being written), "note" (`text` at `level`)."""

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
class Planned:
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


class SharedModel:
    """The model a server runs, loaded on first use and shared by every call."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
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
                s = self.settings
                self._runner = JobRunner(
                    model=s.model,
                    config=s.config,
                    engine=s.engine,
                    sources=SourceOptions(ocr=s.ocr),
                    parallel=s.parallel,
                )
            return self._runner

    @property
    def slots(self) -> int:
        return self._runner.slots if self._runner is not None else 1

    def close(self) -> None:
        with self._load:
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    def run_one(
        self, plan: Planned, *, index: int, cancel: threading.Event, tell: Callable[[Told], None]
    ) -> dict[str, Any] | None:
        """The planned run to its record (see `record`); None when `cancel` stopped it (recorded as
        interrupted). Raises MemagentError when it fails (recorded as failed). Unless `plan.fresh`,
        an answer the traces have is given again, and an earlier run over an earlier version of the
        documents is gone on from. With `plan.turn`, the run is a turn of `plan.conversation` (its
        next one; a new conversation where None), answered from the store or not."""
        from ..core.protocols import get as get_protocol
        from ..traces.reuse import continuation, reused_answer
        from ..traces.store import TraceStore

        job, config, resume, fresh, turn = plan.job, plan.config, plan.resume, plan.fresh, plan.turn
        runner = self.runner()
        store = TraceStore()
        claimed: str | None = None

        def warn(message: str) -> None:
            tell(Told(index, "note", text=message, level="warning"))

        try:
            key = self._key(job, config) if resume is None else None
            found = reused_answer(store, key, job.sources, warn) if key is not None and not fresh else None
            if found is not None:
                tell(Told(index, "note", text=found.note(), level="info"))
                answered = reused_record(found, job, runner)
                if turn:
                    cid, number = store.add_turn(plan.conversation, found.run, job.question)
                    answered["conversation"] = {"id": cid, "turn": number}
                return answered
            if resume is None:
                resume = self._interrupted_like(store, job, config, runner)
            if resume is not None:
                claimed = self._claim(resume["id"])
                job = dataclasses.replace(job, done_steps=tuple(resume["steps"]))
            elif key is not None and not fresh and not get_protocol(config.protocol).planner:
                job = dataclasses.replace(job, continued=continuation(store, key))
            recorder = self._recorder(store, resume, warn, key)
            if turn and resume is None:
                recorder.conversation, recorder.asked = plan.conversation, job.question
            result = _drive(runner, job, config, recorder, cancel, _Tracker(index, tell))
            if result is None:
                return None
            trace = recorder.run_id if recorder.failed_write is None else None
            return {
                **record(result, trace, len(resume["steps"]) if resume is not None else 0),
                "conversation": recorder.conversation_record(),
            }
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

    def _recorder(
        self, store: TraceStore, resume: Mapping[str, Any] | None, warn: Callable[[str], None], key: AnswerKey | None
    ) -> Recorder:
        from ..traces.recorder import Recorder

        s = self.settings
        return Recorder(store, warn=warn, resume=resume, engine=s.engine_record, chat_template=s.template_record, key=key)

    def _key(self, job: Job, config: AgentConfig) -> AnswerKey | None:
        """The run's keys (core/reuse.py); None where a document cannot be read to hash it (the run says why)."""
        from ..core.reuse import answer_key

        s = self.settings
        try:
            return answer_key(
                job.question, config, model=s.model, engine=s.engine, sources=job.sources, ocr=s.ocr, history=job.history
            )
        except OSError:
            return None

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
        from ..core.reuse import differences

        settings = run.get("settings") or {}
        s = self.settings
        if config is not None and differences(settings, config.to_dict()):
            return False
        if settings.get("engine") != (dict(s.engine_record) if s.engine_record else None):
            return False
        if settings.get("chat_template") != (dict(s.template_record) if s.template_record else None):
            return False
        if settings.get("ocr", "auto") != s.ocr:
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
            if isinstance(event, ev.RunStarted):
                started = True
            recorder.handle(event)
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


def record(result: ev.RunResult, trace: str | None, resumed: int = 0) -> dict[str, Any]:
    """A run as the `ask` tool returns it: the answer, its evidence with the passage each step
    read, and the trace to show or continue it."""
    quotes = [q.to_dict() for q in result.quotes]
    titles = [str(s.get("title") or s.get("path")) for s in result.sources]
    # Where the answer's sentences were found, the evidence is those sentences, exactly as the
    # document has them; else the passage around what each evidence step added to the memory.
    evidence = (
        [{"step": q.step, "source": titles[q.source], "location": q.location, "excerpt": q.text} for q in result.quotes]
        if quotes
        else [cite(step) for step in result.evidence]
    )
    return {
        "question": result.question,
        "answer": result.answer,
        **({"data": result.data} if result.config.answer_schema else {}),
        "evidence": evidence,
        "quotes": quotes,
        "steps": len(result.steps),
        "trace": trace,
        "document_tokens": result.document_tokens,
        "seconds": result.timings.get("total_seconds"),
        "resumed_steps": resumed,
        "reused_from": None,
        "continued_from": result.continued_from,
    }


def reused_record(found: Reused, job: Job, runner: JobRunner) -> dict[str, Any]:
    """An answer the traces had, as the `ask` tool returns a run (`record`), with `reused_from`."""
    stored = found.record
    titles = {s["path"]: str(s.get("title") or s["path"]) for s in stored.get("sources") or []}
    quotes = stored.get("quotes") or []
    evidence = (
        [
            {"step": q["step"], "source": titles.get(q["source"], q["source"]), "location": q["location"], "excerpt": q["text"]}
            for q in quotes
        ]
        if quotes
        else _cited_again(stored, job, runner)
    )
    return {
        "question": stored["question"],
        "answer": stored["answer"],
        **({"data": stored.get("data")} if (stored.get("settings") or {}).get("answer_schema") else {}),
        "evidence": evidence,
        "quotes": quotes,
        "steps": len(stored.get("steps") or []),
        "trace": found.run,
        "document_tokens": stored.get("document_tokens"),
        "seconds": (stored.get("timings") or {}).get("total_seconds"),
        "resumed_steps": 0,
        "reused_from": stored["reused_from"],
        "continued_from": stored.get("continued_from"),
        "conversation": stored.get("conversation"),
    }


def _cited_again(stored: Mapping[str, Any], job: Job, runner: JobRunner) -> list[dict[str, Any]]:
    """A reused answer's evidence excerpts (excerpt.cite), where it has no quotes: the documents
    are cut into the same chunks again (their text is the stored run's) up to the last evidence
    step; nothing is sent to the model."""
    from ..core.pipeline import chunk_stream
    from ..core.protocols import get as get_protocol

    wanted = {int(e["step"]) for e in stored.get("evidence") or []}
    if not wanted:
        return []
    memories = {int(s["index"]): str(s["memory"]) for s in stored.get("steps") or []}
    initial = get_protocol(str((stored.get("settings") or {}).get("protocol") or "memagent")).initial_memory
    prep = dataclasses.replace(runner.prep, sources=list(job.sources))
    chunks, _ = chunk_stream(prep, int(stored["chunk_tokens"]), runner.sources, lambda _: None)
    cited = []
    try:
        for chunk in chunks:
            if chunk.index in wanted:
                memory, before = memories[chunk.index], memories.get(chunk.index - 1, initial)
                step = ev.StepRecord(chunk.index, chunk, memory, before, 0, 0, 0, 0, "", 0.0, 0.0)
                cited.append(cite(step))
            if chunk.index >= max(wanted):
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return cited


def stored_job(run: Mapping[str, Any], sources: list[Source]) -> Job:
    """The job that continues a stored run from its last step."""
    return Job(
        key=str(run["id"]),
        question=str(run["question"]),
        sources=tuple(sources),
        title=sources[0].title if len(sources) == 1 else str(run["id"])[:8],
        done_steps=tuple(run["steps"]),
    )
