"""The library entry points: `ask_events` streams a run's events, `ask` returns its result.

This is where the pieces meet: sources -> laid-out text -> token chunks (read ahead in a
thread, so reading overlaps model loading and generation) -> the agent loop -> events.

    from memagent_cli import ask_events
    for event in ask_events("Who signed it?", ["report.pdf"], model="memagent-7b.gguf"):
        ...
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, cast

from ..errors import MemagentError
from ..ingest.base import OcrMode, OcrProgress
from ..ingest.sources import ByteStream, Segment, Source, collect_sources, read_source, without_written
from ..install.registry import resolve_model
from ..model.backends import EngineOptions
from ..model.chat_template import ChatFormat
from ..model.engine import Engine
from ..model.gguf import GGUFInfo, read_gguf
from ..model.llama import EmbeddedOptions, LlamaEngine
from ..model.tokenizer import NormalForm, Tokenizer, load_tokenizer, normal_form
from .agent import LoopInput, check_question, plan_context, run_loop
from .chunking import Chunk, IngestStats, Piece, iter_chunks, layout, normalized
from .config import AgentConfig
from .events import (
    AnswerFinished,
    Event,
    ModelLoaded,
    Notice,
    OcrProgressed,
    RunFailed,
    RunFinished,
    RunResult,
    RunStarted,
    StepFinished,
    StepRecord,
)
from .infmem_loop import run_infmem, units_read
from .keys import Continued
from .memdiff import evidence_steps
from .notes import kept_notes
from .protocols import get as get_protocol
from .quotes import Quote, find_quotes
from .readahead import ReadAhead
from .scheduler import ChunkTee, FairGate, GatedEngine, RunError, run_all


@dataclass(frozen=True)
class SourceOptions:
    include: Sequence[str] = ()  # glob patterns for files inside directories
    exclude: Sequence[str] = ()
    password: str | None = None  # for encrypted PDFs
    ocr: OcrMode = "auto"  # pages without text and images: "auto" OCRs them, "always" every page, "never" none
    on_ocr: Callable[[OcrProgress], None] | None = None  # told after each page OCR recognises
    stdin: ByteStream | None = None  # read for "-", or when no source is named and stdin is piped
    stdin_is_piped: bool = False
    found: frozenset[str] = frozenset()  # files named that a resumed run found in a folder (collect_sources)
    written: frozenset[str] = frozenset()  # files the command writes, skipped in folders (without_written)


@dataclass
class Prepared:
    """Everything known before weights are loaded: what `inspect` shows and `ask` runs."""

    info: GGUFInfo | None  # None: a served model whose tokenizer is the server's own
    tokenizer: Tokenizer
    chat: ChatFormat | None
    sources: list[Source]
    notices: list[str]
    model_name: str = ""
    model_path: str = ""  # the GGUF; "" for a served model (whose vocabulary may still come from one)
    servers: tuple[str, ...] = ()  # a served model's servers

    def started(self, question: str, config: AgentConfig, ocr: OcrMode, asked: str = "") -> RunStarted:
        """The event that begins a run of `question` over these sources (`asked`: a follow-up's
        question as asked, where `question` is its problem)."""
        model = (self.model_name, self.model_path)
        return RunStarted(question, *model, tuple(self.sources), config, self.tokenizer.name, ocr, self.servers, asked)


@dataclass(frozen=True)
class Found:
    """The documents the paths name, found before a run (to look its answer up first, runs/planning.py):
    the run reads these, and says the notes finding them gave."""

    sources: tuple[Source, ...]
    notes: tuple[str, ...] = ()


def found_sources(paths: Sequence[str], sources: SourceOptions) -> Found:
    """`find_sources`, its notes kept for the run (or the caller) to say."""
    notes: list[str] = []
    return Found(tuple(find_sources(paths, sources, notes.append)), tuple(notes))


def prepare(
    model: str | Path | None,
    paths: Sequence[str],
    sources: SourceOptions,
    engine: EngineOptions = EmbeddedOptions(),
    found: Found | None = None,
) -> Prepared:
    """For a served engine, `model` names the GGUF whose vocabulary chunks the text (any
    quantization, or a vocabulary-only file); None asks the server to tokenize. `found`: the
    documents, already found."""
    prep = prepare_model(model, engine)
    if found is None:
        prep.sources = find_sources(paths, sources, prep.notices.append)
    else:
        prep.sources, prep.notices = list(found.sources), [*found.notes, *prep.notices]
    return prep


def _nothing_read(sources: Sequence[Source]) -> MemagentError:
    """The error of a run whose sources held no text at all: said of standard input where that was
    all it read (a script's stdin left empty, a pipe whose writer failed)."""
    if all(source.kind == "stdin" for source in sources):
        return MemagentError(
            "Nothing came in on standard input.",
            'Pipe text in (cat build.log | memagent ask "QUESTION"), or name the files to read.',
        )
    return MemagentError(
        "There is no text to read in the input.",
        "Check the files: they may be empty, or scans with no text layer; notes above, if any, say what was skipped and why.",
    )


def find_sources(
    paths: Sequence[str], sources: SourceOptions, warn: Callable[[str], None], empty_ok: bool = False
) -> list[Source]:
    """The documents the paths name (folders and archives expanded), as `ask` reads them; a folder
    with none is an error unless `empty_ok`."""
    found = collect_sources(
        paths,
        include=sources.include,
        exclude=sources.exclude,
        stdin_is_piped=sources.stdin_is_piped,
        ocr=sources.ocr,
        found=sources.found,
        warn=warn,
        empty_ok=empty_ok,
    )
    return without_written(found, sources.written, warn)


def prepare_model(model: str | Path | None, engine: EngineOptions = EmbeddedOptions()) -> Prepared:
    """The model's side of `prepare`: vocabulary, chat format, names; no sources yet. `model` None:
    the engine's own vocabulary (a server's), with no chat format."""
    if model is None:
        return Prepared(None, engine.own_tokenizer(), None, [], [], engine.describe(None), "", engine.servers)
    info = read_gguf(resolve_model(model))
    tokenizer = load_tokenizer(info)
    chat = ChatFormat.from_gguf(info, engine.chat_template)
    path = "" if engine.served else str(info.path)
    return Prepared(info, tokenizer, chat, [], [], engine.describe(info), path, engine.servers)


def open_engine(prep: Prepared, n_ctx: int, options: EngineOptions, sequences: int = 1) -> Engine:
    """The engine that runs the model: llama.cpp here, or a server."""
    return options.open(prep.info, prep.tokenizer, prep.chat, n_ctx, sequences)


def document_text(
    paths: Sequence[str], sources: SourceOptions, warn: Callable[[str], None], model: str | Path | None = None
) -> Iterator[str]:
    """The document as the model reads it (`inspect --text`), streamed: the same sources, readers
    and layout as `ask`; with `model`, normalized as its tokenizer normalizes text (its vocabulary
    alone is read). Notes about the sources go to `warn`."""
    found = find_sources(paths, sources, warn)
    form = normal_form(read_gguf(resolve_model(model))) if model is not None else None
    for piece in _laid_out(found, sources, warn, form):
        yield piece.text


def source_text(source: Source, sources: SourceOptions, warn: Callable[[str], None], form: str | None) -> str:
    """One source's text as `inspect --text` prints that source alone (stripped; in the normal form
    `form` where the model's tokenizer has one): what a quote's offsets count in."""
    return "".join(piece.text for piece in _laid_out([source], sources, warn, form))


def _laid_out(found: Sequence[Source], sources: SourceOptions, warn: Callable[[str], None], form: str | None) -> Iterable[Piece]:
    pieces: Iterable[Piece] = layout(found, _reader(sources, warn))
    if form is not None:
        normal = cast(NormalForm, form)
        pieces = normalized(pieces, lambda text: unicodedata.normalize(normal, text))
    return pieces


def _reader(sources: SourceOptions, warn: Callable[[str], None], growing: bool = False) -> Callable[[Source], Iterator[Segment]]:
    """How `layout` reads each source: its segments, and a note if the file changed meanwhile
    (none where it is `growing`: written as it is read, its end held back)."""

    def read(source: Source) -> Iterator[Segment]:
        before = None if growing else _stamp(source)
        yield from read_source(
            source, password=sources.password, warn=warn, stdin=sources.stdin, ocr=sources.ocr, on_ocr=sources.on_ocr
        )
        if before is not None and _stamp(source) != before:
            warn(f"{source.title} changed while it was read; the answer may mix its old and new text.")

    return read


def chunk_stream(
    prep: Prepared, chunk_tokens: int, sources: SourceOptions, warn: Callable[[str], None], growing: bool = False
) -> tuple[Iterator[Chunk], IngestStats]:
    """The document's chunks, lazily, and the counts that fill in as they are read. `growing`: it
    is still being written, and its last chunk is held back (chunking.iter_chunks' `hold_last`)."""
    stats = IngestStats()
    pieces = layout(prep.sources, _reader(sources, warn, growing))
    return iter_chunks(pieces, prep.tokenizer, chunk_tokens, prep.sources, stats, warn, hold_last=growing), stats


def _stamp(source: Source) -> tuple[int, int] | None:
    """Size and modification time of a regular file, to notice it changing under us."""
    if source.size is None:
        return None
    try:
        st = os.stat(source.path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@dataclass
class SharedEngine:
    """An engine opened once for several runs (the questions of `ask -q`, the items of `eval`): their
    model calls pass one FairGate, at most `slots` at a time. Close it when the runs are over."""

    engine: GatedEngine  # what the runs call
    n_ctx: int
    load_seconds: float
    gpu_layers: int = 0  # as passed to llama.cpp; 0 for a served engine
    gpu_reason: str = ""
    slots: int = 1  # model calls in flight at once: `parallel` on a served engine, 1 on the embedded one

    @property
    def description(self) -> str:
        return self.engine.description

    def for_chain(self, key: str) -> SharedEngine:
        """The engine as one run of many calls it: tagged with the run's key (see Job.chain_key)."""
        return dataclasses.replace(self, engine=self.engine.for_chain(key))

    def loaded(self) -> ModelLoaded:
        return ModelLoaded(self.description, self.n_ctx, self.load_seconds, self.gpu_layers, self.gpu_reason)

    def close(self) -> None:
        self.engine.close()


def open_shared_engine(
    prep: Prepared, n_ctx: int, options: EngineOptions, parallel: int, stop: threading.Event, jobs: int | None = None
) -> SharedEngine:
    """`open_engine`, timed, behind a gate of `parallel` slots (one for an engine that takes a call at
    a time). The embedded engine batches up to `parallel` replies (no more than `jobs`, the runs that
    will share it) where batching is on. Setting `stop` ends the calls in flight and those waiting
    their turn."""
    from ..model.runtime import MAX_SEQUENCES

    t_load = time.perf_counter()
    sequences = max(1, min(parallel, jobs or parallel, MAX_SEQUENCES))
    llm = open_engine(prep, n_ctx, options, sequences)
    load_seconds = time.perf_counter() - t_load
    # a served engine takes `parallel` calls at once; a batching embedded one, a call per sequence
    slots = (llm.sequences if isinstance(llm, LlamaEngine) else parallel) if llm.concurrent else 1
    try:
        gate = FairGate(slots)
    except BaseException:
        llm.close()
        raise
    return SharedEngine(
        GatedEngine(llm, gate, stop),
        n_ctx,
        load_seconds,
        getattr(llm, "gpu_layers", 0),
        getattr(llm, "gpu_reason", ""),
        slots,
    )


def run_question(
    question: str,
    chunks: Iterable[Chunk],
    stats: IngestStats,
    prep: Prepared,
    shared: SharedEngine,
    config: AgentConfig,
    *,
    done_steps: Sequence[Mapping[str, Any]] = (),
    started: float | None = None,
    continued: Continued | None = None,
) -> Iterator[Event]:
    """One run of the agent loop over a chunk stream on a shared engine: its events, then
    RunFinished with its RunResult. What `ask` runs per question and `eval` per item.

    `question` is already checked (agent.check_question); `prep.sources` are the sources the
    chunks are read from, and `stats` fills in as they are; `done_steps` make it a resumed run
    (see ask_events); `started` (a time.perf_counter() value, default now) is when the run began,
    for its total time; `continued`, an earlier run over an earlier version of the text, whose
    steps are taken where their chunks are the same (agent.LoopInput). The chunk stream is closed
    when the run ends, however it ends."""
    if started is None:
        started = time.perf_counter()
    steps: list[StepRecord] = []
    answer: AnswerFinished | None = None
    read: dict[int, Chunk] = {}  # the text each step read, for the quotes: a chunk is ~20K characters
    copied = 0  # steps taken from `continued`

    def kept(chunks: Iterable[Chunk]) -> Iterator[Chunk]:
        for chunk in chunks:
            read[chunk.index] = chunk
            yield chunk

    try:
        # InfMem has a loop of its own (a planner, a search, early stopping); every other protocol shares one
        loop = run_infmem if get_protocol(config.protocol).planner else run_loop
        given = LoopInput(question, kept(chunks), stats, shared.engine, prep.tokenizer, config, done_steps, continued)
        for event in loop(given):
            if isinstance(event, StepFinished):
                steps.append(event.step)
                copied += event.copied_from is not None
                if event.step.memory == event.step.previous_memory and not get_protocol(config.protocol).planner:
                    # added nothing, so it is no evidence step: its text is not kept for the quotes
                    # (a long input's many readings that change nothing hold no memory). InfMem
                    # holds every chunk anyway, and an evidence step may have read any of them.
                    read.pop(event.step.index, None)
            elif isinstance(event, AnswerFinished):
                answer = event
            yield event
    finally:  # now, not when the error's traceback lets go of it: a ChunkTee's other readers wait on it
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    assert answer is not None  # the loop's last event is AnswerFinished, or it raised
    result = _result(
        prep,
        question,
        config,
        shared.description,
        shared.n_ctx,
        stats,
        steps,
        answer,
        shared.load_seconds,
        time.perf_counter() - started,
        read,
    )
    result.gpu = {"layers": shared.gpu_layers, "reason": shared.gpu_reason}
    if copied and continued is not None:
        result.continued_from = {"run": continued.run, "step": copied}
    yield RunFinished(result)


def ask_events(
    question: str,
    paths: Sequence[str],
    *,
    model: str | Path | None = None,
    config: AgentConfig = AgentConfig(),
    engine: EngineOptions = EmbeddedOptions(),
    sources: SourceOptions = SourceOptions(),
    done_steps: Sequence[Mapping[str, Any]] = (),
    continued: Continued | None = None,
    found: Found | None = None,
    history: Sequence[tuple[str, str]] = (),
) -> Iterator[Event]:
    """Run one question over the sources, yielding events; the last is RunFinished.

    `done_steps`, the stored steps of an interrupted run (see traces/store.py), make this a
    resumed run: those chunks are re-read and checked but not sent to the model again.
    `continued`, an earlier run over an earlier version of the sources, is gone on from where
    their chunks are the same (reuse.Continued). `found`: the documents the paths name, found already.
    `history`: the earlier turns of the conversation it follows (question, answer), which its problem
    holds (agent.check_question)."""
    for _, event in ask_many_events(
        [question],
        paths,
        model=model,
        config=config,
        engine=engine,
        sources=sources,
        done_steps=[done_steps],
        continued=[continued],
        found=found,
        histories=[history],
    ):
        if isinstance(event, RunFailed):
            raise event.error
        yield event


@kept_notes
def ask_many_events(
    questions: Sequence[str],
    paths: Sequence[str],
    *,
    model: str | Path | None = None,
    config: AgentConfig = AgentConfig(),
    engine: EngineOptions = EmbeddedOptions(),
    sources: SourceOptions = SourceOptions(),
    done_steps: Sequence[Sequence[Mapping[str, Any]]] = (),
    parallel: int = 1,
    continued: Sequence[Continued | None] = (),
    found: Found | None = None,
    histories: Sequence[Sequence[tuple[str, str]]] = (),
) -> Iterator[tuple[int | None, Event]]:
    """Run several questions over the same sources, read once: each is its own memory stream.

    Yields (question index, event); index None marks a notice about the whole input. A
    question that fails yields RunFailed and the others go on. At most `parallel` model calls
    are in flight (the embedded engine takes one at a time: the questions advance step by
    step in turn). `done_steps`, `continued` and `histories` are per question, as ask_events takes them."""
    t0 = time.perf_counter()
    prep = prepare(model, paths, sources, engine, found)
    turns = [histories[i] if i < len(histories) else () for i in range(len(questions))]
    asked = [q.strip() if turns[i] else "" for i, q in enumerate(questions)]  # a follow-up's question, as asked
    questions = [check_question(q, prep.tokenizer, config, turns[i]) for i, q in enumerate(questions)]
    served = engine.served
    # A server sizes its own context; with the model's vocabulary at hand we still know what a step needs.
    n_ctx = (
        0
        if prep.chat is None
        else max(plan_context(prep.chat, prep.tokenizer, q, config, None if served else engine.n_ctx) for q in questions)
    )
    for i, q in enumerate(questions):
        yield i, prep.started(q, config, sources.ocr, asked[i])
    for note in prep.notices:
        yield None, Notice(note)
    default = prep.chat.default_note(prep.info) if prep.chat is not None and prep.info is not None and not served else None
    if default is not None:
        level, message = default
        yield None, Notice(message, level)
    trained = prep.info.arch_get("context_length") if prep.info is not None and not served else None
    if trained and n_ctx > trained:
        yield None, Notice(f"The context ({n_ctx}) exceeds what the model was trained for ({trained}); answers may degrade.")

    # Reading starts before the model loads, so both overlap; but a source that cannot be
    # read, or holds no text, is reported before minutes go into loading weights.
    pending: collections.deque[Notice | OcrProgressed] = collections.deque()

    def notices() -> Iterator[tuple[None, Notice | OcrProgressed]]:  # what the reading thread told since last time
        while pending:
            yield None, pending.popleft()

    def on_ocr(progress: OcrProgress) -> None:
        pending.append(OcrProgressed(progress.title, progress.done, progress.total, progress.seconds))
        if sources.on_ocr is not None:
            sources.on_ocr(progress)

    told = dataclasses.replace(sources, on_ocr=on_ocr)
    stream, stats = chunk_stream(prep, config.chunk_tokens, told, lambda message: pending.append(Notice(message)))
    chunks = ReadAhead(stream)
    shared: SharedEngine | None = None
    stop = threading.Event()
    try:
        # The first chunk can take long (a scanned PDF's pages are recognised first): what the
        # reading thread tells meanwhile (OCR progress) is passed on while waiting.
        while not chunks.wait(0.2):
            yield from notices()
        if chunks.peek() is None:
            yield from notices()
            raise _nothing_read(prep.sources)
        shared = open_shared_engine(prep, n_ctx, engine, parallel, stop, jobs=len(questions))
        for i in range(len(questions)):
            yield i, shared.loaded()
        tee = ChunkTee(chunks, len(questions), stop)

        def job(i: int) -> Callable[[], Iterator[Event]]:
            replay = done_steps[i] if i < len(done_steps) else ()
            earlier = continued[i] if i < len(continued) else None
            # The reader is made in the worker, when the run starts.
            return lambda: run_question(
                questions[i], tee.reader(i), stats, prep, shared, config, done_steps=replay, started=t0, continued=earlier
            )

        for i, event in run_all([job(i) for i in range(len(questions))], workers=len(questions), stop=stop):
            yield from notices()
            yield i, RunFailed(event.error) if isinstance(event, RunError) else event
    finally:
        stop.set()
        chunks.close()
        if shared is not None:
            shared.close()
    yield from notices()


def data_values(data: Any) -> list[str]:
    """The texts and numbers in an answer's data, in order: what its quotes must hold (true, false
    and null are no words a document has)."""
    if isinstance(data, dict):
        return [text for value in data.values() for text in data_values(value)]
    if isinstance(data, list):
        return [text for value in data for text in data_values(value)]
    if isinstance(data, bool) or data is None:
        return []
    return [str(data)]


def _result(
    prep: Prepared,
    question: str,
    config: AgentConfig,
    device: str,
    n_ctx: int,
    stats: IngestStats,
    steps: list[StepRecord],
    answer: AnswerFinished,
    load_seconds: float,
    total_seconds: float,
    read: Mapping[int, Chunk] | None = None,
) -> RunResult:
    prompt_tokens = sum(s.prompt_tokens - s.cached_tokens for s in steps)
    prompt_seconds = sum(s.prompt_seconds for s in steps)
    generated = sum(s.generated_tokens for s in steps) + answer.generated_tokens
    generate_seconds = sum(s.generate_seconds for s in steps)
    sources = stats.source_records(prep.sources)
    chosen = set(evidence_steps([{"index": s.index, "memory": s.memory} for s in steps]))
    evidence = [s for s in steps if s.index in chosen]
    memory = steps[-1].memory if steps else ""
    t0 = time.perf_counter()
    read = read or {}
    form = getattr(prep.tokenizer, "normal_form", None)
    evidence_chunks = [read[i] for i in sorted(chosen) if i in read]
    if get_protocol(config.protocol).planner:  # what its evidence steps found by searching, beside their chunks
        ordered = [read[i] for i in sorted(read)]
        evidence_chunks += [unit for s in evidence for unit in units_read(s, ordered, prep.tokenizer)]

    def quoted(said: str) -> list[Quote]:
        return find_quotes(said, memory, evidence_chunks, sources, stats.source_starts, form)

    by_field: dict[str, list[Quote]] = {}
    if answer.data is None:
        quotes = quoted(answer.answer)
    else:  # the values the answer gives, not its JSON's names and punctuation; then each field's own
        quotes = quoted(" ".join(data_values(answer.data)))
        if isinstance(answer.data, dict):
            by_field = {name: quoted(" ".join(data_values(value))) for name, value in answer.data.items()}
            by_field = {name: found for name, found in by_field.items() if found}
    quote_seconds = time.perf_counter() - t0
    return RunResult(
        question=question,
        answer=answer.answer,
        raw_answer=answer.raw,
        data=answer.data,
        data_truncated=answer.data_truncated,
        answer_cut=answer.finish_reason == "length",
        memory=memory,
        model=prep.model_name,
        model_path=prep.model_path,
        servers=prep.servers,
        device=device,
        sources=sources,
        document_tokens=stats.document_tokens,
        config=config,
        n_ctx=n_ctx,
        steps=steps,
        evidence=evidence,
        quotes=quotes,
        evidence_by_field=by_field,
        timings={
            "total_seconds": round(total_seconds, 4),
            "load_seconds": round(load_seconds, 4),
            "steps_seconds": round(sum(s.seconds for s in steps), 4),
            "answer_seconds": round(answer.seconds, 4),
            "quotes_seconds": round(quote_seconds, 4),
            "prompt_tokens_per_second": round(prompt_tokens / prompt_seconds, 1) if prompt_seconds else None,
            "generation_tokens_per_second": round(generated / (generate_seconds + answer.seconds), 1)
            if generate_seconds + answer.seconds
            else None,
        },
    )


def ask(question: str, paths: Sequence[str], **kwargs: Any) -> RunResult:
    """Run one question to the end and return its result (the events are dropped)."""
    result = None
    for event in ask_events(question, paths, **kwargs):
        if isinstance(event, RunFinished):
            result = event.result
    assert result is not None
    return result
