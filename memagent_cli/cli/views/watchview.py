"""What a person sees while `memagent watch` keeps a folder's answers current: a row per document
(and question), and what happened last.

On a terminal, a table redrawn at most `FPS` times a second: each document's state (settling while
it is still being written, growing while a log is (its answer so far), queued, reading step k/N,
answered, answered before, failed) and its answer or error, with the last few events under it.
Elsewhere (a pipe, a log, a service), one line per event on stderr, and nothing else.
"""

from __future__ import annotations

import collections
import time

from rich.console import Console, Group
from rich.text import Text

from ...core.events import Event, RunFailed, RunFinished, RunStarted
from ...core.jobs import Job
from ..textout import clip, visible
from .live import FPS
from .rows import Row, RowsView, rows_table

EVENTS_SHOWN = 5  # the last events under the table
STYLES = {
    "answered": "bold green",
    "answered before": "green",
    "growing": "yellow",
    "failed": "red",
    "settling": "dim",
    "queued": "dim",
}


class WatchView(RowsView):
    """Every document watched, by its row key (a document, and its question where there are several)."""

    def __init__(self, console: Console, *, live: bool, several: bool, fps: float = FPS):
        super().__init__(console, live=live, fps=fps)
        self.several = several
        self.rows: dict[str, Row] = {}
        self.names: dict[str, str] = {}
        self.events: collections.deque[str] = collections.deque(maxlen=EVENTS_SHOWN)

    def _name(self, job: Job) -> str:
        return f"{job.title} · {job.question}" if self.several else job.title

    def _row(self, job: Job) -> Row:
        self.names[job.key] = self._name(job)
        return self.rows.setdefault(job.key, Row(question=job.question))

    def state(self, job: Job, state: str, said: str | None = None, line: str | None = None) -> None:
        """A row's new state (and its answer or error), and the line that tells it."""
        row = self._row(job)
        row.state = state
        if said is not None:
            row.answer = said
        if line is not None:
            self.tell(f"{visible(self._name(job))}: {line}")
        self._draw()

    def gone(self, job: Job) -> None:
        """A document no longer there: its row leaves."""
        if self.rows.pop(job.key, None) is not None:
            self.tell(f"{visible(self._name(job))}: gone, its row removed")
        self._draw()

    def tell(self, line: str) -> None:
        """One event: under the table, or a line of its own."""
        self.events.append(f"{time.strftime('%H:%M:%S')} {line}")
        if self.live is None:
            self._say(line)
        self._draw()

    def handle(self, job: Job, event: Event) -> None:
        """A run's events move its row on (reading step k/N); its end is said by `state`."""
        if self._said_aside(event, f"{visible(self._name(job))}: "):
            return
        row = self._row(job)
        if isinstance(event, RunStarted):
            row.state = "reading"
        elif not isinstance(event, (RunFinished, RunFailed)):
            row.follow(event)
        self._draw()

    def __enter__(self) -> WatchView:
        super().__enter__()
        return self

    def _render(self) -> Group:
        table = rows_table(name_width=48)
        room = max(3, self.console.size.height - 4 - len(self.events))
        for key, row in list(self.rows.items())[:room]:
            if row.state == "reading" or row.state == "answering":
                now = Text(clip(row.latest(), 200), style="dim")
            else:
                now = Text(clip(row.answer or "", 200), style=STYLES.get(row.state, ""))
            table.add_row(Text(clip(self.names[key], 48), style="bold"), Text(row.where()), now)
        more = len(self.rows) - room
        footer = [Text(f"… and {more} more", style="dim")] if more > 0 else []
        return Group(table, *footer, *(Text(line, style="cyan") for line in self.events))
