"""What the views of several runs at once share (`jobview` for `ask --each` and `batch`,
`multiview` for several questions and eval): a row per run, moved on by its run's events, and a
table of them redrawn at most `FPS` times a second on a terminal; elsewhere, lines."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table

from ...core.events import (
    AnswerStarted,
    DocumentRead,
    Event,
    Notice,
    OcrProgressed,
    PromptProgressed,
    ReplyRestarted,
    StepFinished,
    StepPlanned,
    StepStarted,
    TokenText,
)
from ..textout import visible
from .live import FPS, TICKS, ocr_line


@dataclass
class Row:
    """One run: its step, its state, the memory as it stands or is being written, its answer."""

    question: str = ""
    step: int = 0
    total: int | None = None
    state: str = "waiting"
    memory: str = ""
    writing: list[str] = field(default_factory=list)
    answer: str | None = None
    prompt: tuple[int, int] | None = None  # (read, of) tokens of the prompt being read, before writing
    planning: bool = False  # InfMem's planner is thinking (before the step's write)

    def follow(self, event: Event) -> None:
        """Moves the row on by one of its run's events, up to its answer (whose end each view shows its own way)."""
        if isinstance(event, DocumentRead):
            self.total = event.steps
        elif isinstance(event, StepStarted):
            self.step, self.state, self.writing, self.planning = event.index, "reading", [], False
            self.total = event.total_steps or self.total
        elif isinstance(event, PromptProgressed):
            self.prompt = (event.done, event.total) if event.done < event.total else None
        elif isinstance(event, TokenText):
            self.prompt = None
            if event.planning:  # InfMem's planner: where() says so; its text is not the memory
                self.planning = True
            else:
                self.writing.append(event.text)
        elif isinstance(event, StepPlanned):
            self.planning = False
        elif isinstance(event, ReplyRestarted):
            self.writing = []  # the reply is asked for again, from its start
        elif isinstance(event, StepFinished):
            self.memory = event.step.memory
        elif isinstance(event, AnswerStarted):
            self.state, self.writing, self.prompt, self.planning = "answering", [], None, False

    def where(self) -> str:
        if self.state != "reading":
            return self.state
        read = f" · prompt {self.prompt[0]:,}/{self.prompt[1]:,}" if self.prompt is not None else ""
        return f"step {self.step}/{self.total or '?'}{read}{' · planning' if self.planning else ''}"

    def share_done(self) -> float:
        """How much of its run is done, 0 to 1: its finished steps, the current step's prompt read
        (as half the step), with the answer counted as one step more. Never 1 before the end."""
        if not self.total:
            return 0.0
        if self.state == "answering":
            return self.total / (self.total + 1)
        current = 0.5 * self.prompt[0] / self.prompt[1] if self.prompt is not None and self.prompt[1] else 0.0
        return (max(self.step - 1, 0) + current) / (self.total + 1)

    def latest(self) -> str:
        """The memory being written, else the last one written."""
        return "".join(self.writing) or self.memory


def rows_table(name_width: int | None = None) -> Table:
    """The table of rows: a run's name, where it is, what it writes (cut to the width left)."""
    table = Table(box=None, show_header=False, pad_edge=False, expand=True)
    table.add_column(no_wrap=True, max_width=name_width)
    table.add_column(no_wrap=True)
    table.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    return table


class _Drawn:
    """A renderable drawn anew each time it is shown (by an event, or by the timer)."""

    def __init__(self, draw: Callable[[], RenderableType]):
        self.draw = draw

    def __rich__(self) -> RenderableType:
        return self.draw()


class RowsView:
    """Draws `_render()` live on a terminal (`live`), at most `fps` times a second, and says lines
    above it (or alone, elsewhere)."""

    def __init__(self, console: Console, *, live: bool, fps: float = FPS):
        self.console = console
        # On a terminal a timer redraws the table TICKS times a second too, so its clock moves
        # while every run reads a long prompt.
        self.live = (
            Live(_Drawn(self._render), console=console, auto_refresh=True, refresh_per_second=TICKS, transient=False)
            if live
            else None
        )
        self.interval = 1.0 / fps
        self.last_draw = 0.0
        self.seen: set[str] = set()

    def __enter__(self) -> RowsView:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.refresh()
            self.live.stop()

    def _render(self) -> RenderableType:
        raise NotImplementedError

    def _draw(self) -> None:
        now = time.perf_counter()
        if self.live is None or now - self.last_draw < self.interval:
            return
        self.last_draw = now
        self.live.refresh()

    def _say(self, text: str) -> None:
        console = self.live.console if self.live is not None else self.console
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _say_once(self, text: str) -> None:
        """Says `text` unless it was said: a notice about the input, or a lost server, reaches every run."""
        if text not in self.seen:
            self.seen.add(text)
            self._say(text)

    def _said_aside(self, event: Event, prefix: str = "") -> bool:
        """Says a notice (once, after `prefix`) or OCR progress (the input is read once, for every
        run); whether `event` was one."""
        if isinstance(event, Notice):
            self._say_once(prefix + ("warning: " if event.level == "warning" else "") + visible(event.message))
        elif isinstance(event, OcrProgressed):
            self._say(ocr_line(event.title, event.done, event.total, event.seconds))
        else:
            return False
        return True
