"""What a person sees while many runs go (`ask --each`, `batch`): one row per run in flight.

On a terminal, a table redrawn at most `FPS` times a second: each run's document, question, step
k/N, then its answer as it lands and where its evidence lies; finished rows stay a moment, then
give way; above them, runs done of the total, tokens read, failures and the time left. Elsewhere,
a line per finished or failed run. Rows are kept only for runs in flight and the last few
finished, so 10,000 documents cost what a screenful does.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ...core.events import (
    AnswerStarted,
    DocumentRead,
    Event,
    Notice,
    OcrProgressed,
    ReplyRestarted,
    RunFailed,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    TokenText,
)
from ...core.jobs import Job
from ...core.provenance import describe_spans
from ..textout import clip, visible
from .live import FPS, duration_text, ocr_line

KEEP_FINISHED = 4  # finished rows shown under those in flight


@dataclass
class _Row:
    name: str
    question: str
    step: int = 0
    total: int | None = None
    state: str = "waiting"
    memory: str = ""
    writing: list[str] = field(default_factory=list)
    answer: str | None = None
    evidence: str = ""
    tokens: int = 0


class JobView:
    """Progress of many runs. `total` is the number of runs when known; `names` tells a run's
    row name (its document, or its custom_id) and `several` whether rows show the question."""

    def __init__(self, console: Console, total: int | None, *, live: bool, several: bool, fps: float = FPS):
        self.console = console
        self.total = total
        self.several = several
        self.rows: dict[int, _Row] = {}
        self.finished: collections.deque[_Row] = collections.deque(maxlen=KEEP_FINISHED)
        self.live = Live(console=console, auto_refresh=False, transient=False) if live else None
        self.interval = 1.0 / fps
        self.last_draw = 0.0
        self.started = time.perf_counter()
        self.done = 0
        self.failed = 0
        self.tokens = 0
        self.seen: set[str] = set()

    def __enter__(self) -> JobView:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self._render(), refresh=True)
            self.live.stop()

    def _say(self, text: str) -> None:
        console = self.live.console if self.live is not None else self.console
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _name(self, row: _Row) -> str:
        return f"{row.name} · {row.question}" if self.several else row.name

    def handle(self, job: Job, event: Event) -> None:
        if isinstance(event, Notice):
            line = ("warning: " if event.level == "warning" else "") + visible(event.message)
            if line not in self.seen:
                self.seen.add(line)
                self._say(line)
            return
        if isinstance(event, OcrProgressed):
            self._say(ocr_line(event.title, event.done, event.total, event.seconds))
            return
        key = id(job)
        if isinstance(event, RunStarted):
            self.rows[key] = _Row(job.title or job.key, event.question, state="reading")
            self._draw()
            return
        row = self.rows.get(key)
        if row is None:
            if not isinstance(event, RunFailed):
                return
            row = self.rows[key] = _Row(job.title or job.key, job.question)  # it failed before it began: no such file

        if isinstance(event, DocumentRead):
            row.total = event.steps
        elif isinstance(event, StepStarted):
            row.step, row.state, row.writing = event.index, "reading", []
            row.total = event.total_steps or row.total
            self.tokens += max(0, event.tokens_read - row.tokens)
            row.tokens = event.tokens_read
        elif isinstance(event, TokenText):
            row.writing.append(event.text)
        elif isinstance(event, ReplyRestarted):
            row.writing = []
            line = f"warning: {visible(event.reason)}"  # a server lost: said once, whatever runs it hits
            if line not in self.seen:
                self.seen.add(line)
                self._say(line)
        elif isinstance(event, StepFinished):
            row.memory = event.step.memory
        elif isinstance(event, AnswerStarted):
            row.state, row.writing = "answering", []
        elif isinstance(event, RunFinished):
            del self.rows[key]
            self.done += 1
            row.state, row.answer = "done", event.result.answer
            first = event.result.evidence[0] if event.result.evidence else None
            row.evidence = describe_spans(s.to_dict() for s in first.chunk.spans) if first is not None else ""
            self.finished.append(row)
            if self.live is None:
                self._say(
                    f"[{self._count()}] {visible(self._name(row))}: answered in {row.step} step{'s' if row.step != 1 else ''}"
                )
        elif isinstance(event, RunFailed):
            del self.rows[key]
            self.done += 1
            self.failed += 1
            row.state, row.answer = "failed", visible(str(event.error))
            self.finished.append(row)
            self._say(f"[{self._count()}] {visible(self._name(row))} failed: {visible(str(event.error))}")
        self._draw()

    def _count(self) -> str:
        return f"{self.done}/{self.total}" if self.total is not None else str(self.done)

    def summary(self) -> str:
        """Runs done of the total, tokens read, failures and the time left, in one line."""
        elapsed = time.perf_counter() - self.started
        parts = [f"runs {self._count()}", f"{self.tokens:,} tokens read"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        # Runs in flight count for the share of their steps done, so the estimate moves between answers.
        progress = self.done + sum(r.step / r.total for r in self.rows.values() if r.total)
        if self.total is not None and progress > 0 and self.done < self.total:
            parts.append(f"ETA {duration_text(elapsed / progress * (self.total - progress))}")
        parts.append(f"elapsed {duration_text(elapsed)}")
        return " · ".join(parts)

    def _draw(self) -> None:
        now = time.perf_counter()
        if self.live is None or now - self.last_draw < self.interval:
            return
        self.last_draw = now
        self.live.update(self._render(), refresh=True)

    def _render(self) -> Group:
        table = Table(box=None, show_header=False, pad_edge=False, expand=True)
        table.add_column(no_wrap=True, max_width=48)
        table.add_column(no_wrap=True)
        table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        room = max(3, self.console.size.height - 3 - len(self.finished))
        for row in list(self.rows.values())[:room]:
            where = f"step {row.step}/{row.total or '?'}" if row.state == "reading" else row.state
            memory = "".join(row.writing) or row.memory
            table.add_row(Text(clip(self._name(row), 48), style="bold"), Text(where), Text(clip(memory, 200), style="dim"))
        for row in self.finished:
            if row.state == "failed":
                table.add_row(Text(clip(self._name(row), 48), style="bold"), Text("failed", style="red"), Text(row.answer or ""))
            else:
                said = Text(clip(row.answer or "", 200), style="bold green")
                if row.evidence:
                    said.append(f"  ({clip(row.evidence, 80)})", style="dim")
                table.add_row(Text(clip(self._name(row), 48), style="bold"), Text("done"), said)
        return Group(Text(self.summary(), style="cyan"), table)
