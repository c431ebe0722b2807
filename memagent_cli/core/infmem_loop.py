"""InfMem's loop (../shared/reference/infmem-protocol.md, rule 1): the whole input read and indexed
before step 1; before each chunk a planner call that searches the input or says STOP; a memory write
that sees the passages found beside the chunk; the reading ended by the planner's `early_stop`-th
STOP in a row; then the answer from the memory. Every call thinks first, in two stages (rule 2).

The strings and the rules of a reply are infmem.py's; this module only runs them over an Engine's
raw completions (`Engine.complete_raw`: the prompts are rendered here, not by the model's chat
template, as the reference renders them) and says what happens as events.
"""

from __future__ import annotations

import dataclasses
import time
from array import array
from bisect import bisect_right
from typing import Generator, Iterator, Sequence

from ..model.engine import CompletionDone, Engine, RawPrompt
from ..model.tokenizer import Tokenizer
from . import infmem
from .agent import LoopInput, call_raw, no_text, replayed_step, sampling_for
from .chunking import Anchor, Chunk, Span
from .config import AgentConfig
from .events import (
    AnswerFinished,
    AnswerStarted,
    Decision,
    Event,
    ReadingStopped,
    Retrieved,
    SearchMade,
    StepFinished,
    StepPlanned,
    StepRecord,
    StepStarted,
    TokenText,
)
from .protocols import get as get_protocol
from .provenance import describe_spans

_START, _END = "<|im_start|>", "<|im_end|>"


def raw_chat(system: str | None, user: str) -> RawPrompt:
    """infmem.chat's text as pieces: the turn markers are control tokens, the messages are text (a
    document's `<|im_end|>` stays text: the reference's rule 4.9, chosen)."""
    pieces: list[tuple[str, bool]] = []
    if system is not None:
        pieces += [(f"{_START}system\n", True), (system, False), (f"{_END}\n", True)]
    pieces += [(f"{_START}user\n", True), (user, False), (f"{_END}\n{_START}assistant\n", True)]
    return RawPrompt(tuple(pieces))


def _cost(done: Sequence[CompletionDone]) -> tuple[int, int, float, float]:
    """(prompt tokens of the first call, generated tokens, prompt seconds, generation seconds)."""
    return (
        done[0].prompt_tokens if done else 0,
        sum(d.completion_tokens for d in done),
        sum(d.prompt_seconds for d in done),
        sum(d.generate_seconds for d in done),
    )


class RetrievalUnits:
    """The retrieval units (rule 1.2): the input's ids cut every 500 tokens, each decoded alone,
    and where each begins in the sources."""

    def __init__(self, chunks: Sequence[Chunk], tokenizer: Tokenizer):
        self.chunks = chunks
        self.starts = [c.end_token - c.tokens for c in chunks]
        ids = array("I")  # 4 bytes a token: 40 MB for 10M tokens, where a list of ints takes ~9 times that
        for c in chunks:
            ids.extend(c.ids)
        self.texts = infmem.units_of(ids, lambda part: tokenizer.decode_bytes(part).decode("utf-8", errors="replace"))
        self._tokenizer = tokenizer
        self.total = len(ids)

    def retrieved(self, unit: int) -> Retrieved:
        start = unit * infmem.UNIT_TOKENS
        end = min(self.total, start + infmem.UNIT_TOKENS)
        return Retrieved(unit, start, end, self._span(start, end))

    def _span(self, start: int, end: int) -> str:
        """Where tokens [start, end) are in words, in their sources' own units, from the first
        character of token `start` to the last of token `end - 1`: "report.pdf pp. 3–4",
        "notes.txt chars 2,123–4,188"; a unit that runs over several sources names each."""
        spans: list[Span] = []
        k = bisect_right(self.starts, start) - 1
        while k < len(self.chunks) and self.starts[k] < end:
            chunk = self.chunks[k]
            lo = _chars(self._tokenizer, chunk.ids[: max(0, start - self.starts[k])])
            hi = _chars(self._tokenizer, chunk.ids[: end - self.starts[k]])
            for run in _runs(chunk, lo, hi):
                last = spans[-1] if spans else None
                # one span per run of a source (and a document inside it) in one kind of unit, as a chunk's
                if (
                    last is not None
                    and (last.source, last.part) == (run.source, run.part)
                    and (last.last is None or run.first is None or last.last.unit == run.first.unit)
                ):
                    spans[-1] = dataclasses.replace(last, last=run.last or last.last, end=run.end, ocr=last.ocr or run.ocr)
                else:
                    spans.append(run)
            k += 1
        return describe_spans(span.to_dict() for span in spans)


def _chars(tokenizer: Tokenizer, ids: Sequence[int]) -> int:
    """The characters `ids` decode to (a character their end cuts counts as one, as in the chunk's text)."""
    return len(tokenizer.decode_bytes(ids).decode("utf-8", errors="replace")) if ids else 0


def _runs(chunk: Chunk, lo: int, hi: int) -> Iterator[Span]:
    """The sources' text among characters [lo, hi) of a chunk's text, one span per anchor's run, at
    its anchor's page (or slide, sheet…); layout text (a header, a separator) gives none."""
    titles = {span.source: span.title for span in chunk.spans}
    anchors = chunk.anchors
    for i, anchor in enumerate(anchors):
        end = anchors[i + 1].at if i + 1 < len(anchors) else len(chunk.text)
        a, b = max(anchor.at, lo), min(end, hi)
        if b <= a or anchor.source is None:
            continue
        whole = anchor.place
        place = whole if whole is not None and whole.unit is not None else None
        offset = anchor.offset - anchor.at
        yield Span(
            anchor.source,
            titles.get(anchor.source, "?"),
            place,
            place,
            offset + a,
            offset + b,
            whole.part if whole is not None else None,
            whole.ocr if whole is not None else False,
        )


class _Reading:
    """A run's state beside its memory (rule 1.3): the units and their index, the search history and
    the STOP streak; and its model calls, each two stages of thinking (rule 2)."""

    def __init__(self, chunks: Sequence[Chunk], tokenizer: Tokenizer, engine: Engine, config: AgentConfig):
        self.units = RetrievalUnits(chunks, tokenizer)
        self.search = infmem.Search(self.units.texts)
        self.engine, self.config = engine, config
        self.early_stop = config.early_stop
        self.planner_budget = config.memory_tokens
        self.history: list[tuple[str, object]] = []
        self.streak = 0

    def think(
        self, prompt: RawPrompt, call: int, step: int, budget: int, planning: bool = False
    ) -> Generator[Event, None, tuple[str, list[CompletionDone]]]:
        """One call's two stages, streamed (`planning`: the planner's, which the views show apart
        from the memory: on a CPU it thinks for minutes). Its seed is derived from the run's as
        `sampling_for` derives it, so a call samples alike whether or not the run was interrupted
        before it: the planner of step s is call 2s - 1, its write 2s, the answer 0."""
        sampling = sampling_for(self.config, call)
        first = yield from call_raw(self.engine, prompt, infmem.THINKING_TOKENS, sampling, step, planning)
        stage_one = infmem.closed_thinking(first.text)
        if stage_one != first.text:
            yield TokenText(step, infmem.FORCED_CLOSE, planning)  # the view shows what stage two continues
        second = yield from call_raw(self.engine, prompt.then(stage_one), budget, sampling, step, planning)
        return infmem.reply_of(stage_one, second.text), [first, second]

    def replayed(self, decision: Decision) -> Decision:
        """A stored step's decision, taken into the history and the streak as if made now."""
        self.history += [(search.query, search.top_k) for search in decision.searches]
        self.streak = decision.stop_streak
        return decision

    def plan(self, s: int, total: int, question: str, memory: str) -> Generator[Event, None, Decision]:
        """Step s's planner call, read (rule 1.5): its searches made and logged, the streak counted."""
        history = infmem.history_text(s, total, self.history)
        asked = infmem.PLANNER_PROMPT.format(prompt=question, retrieval_history=history, memory=memory)
        prompt = raw_chat(infmem.TOOL_SYSTEM, asked)
        reply, planned = yield from self.think(prompt, 2 * s - 1, s, self.planner_budget, planning=True)
        plan = infmem.read_plan(reply, question)
        searches = []
        for query, top_k in plan.searches:
            self.history.append((query, top_k))
            searches.append(SearchMade(query, top_k, tuple(self.units.retrieved(u) for u in self.search.top(query))))
        self.streak = infmem.stop_streak(self.streak, plan)
        tokens, generated, prompt_s, generate_s = _cost(planned)
        action = "stop" if plan.stop else "search" if searches else "none"
        return Decision(action, tuple(searches), self.streak, reply, tokens, generated, prompt_s + generate_s, self.early_stop)

    def retrieved(self, decision: Decision) -> str:
        """The block the memory write reads: the last search's units (rule 1.7), or nothing."""
        if not decision.searches:
            return ""
        return infmem.retrieved_block([self.units.texts[r.unit] for r in decision.searches[-1].found])


def run_infmem(run: LoopInput) -> Iterator[Event]:
    """InfMem over the whole input, then the final answer. A resumed run's memory, search history
    and STOP streak go on from its stored steps' decisions."""
    protocol = get_protocol(run.config.protocol)
    read = list(run.chunks)  # the search covers the whole input from step 1 (rule 6.1)
    if not read:
        # BM25 over no units divides by zero in the reference (its rule 4.7): refused instead
        raise no_text()
    total = len(read)
    yield run.document_read(total)
    reading = _Reading(read, run.tokenizer, run.engine, run.config)
    memory = protocol.initial_memory
    for chunk in read:
        s = chunk.index
        if s <= len(run.done_steps):
            stored = run.done_steps[s - 1]
            decision = reading.replayed(Decision.from_dict(stored["decision"], run.config.early_stop))
            record = dataclasses.replace(replayed_step(chunk, stored, memory), decision=decision)
            yield StepFinished(record, replayed=True)
            memory = record.memory
            continue
        yield StepStarted(s, chunk, total, chunk.end_token)
        decision = yield from reading.plan(s, total, run.question, memory)
        yield StepPlanned(s, decision)
        if decision.stop_streak >= run.config.early_stop:
            yield ReadingStopped(s - 1, total, decision.stop_streak)
            break
        retrieved = reading.retrieved(decision)
        write = raw_chat(
            None, infmem.MEMORY_PROMPT.format(prompt=run.question, retrieve=retrieved, chunk=chunk.text, memory=memory)
        )
        reply, written = yield from reading.think(write, 2 * s, s, run.config.memory_tokens)
        new_memory = protocol.next_memory(reply)
        w_tokens, w_generated, w_prompt_s, w_generate_s = _cost(written)
        yield StepFinished(
            StepRecord(
                index=s,
                chunk=chunk,
                memory=new_memory,
                previous_memory=memory,
                memory_tokens=len(run.tokenizer.encode(new_memory)),
                prompt_tokens=w_tokens,
                cached_tokens=sum(d.cached_tokens for d in written),
                generated_tokens=w_generated,
                finish_reason=written[-1].finish_reason,
                prompt_seconds=w_prompt_s,  # the write's; the step's `seconds` add its planner's
                generate_seconds=w_generate_s,
                decision=decision,
            )
        )
        memory = new_memory

    yield AnswerStarted(len(run.tokenizer.encode(memory)))
    started = time.perf_counter()
    final = raw_chat(None, protocol.final_prompt(run.question, memory, run.config.final, run.config.final_instructions()))
    reply, answered = yield from reading.think(final, 0, 0, run.config.answer_tokens)
    answer, found = protocol.extract_answer(reply, run.config.final)
    yield AnswerFinished(
        raw=reply,
        answer=answer,
        found=found,
        finish_reason=answered[-1].finish_reason,
        prompt_tokens=answered[0].prompt_tokens,
        generated_tokens=sum(d.completion_tokens for d in answered),
        seconds=time.perf_counter() - started,
    )


def units_read(step: StepRecord, chunks: Sequence[Chunk], tokenizer: Tokenizer) -> list[Chunk]:
    """The retrieved units a step's memory write read beside its chunk (its last search's), each as
    a chunk of its own: the text it holds and the anchors that place it, numbered as the step. The
    quotes are drawn from them as from the chunks: a run that stopped early may have found its
    answer only there, in a part of the input it never read in order. A unit is the input's ids cut
    every 500 tokens, so with chunks that are not a multiple of 500 (--chunk-tokens 128, 2048) it
    runs over several chunks: its text is their parts in turn."""
    if step.decision is None or not step.decision.searches:
        return []
    starts = [c.end_token - c.tokens for c in chunks]
    out = []
    for unit in step.decision.searches[-1].found:
        k = bisect_right(starts, unit.start_token) - 1
        if k < 0:
            continue
        text, anchors, spans = "", list[Anchor](), list[Span]()
        while k < len(chunks) and starts[k] < unit.end_token:
            chunk = chunks[k]
            lo = _chars(tokenizer, chunk.ids[: max(0, unit.start_token - starts[k])])
            hi = _chars(tokenizer, chunk.ids[: unit.end_token - starts[k]])
            part: list[Anchor] = []
            for a in chunk.anchors:
                if a.at >= hi:
                    break
                if a.at <= lo:  # the run the part begins in: from the part's first character
                    offset = a.offset + (lo - a.at) if a.source is not None else a.offset
                    part = [Anchor(len(text), a.source, offset, a.place)]
                else:
                    part.append(Anchor(len(text) + a.at - lo, a.source, a.offset, a.place))
            anchors += part
            spans += [span for span in chunk.spans if span not in spans]
            text += chunk.text[lo:hi]
            k += 1
        out.append(Chunk(step.index, text, unit.end_token - unit.start_token, tuple(spans), unit.end_token, tuple(anchors)))
    return out
