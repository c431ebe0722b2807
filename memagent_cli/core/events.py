"""Typed events of one MemAgent run, and the result they add up to.

The agent yields these; the live view, the JSON output (and later the trace store) consume
them. Nothing here knows how it will be shown.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TypedDict, Union

from ..ingest.sources import Source
from .chunking import Chunk, SpanDict
from .config import AgentConfig
from .memdiff import evidence_record
from .quotes import Quote


class _ModelFields(TypedDict):
    name: str
    path: str | None  # None for a served model
    size: int | None  # None for a served model


class ModelRecord(_ModelFields, total=False):
    """The model in JSON and traces (docs/JSON.md, "model")."""

    servers: list[str]  # a served model's servers


def model_record(name: str, path: str, servers: Sequence[str] = ()) -> ModelRecord:
    """The model as every JSON output and trace gives it (docs/JSON.md, "model"): a GGUF's name,
    absolute path and size, or a served model's name and servers (path and size None)."""
    if servers:
        return {"name": name, "path": None, "size": None, "servers": list(servers)}
    if os.path.isfile(path):
        return {"name": name, "path": os.path.abspath(path), "size": os.path.getsize(path)}
    return {"name": name, "path": path, "size": None}


@dataclass(frozen=True)
class RunStarted:
    question: str
    model: str  # the model's name
    model_path: str
    sources: tuple[Source, ...]
    config: AgentConfig
    tokenizer: str
    ocr: str = "auto"  # how scanned pages and images were read (--ocr), kept so a resumed run reads them alike
    servers: tuple[str, ...] = ()  # a served model's servers (model_path is then "")
    asked: str = ""  # a follow-up's question as asked, where `question` is the problem holding the earlier turns


@dataclass(frozen=True)
class Notice:
    """Something the user should know that does not stop the run."""

    message: str
    level: str = "warning"  # "warning" | "info"


@dataclass(frozen=True)
class OcrProgressed:
    """OCR recognised a page (or an image) of a document: page `done` of `total`, after
    `seconds` of recognition in that document. Comes from the reading thread, between steps or
    before the first."""

    title: str
    done: int
    total: int
    seconds: float

    @property
    def pages_per_second(self) -> float | None:
        return self.done / self.seconds if self.seconds > 0 else None


@dataclass(frozen=True)
class ModelLoaded:
    device: str  # where it runs, e.g. "GPU (28/28 layers offloaded)"
    n_ctx: int
    seconds: float
    gpu_layers: int = 0  # as passed to llama.cpp: -1 all, 0 none
    gpu_reason: str = ""  # why: what fit in how much free memory, or that the build is CPU-only


@dataclass(frozen=True)
class DocumentRead:
    """The whole input has been read: totals are final from here on."""

    document_tokens: int
    steps: int
    source_tokens: tuple[int, ...] = ()  # per source, in order: the tokens its text became
    source_pages: tuple[int, ...] = ()  # per source: the last unit number read (page, slide…; 0 for running text)
    source_units: tuple[str | None, ...] = ()  # per source: its unit ("page", "slide", …), None for running text


@dataclass(frozen=True)
class StepStarted:
    index: int  # 1-based
    chunk: Chunk
    total_steps: int | None  # None while the input is still being read
    tokens_read: int  # document tokens read by the end of this chunk


@dataclass(frozen=True)
class TokenText:
    """A piece of text as the model writes it. step 0 is the final answer. `planning`: InfMem's
    planner thinking before the step's write (the memory is not being written yet)."""

    step: int
    text: str
    planning: bool = False


@dataclass(frozen=True)
class PromptProgressed:
    """The engine has read `done` of the `total` prompt tokens of step `step` (0: the final answer)
    before writing: on a CPU a chunk's prompt takes tens of seconds."""

    step: int
    done: int
    total: int


@dataclass(frozen=True)
class ReplyRestarted:
    """A reply is asked for again (a served engine lost it; an answer did not match the schema):
    its text so far is void."""

    step: int  # 0 is the final answer
    reason: str
    told: bool = False  # a Notice said it already: a view that says restarts leaves this one out


PASSAGE_SEPARATOR = " | "  # between the places of the passages a search found, in a plan line


@dataclass(frozen=True)
class Retrieved:
    """A retrieval unit an InfMem search found: its place among the input's 500-token units."""

    unit: int  # 0-based: the input's ids [500 * unit, 500 * unit + 500)
    start_token: int
    end_token: int
    location: str  # where its text is, in its source's units: "report.pdf pp. 31–32", "notes.txt chars 0–2,140"

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "start_token": self.start_token, "end_token": self.end_token, "location": self.location}


@dataclass(frozen=True)
class SearchMade:
    """One search a planner reply asked for: the query searched, `top_k` as the model wrote it (shown
    to the planner, not used: a search writes 4 units), and the units found, best first."""

    query: str
    top_k: Any
    found: tuple[Retrieved, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "top_k": self.top_k, "units": [r.to_dict() for r in self.found]}


@dataclass(frozen=True)
class Decision:
    """What InfMem's planner decided before a step (docs/JSON.md, "decision")."""

    action: str  # "search"; "stop"; "none": no STOP and no search (the chunk is read all the same)
    searches: tuple[SearchMade, ...]
    stop_streak: int  # STOP replies in a row so far; the run ends at --early-stop
    reply: str  # the planner's whole reply, thinking included: the trace keeps it, a resume replays it
    prompt_tokens: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    stop_at: int = 3  # the run's --early-stop

    def describe(self) -> str:
        """The decision in words, for the views: the search and where it found, or the STOP count."""
        if self.action == "stop":
            return f"STOP {self.stop_streak}/{self.stop_at}"
        if self.action == "none":
            return "no search" + (f" (streak {self.stop_streak}/{self.stop_at})" if self.stop_streak else "")
        parts = []
        for search in self.searches:
            # a passage over several sources is itself "a.txt chars 9–80; b.txt chars 0–1,200"
            places = list(dict.fromkeys(r.location for r in search.found))
            parts.append(f"search {search.query!r} found {PASSAGE_SEPARATOR.join(places) or 'nothing'}")
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "searches": [s.to_dict() for s in self.searches],
            "stop_streak": self.stop_streak,
            "reply": self.reply,
        }

    @classmethod
    def from_dict(cls, record: Mapping[str, Any], stop_at: int) -> "Decision":
        """A decision as a trace keeps it (to_dict), for a resumed run."""
        searches = tuple(
            SearchMade(s["query"], s["top_k"], tuple(Retrieved(**unit) for unit in s["units"])) for s in record["searches"]
        )
        return cls(record["action"], searches, record["stop_streak"], record["reply"], stop_at=stop_at)


@dataclass(frozen=True)
class StepPlanned:
    """InfMem's planner has decided what step `index` reads beside its chunk (or to stop)."""

    index: int
    decision: Decision


@dataclass(frozen=True)
class ReadingStopped:
    """The planner said STOP `streak` times in a row: the answer comes from the memory after
    `read` of the input's `total` chunks."""

    read: int
    total: int
    streak: int

    def describe(self) -> str:
        return f"stopped early after {self.read} of {self.total} chunks (STOP {self.streak} times in a row)"


class _StepFields(TypedDict):
    """A step as JSON and the trace store give it (docs/JSON.md, "step")."""

    index: int
    tokens: int
    spans: list[SpanDict]
    memory: str
    memory_tokens: int
    prompt_tokens: int
    generated_tokens: int
    drafted_tokens: int
    accepted_tokens: int
    finish_reason: str
    seconds: float


class StepDict(_StepFields, total=False):
    decision: dict[str, Any]  # InfMem's steps: what the planner decided before the step


@dataclass(frozen=True)
class StepRecord:
    index: int
    chunk: Chunk
    memory: str  # the memory after this step
    previous_memory: str
    memory_tokens: int
    prompt_tokens: int
    cached_tokens: int
    generated_tokens: int
    finish_reason: str  # "stop" or "length" (cut at --memory-tokens)
    prompt_seconds: float
    generate_seconds: float
    drafted_tokens: int = 0  # --speculate: tokens drafted for this memory, and the model's share of them
    accepted_tokens: int = 0
    decision: Decision | None = None  # InfMem: the planner's decision before the step

    @property
    def seconds(self) -> float:
        """The step's time: its memory write's, and its planner's where it has one (InfMem)."""
        return self.prompt_seconds + self.generate_seconds + (self.decision.seconds if self.decision is not None else 0.0)

    def to_dict(self) -> StepDict:
        """The one shape of a step wherever it is printed or stored (docs/JSON.md, "step")."""
        record: StepDict = {
            "index": self.index,
            "tokens": self.chunk.tokens,
            "spans": [span.to_dict() for span in self.chunk.spans],
            "memory": self.memory,
            "memory_tokens": self.memory_tokens,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "finish_reason": self.finish_reason,
            "seconds": round(self.seconds, 4),
        }
        if self.decision is not None:
            record["decision"] = self.decision.to_dict()
        return record


@dataclass(frozen=True)
class StepFinished:
    step: StepRecord
    replayed: bool = False  # not run again: done before an interruption, or by the run in `copied_from`
    copied_from: str | None = None  # the earlier run (over an earlier version of the text) it was taken from


@dataclass(frozen=True)
class AnswerStarted:
    prompt_tokens_estimate: int  # the memory's tokens: the rest of the prompt is fixed


@dataclass(frozen=True)
class AnswerFinished:
    raw: str
    answer: str
    found: bool  # False when the reply had no answer in the expected form (answer = whole reply)
    finish_reason: str
    prompt_tokens: int
    generated_tokens: int
    seconds: float
    data: Any = None  # under --schema: the answer read as JSON and validated (a list with --schema-multi)
    data_truncated: bool = False  # a --schema-multi list cut at its budget: `data` holds its complete items


@dataclass
class RunResult:
    question: str
    answer: str
    raw_answer: str
    memory: str
    model: str
    model_path: str
    device: str
    sources: list[dict[str, Any]]
    document_tokens: int
    config: AgentConfig
    n_ctx: int
    steps: list[StepRecord] = field(default_factory=list)
    evidence: list[StepRecord] = field(default_factory=list)  # steps that added what the final memory still says
    quotes: list[Quote] = field(default_factory=list)  # the sentences of the sources the answer rests on, best first
    timings: dict[str, Any] = field(default_factory=dict)
    gpu: dict[str, Any] = field(default_factory=dict)  # the offload choice: layers and why
    servers: tuple[str, ...] = ()  # a served model's servers (model_path is then "")
    data: Any = None  # under --schema: the answer as data (AnswerFinished.data); None otherwise
    data_truncated: bool = False  # AnswerFinished.data_truncated
    evidence_by_field: dict[str, list[Quote]] = field(default_factory=dict)  # under --schema: each field's quotes
    continued_from: dict[str, Any] | None = None  # {"run", "step"}: the first steps were taken from that run
    answer_cut: bool = False  # the answer ran out of its budget (--answer-tokens): it may end mid-sentence
    notes: list[str] = field(default_factory=list)  # what the run told on the way (a running head left out, a page skipped)

    def to_dict(self) -> dict[str, Any]:
        """What `ask --json` prints, less the "schema" and "trace" keys the CLI adds (docs/JSON.md)."""
        steps = [s.to_dict() for s in self.steps]
        chosen = {s.index for s in self.evidence}
        return {
            "question": self.question,
            "answer": self.answer,
            "data": self.data,
            **({"data_truncated": True} if self.data_truncated else {}),
            "raw_answer": self.raw_answer,
            "answer_cut": self.answer_cut,
            "notes": list(self.notes),
            "memory": self.memory,
            "model": model_record(self.model, self.model_path, self.servers),
            "device": self.device,
            "gpu": self.gpu,
            "sources": self.sources,
            "document_tokens": self.document_tokens,
            "chunk_tokens": self.config.chunk_tokens,
            "n_ctx": self.n_ctx,
            "settings": self.config.to_dict(),
            "steps": steps,
            "evidence": [evidence_record(step) for step in steps if step["index"] in chosen],
            "quotes": [q.to_dict() for q in self.quotes],
            **(
                {"evidence_by_field": {name: [q.to_dict() for q in found] for name, found in self.evidence_by_field.items()}}
                if self.config.answer_schema
                else {}
            ),
            "timings": self.timings,
            "continued_from": self.continued_from,
            "reused_from": None,  # a run that read; an answer found in the store says which run it was
        }


@dataclass(frozen=True)
class RunFinished:
    """The last event of a run that did not fail."""

    result: RunResult  # what its events added up to (to_dict(): what `ask --json` prints)


@dataclass(frozen=True)
class RunFailed:
    """The run stopped on an error (a served engine gone, a bug); its steps so far are kept."""

    error: BaseException


Event = Union[
    RunStarted,
    Notice,
    OcrProgressed,
    ModelLoaded,
    DocumentRead,
    StepStarted,
    PromptProgressed,
    TokenText,
    StepFinished,
    AnswerStarted,
    AnswerFinished,
    RunFinished,
    RunFailed,
    ReplyRestarted,
    StepPlanned,
    ReadingStopped,
]
