"""What a person sees while several questions (or eval items) run at once: a row each.

On a terminal, a table redrawn at most `FPS` times a second: every question's step, the
first line of its memory as it stands, then its answer. Elsewhere, one line per step and per
answer, each prefixed with the question's number. Events arrive as (index, event); index
None is a notice about the whole input, shown once.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...core.events import AnswerFinished, Event, RunFailed, RunFinished, RunStarted, StepFinished
from ..textout import clip, visible
from .live import FPS
from .rows import Row, RowsView, rows_table


class MultiView(RowsView):
    """Progress of several runs: `live` draws a table on a terminal, else plain lines."""

    def __init__(self, console: Console, count: int, *, live: bool, fps: float = FPS):
        super().__init__(console, live=live, fps=fps)
        self.rows = [Row() for _ in range(count)]

    def handle(self, index: int | None, event: Event) -> None:
        if self._said_aside(event, f"Q{index + 1}: " if index is not None else ""):
            return
        if index is None:
            return
        row = self.rows[index]
        row.follow(event)
        if isinstance(event, RunStarted):
            row.question = event.question
        elif isinstance(event, StepFinished):
            if self.live is None:
                self._say(
                    f"Q{index + 1} step {event.step.index}/{row.total or '?'}: {event.step.memory_tokens} memory "
                    f"tokens, {event.step.seconds:.2f}s"
                )
        elif isinstance(event, AnswerFinished):
            row.state, row.answer = "done", event.answer
        elif isinstance(event, RunFinished):
            row.state = "done"
            if self.live is None:
                self._say(f"Q{index + 1} answered: {clip(event.result.answer, 120)}")
        elif isinstance(event, RunFailed):
            row.state = "failed"
            self._say(f"Q{index + 1} failed: {visible(str(event.error))}")
        self._draw()

    def answered(self, index: int, question: str, answer: str) -> None:
        """A question answered from the trace store: it reads nothing."""
        row = self.rows[index]
        row.question, row.state, row.answer = question, "answered before", answer

    def _render(self) -> Table:
        table = rows_table()
        for i, row in enumerate(self.rows):
            if row.answer is not None:
                now = Text(f"answer: {clip(row.answer, 200)}", style="bold green")
            elif row.state == "failed":
                now = Text("failed", style="red")
            else:
                now = Text(clip(row.latest(), 200), style="dim")
            table.add_row(Text(f"Q{i + 1} {clip(row.question, 40)}", style="bold"), Text(row.where()), now)
        return table
