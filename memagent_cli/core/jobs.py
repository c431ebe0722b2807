"""Many independent MemAgent runs on one engine: a question per document (`ask --each`), the
lines of a job file (`batch`), the items of a data set (`eval`). This is the one scheduler they
share.

A `Job` names its input (sources already found, paths found when it starts, or text given inline)
and one question; each is its own run, with its own memory and its own trace. `run_jobs` loads the
model once and drives the jobs through scheduler.run_all with as many in flight as the engine takes
calls at once (`SharedEngine.slots`):
- the embedded engine on a CPU takes one call at a time, and batching measured no faster there
  (PERFORMANCE.md B8), so jobs run one after another, in this thread: each answer lands as its run
  ends, not all at the end;
- the embedded engine batching on a GPU takes a call per sequence: that many runs share its context;
- a served engine (one server or a pool) takes `parallel` calls; a pool spreads them by load.
A job's document is read when its run starts and let go when it ends, so a job of 10,000 documents
holds only the runs in flight, whatever is waiting.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence, TypedDict

from ..errors import EngineGone, MemagentError
from ..ingest.base import OcrProgress
from ..ingest.sources import Segment, Source
from ..model.backends import EngineOptions
from .agent import check_question, plan_context
from .chunking import Chunk, IngestStats, iter_chunks, layout
from .config import AgentConfig
from .events import Event, Notice, OcrProgressed, RunFailed, RunFinished, TokenText
from .keys import Continued
from .notes import noted
from .pipeline import (
    Prepared,
    SharedEngine,
    SourceOptions,
    chunk_stream,
    find_sources,
    open_shared_engine,
    prepare_model,
    run_question,
)
from .protocols import of_model
from .readahead import ReadAhead
from .scheduler import RunError, run_all
from .schema import AnswerSchema

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11


@dataclass(frozen=True)
class Job:
    """One run: a question over one input.

    `key` identifies the job within its job (a `batch` line's custom_id, a document and a question
    of `--each`): a served pool's chain key is derived from it, and a trace is found again by it.
    The input is `sources` (found already), else `paths` (found when the run starts, as `ask`
    finds them), else `context` (text given inline). `title` is what views call the job.
    `done_steps` are an interrupted run's stored steps: it goes on from there; `continued`, an
    earlier run over an earlier version of its documents, whose steps it takes where their chunks
    are the same (reuse.Continued). `instructions` and `schema`, when given, say how this job's
    answer is written, over the config's (see AgentConfig.instructions and .answer_schema).
    `growing`: its one document is still being written (`watch`): its complete chunks are read, the
    last held back, and the answer is the answer so far; where none is new since `continued`, it
    ends in NothingNew before it starts."""

    key: str
    question: str
    sources: tuple[Source, ...] = ()
    paths: tuple[str, ...] = ()
    context: str | None = None
    title: str = ""
    done_steps: tuple[Mapping[str, Any], ...] = ()
    instructions: str | None = None
    schema: AnswerSchema | None = None
    continued: Continued | None = None
    history: tuple[tuple[str, str], ...] = ()  # the earlier turns of the conversation it follows (question, answer)
    growing: bool = False

    @classmethod
    def each(cls, document: Source, question: str) -> Job:
        """`--each`'s run of `question` over one document (the CLI's and the MCP ask tool's): keyed
        by the document's title and the question, so both find the same stored run again."""
        return cls(key=f"{document.title}\n{question}", question=question, sources=(document,), title=document.title)

    @property
    def stand_in(self) -> Source:
        """What a job given its text inline (`context`) reads, as its views, record and keys name it."""
        return Source(path=self.title or self.key, title=self.title or self.key, kind="text", size=None)

    @property
    def chain_key(self) -> str:
        """The key sent with every request of this run: stable across reruns, ASCII, and saying
        nothing of the document or question."""
        return hashlib.sha256(self.key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def job_context_size(prep: Prepared, config: AgentConfig, engine: EngineOptions, questions: Sequence[str] = ()) -> int:
    """The embedded engine's context for jobs: enough for the longest of `questions`, or, when the
    questions are not known up front (a job file read as it goes), for the longest question
    allowed (config.question_tokens). 0 for a served engine, which sizes its own."""
    if engine.served or prep.chat is None:
        return 0
    chat = prep.chat
    if questions:
        return max(plan_context(chat, prep.tokenizer, q, config, engine.n_ctx) for q in questions)
    if engine.n_ctx is not None:
        return plan_context(chat, prep.tokenizer, "?", config, engine.n_ctx)
    return plan_context(chat, prep.tokenizer, "?", config, None) + config.question_tokens


def run_context(model_path: str) -> tuple[str, int]:
    """(protocol, tokens): the context a run of this model makes with its protocol's budgets and a
    short question (what `doctor` checks the fit for)."""
    prep = prepare_model(model_path)
    config = AgentConfig.with_protocol(of_model(model_path))
    assert prep.chat is not None  # read from the GGUF
    return config.protocol, plan_context(prep.chat, prep.tokenizer, "?", config, None)


class _Needed(TypedDict):
    model: str | None  # the GGUF (a name or a path); None: a served engine's own vocabulary
    config: AgentConfig
    engine: EngineOptions


class Opening(_Needed, total=False):
    """What a JobRunner opens with, the keywords it and `run_jobs` take. Where one is left out,
    documents are read with SourceOptions(), one run goes at a time, and neither the jobs'
    questions nor their number is known up front."""

    sources: SourceOptions  # how documents are read
    parallel: int  # runs at once, where the engine takes that many calls (see the module docstring)
    questions: Sequence[str]  # every job's question, when known: sizes the embedded engine's context exactly
    count: int | None  # the number of jobs, when known: a batching engine reserves no sequence that no job will use


class JobRunner:
    """A loaded model that runs jobs: what `run_jobs` opens once for a whole job, and what a
    long-lived server (`memagent mcp`) keeps between calls. `slots` runs may go at once (see the
    module docstring); `run` gives one job's events. Setting `stop` ends every call in flight."""

    def __init__(self, *, stop: threading.Event | None = None, **opening: Unpack[Opening]):
        engine = opening["engine"]
        self.prep = prepare_model(opening["model"], engine)
        self.config = opening["config"]
        self.sources = opening.get("sources", SourceOptions())
        self.served = engine.served
        self.n_ctx = job_context_size(self.prep, self.config, engine, opening.get("questions", ()))
        self.stop = stop if stop is not None else threading.Event()
        parallel = opening.get("parallel", 1)
        self.shared = open_shared_engine(self.prep, self.n_ctx, engine, parallel, self.stop, jobs=opening.get("count"))

    @property
    def slots(self) -> int:
        return self.shared.slots

    def run(self, job: Job, config: AgentConfig | None = None) -> Iterator[Event]:
        """One job's events, from RunStarted to RunFinished; raises when it fails. `config` (budgets,
        sampling) replaces the runner's for this job, if the embedded engine's context holds it."""
        config = config or self.config
        if config is not self.config and self.prep.chat is not None and not self.served:
            question = check_question(job.question, self.prep.tokenizer, config, job.history)
            plan_context(self.prep.chat, self.prep.tokenizer, question, config, self.n_ctx)  # raises when it does not fit
        return noted(_run_job(job, self.prep, self.shared, config, self.sources))

    def close(self) -> None:
        self.stop.set()
        self.shared.close()


def run_jobs(jobs: Iterable[Job], *, stream_text: bool = True, **opening: Unpack[Opening]) -> Iterator[tuple[Job, Event]]:
    """Runs every job, yielding (job, event) as events come; each job's events run from RunStarted
    to RunFinished, or RunFailed when it failed (the others go on). `jobs` is read as runs start.

    `opening` is what the runner opens with (see `Opening`). `stream_text` False leaves out the
    TokenText events (the text as it is written), for a caller that shows none: with hundreds of
    runs in flight, handing each token over costs the client more than the step does (B10). Ctrl-C
    (KeyboardInterrupt) stops every run; what each recorded is the caller's to keep. When the
    engine is gone for good (EngineGone) the whole job stops with it."""
    runner: JobRunner | None = None
    try:
        runner = JobRunner(**opening)
        yield from run_on(runner, jobs, stream_text=stream_text)
    finally:
        if runner is not None:
            runner.close()


class NothingNew(Exception):
    """A growing job (Job.growing) with no complete chunk that its continued run did not read: no
    run is started or recorded. `tokens`: the tokens of the text read, the held-back end included;
    `size`: the file's bytes when it was found (their ratio says how much more makes a chunk)."""

    def __init__(self, tokens: int, size: int | None):
        super().__init__("no complete chunk is new yet")
        self.tokens = tokens
        self.size = size


class Cancelled(Exception):
    """A run stopped from outside before its end, for a reason of the caller's (`watch`: its
    document changed while it was read): its RunFailed carries this, and its trace is resumable."""


def run_on(
    runner: JobRunner,
    jobs: Iterable[Job],
    *,
    stream_text: bool = True,
    cancels: Mapping[int, threading.Event] | None = None,
) -> Iterator[tuple[Job, Event]]:
    """`run_jobs` on a runner already open, which stays open (a caller that keeps its model between
    batches of runs: `watch`). `cancels`, by a job's id: setting one stops that run at its next
    event (RunFailed with Cancelled), the others going on."""
    running: dict[int, Job] = {}  # only the jobs in flight
    runner.stop.clear()  # a batch before this one ended by setting it

    def start() -> Iterator[Callable[[], Iterator[Event]]]:
        for k, job in enumerate(jobs):
            running[k] = job
            run = functools.partial(runner.run, job) if stream_text else functools.partial(_without_text, runner, job)
            cancel = cancels.get(id(job)) if cancels is not None else None
            yield run if cancel is None else functools.partial(_cancellable, run, cancel)

    for index, event in run_all(start(), workers=runner.slots, stop=runner.stop):
        job = running[index]
        if isinstance(event, RunError):
            if isinstance(event.error, EngineGone):  # every run to come would fail alike: the job stops
                raise event.error
            del running[index]
            yield job, RunFailed(event.error)
            continue
        if isinstance(event, RunFinished):
            del running[index]
        yield job, event


def _without_text(runner: JobRunner, job: Job) -> Iterator[Event]:
    events = runner.run(job)
    try:
        for event in events:
            if not isinstance(event, TokenText):
                yield event
    finally:  # now, not when collected: the run's reading thread and engine call end with it
        close = getattr(events, "close", None)
        if close is not None:
            close()


def _cancellable(run: Callable[[], Iterator[Event]], cancel: threading.Event) -> Iterator[Event]:
    """A run's events until `cancel` is set: then its generator is closed (the engine call in flight
    ends at once) and Cancelled raised."""
    events = run()
    try:
        for event in events:
            if cancel.is_set():
                raise Cancelled("stopped: its document changed while it was read")
            yield event
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


def job_config(job: Job, config: AgentConfig) -> AgentConfig:
    """The settings of `job`'s run: the runner's, with the job's own instructions and schema."""
    if job.instructions is not None:
        config = dataclasses.replace(config, instructions=job.instructions.strip())
    if job.schema is not None:
        config = dataclasses.replace(config, answer_schema=job.schema.to_config(), answer_schema_multi=job.schema.multi)
    return config


def _run_job(job: Job, prep: Prepared, shared: SharedEngine, config: AgentConfig, options: SourceOptions) -> Iterator[Event]:
    """One job's run, in the worker that took it: find and read its input, then the agent loop."""
    started = time.perf_counter()
    notes: list[Event] = []  # what reading told since the last event: passed on in order
    config = job_config(job, config)
    question = check_question(job.question, prep.tokenizer, config, job.history)
    if config.final_instructions():
        check_question(question + "\n" + config.final_instructions(), prep.tokenizer, config)  # both share its budget
    if job.sources:
        found = list(job.sources)
    elif job.context is None:
        found = find_sources(job.paths, options, lambda message: notes.append(Notice(message)))
    else:
        found = [job.stand_in]
    job_prep = dataclasses.replace(prep, sources=found, notices=[])
    if job.growing:  # read first: a run starts only where there is a new complete chunk
        stream, stats = _job_chunks(job, job_prep, config, options, notes)
        complete = list(stream)
        if not _new_chunk(complete, job.continued):
            raise NothingNew(stats.document_tokens + stats.held_tokens, found[0].size if found else None)
        stream = iter(complete)
    yield job_prep.started(question, config, options.ocr, job.question.strip() if job.history else "")
    yield shared.loaded()
    if not job.growing:
        stream, stats = _job_chunks(job, job_prep, config, options, notes)
    # Read ahead in a thread, as `ask` does: reading overlaps the model's work, and the run's
    # total steps are known early (progress says "step k of N" and an ETA from the start).
    chunks = ReadAhead(stream)
    try:
        while not chunks.wait(0.2):
            yield from _drain(notes)
        if chunks.peek() is None:
            yield from _drain(notes)
            raise MemagentError(
                f"There is no text to read in {job.title or job.key}.", "Check the file; the notes above say what was skipped."
            )
        yield from _drain(notes)
        events = run_question(
            question,
            chunks,
            stats,
            job_prep,
            shared.for_chain(job.chain_key),
            config,
            done_steps=tuple(job.done_steps),
            started=started,
            continued=job.continued,
        )
        for event in events:
            yield from _drain(notes)
            yield event
    finally:
        chunks.close()


def _job_chunks(
    job: Job, prep: Prepared, config: AgentConfig, options: SourceOptions, notes: list[Event]
) -> tuple[Iterator[Chunk], IngestStats]:
    if job.context is None:

        def on_ocr(progress: OcrProgress) -> None:
            notes.append(OcrProgressed(progress.title, progress.done, progress.total, progress.seconds))

        told = dataclasses.replace(options, on_ocr=on_ocr)
        return chunk_stream(prep, config.chunk_tokens, told, lambda message: notes.append(Notice(message)), job.growing)
    context = job.context
    stats = IngestStats()

    def read(_source: Source) -> Iterator[Segment]:
        yield Segment(0, context, 0)

    chunks = iter_chunks(layout(prep.sources, read), prep.tokenizer, config.chunk_tokens, prep.sources, stats)
    return chunks, stats


def _new_chunk(chunks: Sequence[Chunk], continued: Continued | None) -> bool:
    """Whether a growing job's complete chunks hold one that its continued run did not read."""
    if not chunks:
        return False
    if continued is None:
        return True
    steps = continued.steps
    return len(chunks) > len(steps) or any(chunk.digest != step.get("digest") for chunk, step in zip(chunks, steps))


def _drain(notes: list[Event]) -> Iterator[Event]:
    while notes:
        yield notes.pop(0)
