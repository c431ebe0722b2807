"""The MemAgent loop: read each chunk into a bounded memory, then answer from it alone.

Pure orchestration over an Engine and an iterator of chunks; it yields events and knows
nothing of terminals, files or databases.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Generator, Iterable, Iterator, Mapping, Sequence

from ..errors import EXIT_USAGE, MemagentError
from ..model.chat_template import ChatFormat
from ..model.engine import Completion, CompletionDone, Engine, PromptRead, RawPrompt, Retrying, Sampling, TextDelta
from ..model.tokenizer import Tokenizer, normalizer
from .chunking import Chunk, IngestStats
from .config import AgentConfig
from .events import (
    AnswerFinished,
    AnswerStarted,
    DocumentRead,
    Event,
    Notice,
    PromptProgressed,
    ReplyRestarted,
    StepFinished,
    StepRecord,
    StepStarted,
    TokenText,
)
from .keys import Continued
from .protocols import follow_up
from .protocols import get as get_protocol
from .schema import AnswerSchema

# Room for the few tokens by which re-tokenizing a chunk inside the prompt can differ from
# its count on its own (merges across the tag boundaries, split characters).
CONTEXT_MARGIN = 64
# A memory written as N tokens comes back into the next prompt as text, re-tokenized: about
# N for a real model, but up to ~1.7N measured for text that is not canonical BPE (split
# characters decode to U+FFFD). The KV cache this reserves is small (~58 MB per 1K tokens
# on a 7B model); the engine still shortens a step's budget rather than fail on the rest.
MEMORY_REPROMPT_FACTOR = 2


def empty_question() -> MemagentError:
    """The error of a question with nothing in it (said before a model is looked for, where the CLI can)."""
    return MemagentError(
        "The question is empty.", 'Ask something, e.g. memagent ask report.pdf "Who signed it?"', exit_code=EXIT_USAGE
    )


def check_question(question: str, tokenizer: Tokenizer, config: AgentConfig, history: Sequence[tuple[str, str]] = ()) -> str:
    """The question as the prompts carry it: stripped, and normalized as the model's tokenizer
    normalizes text (NFC for Qwen's), so a served model reads the ids the local tokenizer counts.
    `history`, the earlier turns of a conversation (question, answer): a follow-up's problem holds
    the most recent of them that fit the question budget (protocols.follow_up)."""
    question = with_history(config.question_asked(question), history, tokenizer, config.question_tokens)
    normalize = normalizer(tokenizer)
    if normalize is not None:
        question = normalize(question)
    if not question:
        raise empty_question()
    n = len(tokenizer.encode(question))
    if n > config.question_tokens:
        raise MemagentError(
            f"The question is {n} tokens long; the limit is {config.question_tokens}.",
            "Shorten it: the models were trained with questions of at most 1024 tokens.",
            exit_code=EXIT_USAGE,
        )
    return question


def with_history(question: str, history: Sequence[tuple[str, str]], tokenizer: Tokenizer, budget: int) -> str:
    """A follow-up's problem: `question` with the most recent of the earlier turns `history` that
    fit in `budget` tokens (protocols.follow_up); an empty question, or one without history, as it is."""
    if not question or not history:
        return question
    return follow_up(question, history, lambda problem: len(tokenizer.encode(problem)) <= budget)


def context_needed(chat: ChatFormat, tokenizer: Tokenizer, question: str, config: AgentConfig) -> tuple[int, str]:
    """The context a run needs, and how that number is made up (for error messages)."""
    protocol = get_protocol(config.protocol)
    step_fixed = len(chat.encode(tokenizer, protocol.memory_prompt(question, "", "")))
    final_fixed = len(chat.encode(tokenizer, protocol.final_prompt(question, "", config.final, config.final_instructions())))
    memory_in = MEMORY_REPROMPT_FACTOR * config.memory_tokens
    step_extra, final_extra = protocol.extra_step_tokens, protocol.extra_final_tokens
    step = step_fixed + config.chunk_tokens + memory_in + config.memory_tokens + step_extra + CONTEXT_MARGIN
    final = final_fixed + memory_in + config.answer_tokens + final_extra + CONTEXT_MARGIN
    why = (
        f"a memory step needs {step} tokens (prompt and question {step_fixed} + chunk {config.chunk_tokens}"
        f" + memory {memory_in} in and {config.memory_tokens} out"
        + (f" + retrieved passages and thinking {step_extra}" if step_extra else "")
        + f" + {CONTEXT_MARGIN} spare)"
    )
    if final > step:
        why = (
            f"the final answer needs {final} tokens (prompt and question {final_fixed} + memory"
            f" {memory_in} + answer {config.answer_tokens}"
            + (f" + thinking {final_extra}" if final_extra else "")
            + f" + {CONTEXT_MARGIN} spare)"
        )
    return max(step, final), why


def plan_context(chat: ChatFormat, tokenizer: Tokenizer, question: str, config: AgentConfig, requested: int | None = None) -> int:
    """--ctx, checked against the budgets; or just enough for them, rounded up to 256."""
    need, why = context_needed(chat, tokenizer, question, config)
    if requested is None:
        return int(math.ceil(need / 256) * 256)
    if requested < need:
        raise MemagentError(
            f"--ctx {requested} is too small: {why}.",
            "Raise --ctx, or lower --chunk-tokens or --memory-tokens.",
            exit_code=EXIT_USAGE,
        )
    return requested


def no_text() -> MemagentError:
    """The error of a run whose input holds no text at all."""
    return MemagentError(
        "There is no text to read in the input.",
        "Check the file: it may be empty, or scanned with no text layer (OCR reads those with the ocr extra, "
        "pip install 'memagent-cli[ocr]', unless --ocr never).",
    )


def sampling_for(config: AgentConfig, call: int) -> Sampling:
    # One seed per call, derived from the run's seed: step k samples the same way whether or
    # not the run was interrupted before it.
    seed = None if config.seed is None else config.seed + call
    return Sampling(temperature=config.temperature, top_p=config.top_p, seed=seed)


def replayed_step(chunk: Chunk, stored: Mapping[str, Any], previous_memory: str) -> StepRecord:
    """A step done before an interruption, rebuilt from its trace record and its re-read chunk."""
    if stored["index"] != chunk.index or stored["tokens"] != chunk.tokens:
        raise MemagentError(
            f"The input differs from the interrupted run at step {chunk.index} "
            f"({chunk.tokens} tokens now, {stored['tokens']} then).",
            "Resume only with the same sources; start a new run otherwise.",
        )
    return StepRecord(
        index=chunk.index,
        chunk=chunk,
        memory=stored["memory"],
        previous_memory=previous_memory,
        memory_tokens=stored["memory_tokens"],
        prompt_tokens=stored["prompt_tokens"],
        cached_tokens=0,
        generated_tokens=stored["generated_tokens"],
        finish_reason=stored["finish_reason"],
        prompt_seconds=0.0,
        generate_seconds=stored["seconds"],
        drafted_tokens=stored.get("drafted_tokens") or 0,
        accepted_tokens=stored.get("accepted_tokens") or 0,
    )


def _call(
    engine: Engine, message: str, max_tokens: int, sampling: Sampling, step: int, expect: str = ""
) -> Generator[Event, None, CompletionDone]:
    """One engine call as events (the streamed text, a served engine's retries); returns its CompletionDone."""
    return (yield from follow(engine.complete(message, max_tokens, sampling, expect), step))


def call_raw(
    engine: Engine, prompt: RawPrompt, max_tokens: int, sampling: Sampling, step: int, planning: bool = False
) -> Generator[Event, None, CompletionDone]:
    """One raw completion (a prompt the protocol rendered) as events; `planning` marks its text as
    InfMem's planner's (see TokenText)."""
    return (yield from follow(engine.complete_raw(prompt, max_tokens, sampling), step, planning=planning))


def follow(
    items: Iterable[Completion], step: int, stream: bool = True, planning: bool = False
) -> Generator[Event, None, CompletionDone]:
    """An engine's stream as events: its text (when `stream`), the prompt read, a served engine's
    retries; returns the CompletionDone that ends it."""
    done = None
    for item in items:
        if isinstance(item, TextDelta):
            if stream:
                yield TokenText(step, item.text, planning)
        elif isinstance(item, PromptRead):
            yield PromptProgressed(step, item.done, item.total)
        elif isinstance(item, Retrying):
            what = f"Step {step}" if step else "The answer"
            yield Notice(f"{what}: {item.reason}; trying again ({item.attempt}/{item.attempts}) in {item.delay:.0f}s.")
            if stream:
                yield ReplyRestarted(step, item.reason)
        else:
            done = item
    assert isinstance(done, CompletionDone)
    return done


@dataclasses.dataclass(frozen=True)
class LoopInput:
    """What a protocol's loop reads (run_loop here, infmem_loop.run_infmem for InfMem): the question,
    already checked (check_question); the chunks, read as the loop goes, and their `stats`, which
    fill in as they are read; the model's engine and tokenizer; the run's config; and `done_steps`,
    the stored steps of an interrupted run: their chunks are re-read and checked, not sent to the
    model again, and the loop goes on from their memory. `continued`: the steps of an earlier run
    whose chunks are the same as this run's first ones are taken likewise (and recorded as this
    run's, marked as copied), up to the first chunk that differs (run_loop; InfMem reads anew)."""

    question: str
    chunks: Iterable[Chunk]
    stats: IngestStats
    engine: Engine
    tokenizer: Tokenizer
    config: AgentConfig
    done_steps: Sequence[Mapping[str, Any]] = ()
    continued: Continued | None = None  # an earlier run over an earlier version of the text, to go on from

    def document_read(self, steps: int) -> DocumentRead:
        """The event that says the whole input is read: its size, and its `steps`."""
        s = self.stats
        return DocumentRead(s.document_tokens, steps, tuple(s.source_tokens), tuple(s.source_pages), tuple(s.source_units))


def run_loop(run: LoopInput) -> Iterator[Event]:
    """Memory updates over every chunk, then the final answer."""
    protocol = get_protocol(run.config.protocol)
    memory = protocol.initial_memory
    told_total = False
    steps = 0
    # A memory agent's state after step k is its memory: where the first k chunks are the same
    # token ids as an earlier run's, that run's memory after step k is this run's.
    earlier = run.continued if run.continued is not None and not run.done_steps else None

    def read_event() -> Iterator[Event]:
        nonlocal told_total
        if run.stats.done and not told_total:
            told_total = True
            yield run.document_read(math.ceil(run.stats.document_tokens / run.config.chunk_tokens))

    for chunk in run.chunks:
        steps += 1
        yield from read_event()
        if chunk.index <= len(run.done_steps):
            record = replayed_step(chunk, run.done_steps[chunk.index - 1], memory)
            yield StepFinished(record, replayed=True)
            memory = record.memory
            continue
        if earlier is not None:
            stored = earlier.steps[chunk.index - 1] if chunk.index <= len(earlier.steps) else None
            if stored is not None and stored.get("digest") == chunk.digest:
                record = replayed_step(chunk, stored, memory)
                yield StepFinished(record, replayed=True, copied_from=earlier.run)
                memory = record.memory
                continue
            if chunk.index > 1:
                yield Notice(_continued_note(earlier.run, chunk.index - 1) + f"; reading from step {chunk.index}.", "info")
            earlier = None  # this chunk differs: from here on the model reads
        total = math.ceil(run.stats.document_tokens / run.config.chunk_tokens) if run.stats.done else None
        yield StepStarted(chunk.index, chunk, total, chunk.end_token)
        done = yield from _call(
            run.engine,
            protocol.memory_prompt(run.question, memory, chunk.text),
            run.config.memory_tokens,
            sampling_for(run.config, chunk.index),
            chunk.index,
            memory,  # "retain all relevant details from the previous memory": often copied whole
        )
        if done.max_tokens < run.config.memory_tokens:
            yield Notice(
                f"Step {chunk.index}: the prompt ({done.prompt_tokens} tokens) left room for only "
                f"{done.max_tokens} memory tokens; raise --ctx to avoid this."
            )
        new_memory = protocol.next_memory(done.text)
        yield StepFinished(
            StepRecord(
                index=chunk.index,
                chunk=chunk,
                memory=new_memory,
                previous_memory=memory,
                memory_tokens=len(run.tokenizer.encode(new_memory)),
                prompt_tokens=done.prompt_tokens,
                cached_tokens=done.cached_tokens,
                generated_tokens=done.completion_tokens,
                finish_reason=done.finish_reason,
                prompt_seconds=done.prompt_seconds,
                generate_seconds=done.generate_seconds,
                drafted_tokens=done.drafted_tokens,
                accepted_tokens=done.accepted_tokens,
            )
        )
        memory = new_memory
    if steps == 0:
        raise no_text()
    if earlier is not None:  # every chunk was the earlier run's (its text grew by white space alone, say)
        yield Notice(_continued_note(earlier.run, steps) + "; only the answer is written.", "info")
    yield from read_event()

    yield AnswerStarted(len(run.tokenizer.encode(memory)))
    started = time.perf_counter()
    prompt = protocol.final_prompt(run.question, memory, run.config.final, run.config.final_instructions())
    schema = run.config.schema()
    if schema is None:
        done = yield from _call(run.engine, prompt, run.config.answer_tokens, sampling_for(run.config, 0), 0)
        raw = done.text
        answer, found = protocol.extract_answer(raw, run.config.final)
        data, truncated = None, False
    else:
        done, data, truncated = yield from _answer_as_data(run.engine, prompt, run.config, schema, retry_call=steps + 1)
        raw = answer = done.text.strip()
        found = True
    yield AnswerFinished(
        raw=raw,
        answer=answer,
        data=data,
        data_truncated=truncated,
        found=found,
        finish_reason=done.finish_reason,
        prompt_tokens=done.prompt_tokens,
        generated_tokens=done.completion_tokens,
        seconds=time.perf_counter() - started,
    )


def _continued_note(run: str, steps: int) -> str:
    taken = "step 1" if steps == 1 else f"steps 1–{steps}"
    return f"Continued run {run[:8]}: {taken} read the same text then, so they are taken from it"


def _answer_as_data(
    engine: Engine, prompt: str, config: AgentConfig, schema: AnswerSchema, retry_call: int
) -> Generator[Event, None, tuple[CompletionDone, Any, bool]]:
    """The final answer generated under the schema, its data, and whether that data is a list cut
    at the budget. A --schema-multi list cut at its budget keeps its complete items (said once).
    Another reply that does not match (a server that ignores response_format, an object cut at its
    budget) is asked for once more, with the next seed and, when it was cut, twice the budget; a
    second one fails the run (its reply is in the AnswerFinished before the error, so the trace
    keeps it)."""
    wire = schema.wire_json()
    budget = config.answer_tokens
    for attempt, call in enumerate((0, retry_call)):
        sampling = dataclasses.replace(sampling_for(config, call), json_schema=wire)
        done = yield from _call(engine, prompt, budget, sampling, 0)
        data, problem = schema.read(done.text)
        if problem is None:
            return done, data, False
        kept = schema.complete_items(done.text) if done.finish_reason == "length" else []
        if kept:
            whole = f"its {len(kept)} complete item{'s' if len(kept) != 1 else ''}"
            yield Notice(f"The list was cut at {budget} answer tokens: kept {whole}; raise --answer-tokens for the rest.")
            return done, kept, True
        if attempt == 0:
            more = ""
            if done.finish_reason == "length":
                budget *= 2
                more = f" with twice the answer budget ({budget} tokens)"
            yield Notice(f"The answer did not match the schema ({problem}); asking once more{more}.")
            yield ReplyRestarted(0, problem, told=True)
    yield AnswerFinished(
        raw=done.text,
        answer=done.text.strip(),
        data=None,
        found=False,
        finish_reason=done.finish_reason,
        prompt_tokens=done.prompt_tokens,
        generated_tokens=done.completion_tokens,
        seconds=done.prompt_seconds + done.generate_seconds,
    )
    cut = " (cut at its budget: raise --answer-tokens)" if done.finish_reason == "length" else ""
    raise MemagentError(f"The answer does not match --schema twice{cut}: {problem}", "The reply is kept in the run's trace.")
