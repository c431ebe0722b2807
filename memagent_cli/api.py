"""The library entry points: `ask_events` streams a run's events, `ask` returns its result.

This is where the pieces meet: sources -> laid-out text -> token chunks (read ahead in a
thread, so reading overlaps model loading and generation) -> the agent loop -> events.

    from memagent_cli import ask_events
    for event in ask_events("Who signed it?", ["report.pdf"], model="memagent-7b.gguf"):
        ...
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence

from .agent import check_question, plan_context, run_loop
from .chat import ChatFormat
from .chunking import Chunk, IngestStats, ReadAhead, iter_chunks, layout
from .config import AgentConfig
from .engine import LlamaEngine
from .errors import MemagentError
from .events import (
    AnswerFinished,
    Event,
    ModelLoaded,
    Notice,
    RunFinished,
    RunResult,
    RunStarted,
    StepFinished,
)
from .gguf import GGUFInfo, read_gguf
from .memdiff import surviving_additions
from .protocol import INITIAL_MEMORY
from .registry import resolve_model
from .sources import Source, collect_sources, read_source
from .tokenizer import Tokenizer, load_tokenizer


@dataclass(frozen=True)
class EngineOptions:
    n_ctx: int | None = None  # None: just large enough for the budgets
    gpu_layers: int | None = None  # None: every layer when the build can offload, else 0
    threads: int | None = None  # None: every core this process may use
    verbose: bool = False  # show llama.cpp's own log


@dataclass(frozen=True)
class SourceOptions:
    include: Sequence[str] = ()  # glob patterns for files inside directories
    exclude: Sequence[str] = ()
    password: str | None = None  # for encrypted PDFs
    stdin: BinaryIO | None = None  # read for "-", or when no source is named and stdin is piped
    stdin_is_piped: bool = False


@dataclass
class Prepared:
    """Everything known before weights are loaded: what `inspect` shows and `ask` runs."""

    info: GGUFInfo
    tokenizer: Tokenizer
    chat: ChatFormat
    sources: list[Source]
    notices: list[str]


def prepare(model: str | Path | None, paths: Sequence[str], sources: SourceOptions) -> Prepared:
    info = read_gguf(resolve_model(model))
    tokenizer = load_tokenizer(info)
    chat = ChatFormat.from_gguf(info)
    notices: list[str] = []
    found = collect_sources(paths, include=sources.include, exclude=sources.exclude,
                            stdin_is_piped=sources.stdin_is_piped, warn=notices.append)
    return Prepared(info, tokenizer, chat, found, notices)


def chunk_stream(prep: Prepared, chunk_tokens: int, sources: SourceOptions, warn) -> tuple[Iterator[Chunk], IngestStats]:
    """The document's chunks, lazily, and the counts that fill in as they are read."""
    stats = IngestStats()

    def read(source: Source):
        before = _stamp(source)
        yield from read_source(source, password=sources.password, warn=warn, stdin=sources.stdin)
        if before is not None and _stamp(source) != before:
            warn(f"{source.title} changed while it was read; the answer may mix its old and new text.")

    return iter_chunks(layout(prep.sources, read), prep.tokenizer, chunk_tokens, prep.sources, stats, warn), stats


def _stamp(source: Source) -> tuple[int, int] | None:
    """Size and modification time of a regular file, to notice it changing under us."""
    if source.size is None:
        return None
    try:
        st = os.stat(source.path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def ask_events(question: str, paths: Sequence[str], *, model: str | Path | None = None,
               config: AgentConfig = AgentConfig(), engine: EngineOptions = EngineOptions(),
               sources: SourceOptions = SourceOptions(), done_steps: Sequence[dict] = ()) -> Iterator[Event]:
    """Run one question over the sources, yielding events; the last is RunFinished.

    `done_steps`, the stored steps of an interrupted run (see memagent_cli.store), make this a
    resumed run: those chunks are re-read and checked but not sent to the model again."""
    t0 = time.perf_counter()
    prep = prepare(model, paths, sources)
    question = check_question(question, prep.tokenizer, config)
    n_ctx = plan_context(prep.chat, prep.tokenizer, question, config, engine.n_ctx)
    yield RunStarted(question, prep.info.name, str(prep.info.path), tuple(prep.sources), config, prep.tokenizer.name)
    for note in prep.notices:
        yield Notice(note)
    if prep.chat.is_default:
        yield Notice("The model has no chat template; using Qwen2.5's, which the MemAgent models were trained with.", "info")
    trained = prep.info.arch_get("context_length")
    if trained and n_ctx > trained:
        yield Notice(f"The context ({n_ctx}) exceeds what the model was trained for ({trained}); answers may degrade.")

    # Reading starts before the model loads, so both overlap; but a source that cannot be
    # read, or holds no text, is reported before minutes go into loading weights.
    pending: collections.deque[str] = collections.deque()

    def notices() -> Iterator[Notice]:  # what the reading thread noted since last time
        while pending:
            yield Notice(pending.popleft())

    stream, stats = chunk_stream(prep, config.chunk_tokens, sources, pending.append)
    chunks = ReadAhead(stream)
    llm = None
    try:
        if chunks.peek() is None:
            yield from notices()
            raise MemagentError("There is no text to read in the input.",
                                "Check the file; scanned PDFs need OCR first, which memagent does not do.")
        t_load = time.perf_counter()
        llm = LlamaEngine(prep.info, prep.tokenizer, prep.chat, n_ctx=n_ctx, gpu_layers=engine.gpu_layers,
                          threads=engine.threads, verbose=engine.verbose)
        load_seconds = time.perf_counter() - t_load
        yield ModelLoaded(llm.description, n_ctx, load_seconds, llm.gpu_layers, llm.gpu_reason)
        steps = []
        answer = None
        for event in run_loop(question, chunks, stats, llm, prep.tokenizer, config, done_steps):
            yield from notices()
            if isinstance(event, StepFinished):
                steps.append(event.step)
            elif isinstance(event, AnswerFinished):
                answer = event
            yield event
    finally:
        chunks.close()
        if llm is not None:
            llm.close()
    yield from notices()
    assert answer is not None
    result = _result(prep, question, config, llm.description, n_ctx, stats, steps, answer, load_seconds,
                     time.perf_counter() - t0)
    result.gpu = {"layers": llm.gpu_layers, "reason": llm.gpu_reason}
    yield RunFinished(result)


def _result(prep: Prepared, question: str, config: AgentConfig, device: str, n_ctx: int, stats: IngestStats,
            steps: list, answer: AnswerFinished, load_seconds: float, total_seconds: float) -> RunResult:
    prompt_tokens = sum(s.prompt_tokens - s.cached_tokens for s in steps)
    prompt_seconds = sum(s.prompt_seconds for s in steps)
    generated = sum(s.generated_tokens for s in steps) + answer.generated_tokens
    generate_seconds = sum(s.generate_seconds for s in steps)
    sources = stats.source_records(prep.sources)
    memories = [INITIAL_MEMORY] + [s.memory for s in steps]
    evidence = [steps[k - 1] for k in surviving_additions(memories)]
    return RunResult(
        question=question, answer=answer.answer, raw_answer=answer.raw, memory=steps[-1].memory if steps else "",
        model=prep.info.name, model_path=str(prep.info.path), device=device, sources=sources,
        document_tokens=stats.document_tokens, config=config, n_ctx=n_ctx, steps=steps, evidence=evidence,
        timings={
            "total_seconds": round(total_seconds, 4),
            "load_seconds": round(load_seconds, 4),
            "steps_seconds": round(sum(s.seconds for s in steps), 4),
            "answer_seconds": round(answer.seconds, 4),
            "prompt_tokens_per_second": round(prompt_tokens / prompt_seconds, 1) if prompt_seconds else None,
            "generation_tokens_per_second": round(generated / (generate_seconds + answer.seconds), 1)
            if generate_seconds + answer.seconds else None,
        },
    )


def ask(question: str, paths: Sequence[str], **kwargs) -> RunResult:
    """Run one question to the end and return its result (the events are dropped)."""
    result = None
    for event in ask_events(question, paths, **kwargs):
        if isinstance(event, RunFinished):
            result = event.result
    assert result is not None
    return result
