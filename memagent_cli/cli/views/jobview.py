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
from dataclasses import dataclass
from typing import Any, Mapping

from rich.console import Console, Group
from rich.text import Text

from ...core.events import Event, ReplyRestarted, RunFailed, RunFinished, RunStarted, StepStarted
from ...core.jobs import Job
from ...core.provenance import describe_spans
from ..textout import clip, visible
from .live import FPS, duration_text
from .rows import Row, RowsView, rows_table

KEEP_FINISHED = 4  # finished rows shown under those in flight


@dataclass
class _Row(Row):
    name: str = ""  # its document, or its custom_id
    evidence: str = ""  # where its answer's evidence lies
    tokens: int = 0  # document tokens it has read


class JobView(RowsView):
    """Progress of many runs. `total` is the number of runs when known; `several` tells whether
    rows show the question beside their name (its document, or its custom_id)."""

    def __init__(self, console: Console, total: int | None, *, live: bool, several: bool, fps: float = FPS):
        super().__init__(console, live=live, fps=fps)
        self.total = total
        self.several = several
        self.rows: dict[int, _Row] = {}
        self.finished: collections.deque[_Row] = collections.deque(maxlen=KEEP_FINISHED)
        self.started = time.perf_counter()
        self.done = 0
        self.failed = 0
        self.reused = 0  # of `done`: answered from the trace store, reading nothing
        self.tokens = 0

    def _name(self, row: _Row) -> str:
        return f"{row.name} · {row.question}" if self.several else row.name

    def handle(self, job: Job, event: Event) -> None:
        if self._said_aside(event):
            return
        key = id(job)
        if isinstance(event, RunStarted):
            self.rows[key] = _Row(name=job.title or job.key, question=event.question, state="reading")
            self._draw()
            return
        row = self.rows.get(key)
        if row is None:
            if not isinstance(event, RunFailed):
                return
            # it failed before it began: no such file
            row = self.rows[key] = _Row(name=job.title or job.key, question=job.question)

        row.follow(event)
        if isinstance(event, StepStarted):
            self.tokens += max(0, event.tokens_read - row.tokens)
            row.tokens = event.tokens_read
        elif isinstance(event, ReplyRestarted) and not event.told:
            self._say_once(f"warning: {visible(event.reason)}")  # a server lost: said once, whatever runs it hits
        elif isinstance(event, RunFinished):
            del self.rows[key]
            self.done += 1
            row.state, row.answer = "done", event.result.answer
            first = event.result.evidence[0] if event.result.evidence else None
            quotes = event.result.quotes
            # where the answer is: its first quote's place (a page), else the first evidence step's (pages)
            row.evidence = (
                quotes[0].location
                if quotes
                else describe_spans(s.to_dict() for s in first.chunk.spans)
                if first is not None
                else ""
            )
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

    def answered(self, job: Job, record: Mapping[str, Any], note: str) -> None:
        """A run answered from the trace store (`note` says which run): done, reading nothing."""
        self.done += 1
        self.reused += 1
        row = _Row(name=job.title or job.key, question=job.question, state="reused", answer=str(record.get("answer") or ""))
        quotes = record.get("quotes") or []
        evidence = record.get("evidence") or []
        first = str(quotes[0].get("location") or "") if quotes else None
        row.evidence = first if first is not None else describe_spans(evidence[0]["spans"]) if evidence else ""
        self.finished.append(row)
        if self.live is None:
            self._say(f"[{self._count()}] {visible(self._name(row))}: {note}")
        self._draw()

    def _count(self) -> str:
        return f"{self.done}/{self.total}" if self.total is not None else str(self.done)

    def summary(self) -> str:
        """Runs done of the total, tokens read, failures and the time left, in one line."""
        elapsed = time.perf_counter() - self.started
        parts = [f"runs {self._count()}", f"{self.tokens:,} tokens read"]
        if self.reused:
            parts.append(f"{self.reused} answered before")
        if self.failed:
            parts.append(f"{self.failed} failed")
        # Runs in flight count for the share of their steps done, so the estimate moves between answers;
        # an estimate that has run out is not said (never "ETA 0:00" with a run still going). Answers
        # given again took no time: the estimate is of the runs that read.
        progress = self.done - self.reused + sum(r.share_done() for r in self.rows.values())
        if self.total is not None and progress > 0 and self.done < self.total:
            left = elapsed / progress * (self.total - self.reused - progress)
            if left >= 1:
                parts.append(f"ETA {duration_text(left)}")
        parts.append(f"elapsed {duration_text(elapsed)}")
        return " · ".join(parts)

    def _render(self) -> Group:
        table = rows_table(name_width=48)
        room = max(3, self.console.size.height - 3 - len(self.finished))
        for row in list(self.rows.values())[:room]:
            table.add_row(
                Text(clip(self._name(row), 48), style="bold"), Text(row.where()), Text(clip(row.latest(), 200), style="dim")
            )
        for row in self.finished:
            if row.state == "failed":
                table.add_row(Text(clip(self._name(row), 48), style="bold"), Text("failed", style="red"), Text(row.answer or ""))
            else:
                said = Text(clip(row.answer or "", 200), style="bold green")
                if row.evidence:
                    said.append(f"  ({clip(row.evidence, 80)})", style="dim")
                table.add_row(Text(clip(self._name(row), 48), style="bold"), Text(row.state), said)
        return Group(Text(self.summary(), style="cyan"), table)
