"""What a person sees while several questions (or eval items) run at once: a row each.

On a terminal, a table redrawn at most `FPS` times a second: every question's step, the
first line of its memory as it stands, then its answer. Elsewhere, one line per step and per
answer, each prefixed with the question's number. Events arrive as (index, event); index
None is a notice about the whole input, shown once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ...core.events import (
    AnswerFinished,
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
from ..textout import clip, visible
from .live import FPS, ocr_line


@dataclass
class _Row:
    question: str = ""
    step: int = 0
    total: int | None = None
    state: str = "waiting"
    memory: str = ""
    writing: list[str] = field(default_factory=list)
    answer: str | None = None


class MultiView:
    """Progress of several runs: `live` draws a table on a terminal, else plain lines."""

    def __init__(self, console: Console, count: int, *, live: bool, fps: float = FPS):
        self.console = console
        self.rows = [_Row() for _ in range(count)]
        self.live = Live(console=console, auto_refresh=False, transient=False) if live else None
        self.interval = 1.0 / fps
        self.last_draw = 0.0
        self.seen: set[str] = set()

    def __enter__(self) -> "MultiView":
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self._table(), refresh=True)
            self.live.stop()

    def _say(self, text: str) -> None:
        if self.live is not None:
            self.live.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def handle(self, index: int | None, event: Event) -> None:
        if isinstance(event, Notice):
            line = ("warning: " if event.level == "warning" else "") + visible(event.message)
            if index is not None:
                line = f"Q{index + 1}: {line}"
            if line not in self.seen:  # a notice about the input reaches every question
                self.seen.add(line)
                self._say(line)
            return
        if isinstance(event, OcrProgressed):  # the input is read once, for every question
            self._say(ocr_line(event.title, event.done, event.total, event.seconds))
            return
        if index is None:
            return
        row = self.rows[index]
        if isinstance(event, RunStarted):
            row.question = event.question
        elif isinstance(event, DocumentRead):
            row.total = event.steps
        elif isinstance(event, StepStarted):
            row.step, row.state, row.writing = event.index, "reading", []
            row.total = event.total_steps or row.total
        elif isinstance(event, TokenText):
            row.writing.append(event.text)
        elif isinstance(event, ReplyRestarted):
            row.writing = []
        elif isinstance(event, StepFinished):
            row.memory = event.step.memory
            if self.live is None:
                self._say(
                    f"Q{index + 1} step {event.step.index}/{row.total or '?'}: {event.step.memory_tokens} memory "
                    f"tokens, {event.step.seconds:.2f}s"
                )
        elif isinstance(event, AnswerStarted):
            row.state, row.writing = "answering", []
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

    def _draw(self) -> None:
        now = time.perf_counter()
        if self.live is None or now - self.last_draw < self.interval:
            return
        self.last_draw = now
        self.live.update(self._table(), refresh=True)

    def _table(self) -> Table:
        table = Table(box=None, show_header=False, pad_edge=False, expand=True)
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        for i, row in enumerate(self.rows):
            where = f"step {row.step}/{row.total or '?'}" if row.state == "reading" else row.state
            if row.answer is not None:
                now = Text(f"answer: {clip(row.answer, 200)}", style="bold green")
            elif row.state == "failed":
                now = Text("failed", style="red")
            else:
                memory = "".join(row.writing) or row.memory
                now = Text(clip(memory, 200), style="dim")
            table.add_row(Text(f"Q{i + 1} {clip(row.question, 40)}", style="bold"), Text(where), now)
        return table
