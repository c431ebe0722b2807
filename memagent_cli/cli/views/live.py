"""What a person watching sees on stderr: the live view, or plain progress lines.

Both consume the agent's events. The live view keeps a little state and redraws at most
`FPS` times a second from the thread that runs the model, and less often where a redraw is slow
(DRAW_SHARE), so a fast model is never held up by drawing (a redraw costs milliseconds; a token
costs far less on a small model).
"""

from __future__ import annotations

import os
import time

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ...core.events import (
    AnswerFinished,
    AnswerStarted,
    DocumentRead,
    Event,
    ModelLoaded,
    Notice,
    OcrProgressed,
    PromptProgressed,
    ReadingStopped,
    ReplyRestarted,
    RunFinished,
    RunResult,
    RunStarted,
    StepFinished,
    StepPlanned,
    StepStarted,
    TokenText,
)
from ...core.memdiff import changes
from ...core.protocols import get as get_protocol
from ...core.quotes import describe_quotes
from ..textout import clip, visible

FPS = 8
# A redraw takes at most this share of the time between redraws: where drawing is slow (a long memory
# to wrap, a slow terminal) the view draws less often, so the model never waits on it for long.
DRAW_SHARE = 0.02
TICKS = 2  # redraws a second with no event, so the clock moves while a CPU reads a long prompt
MEMORY_LINES = 12  # lines of the memory shown while it is written
PLAN_LINES = 4  # lines of a qwenlong plan shown under the memory
MEMORY_CHARS = 900  # and at most this much of its end: one long line wraps to many rows
CHANGE_CHARS = 160  # how much added/dropped text a step summary quotes


def quote_lines(result: RunResult) -> list[str]:
    """The quotes the answer rests on, one line each (describe_quotes), safe for a terminal."""
    return [visible(line) for line in describe_quotes(q.to_dict() for q in result.quotes)]


def evidence_line(result: RunResult) -> str:
    """Where the answer's evidence entered the memory: the steps whose additions survived."""
    return visible(" · ".join(f"step {s.index} ({s.chunk.describe()})" for s in result.evidence))


def _replayed(event: StepFinished) -> str:
    """What a step not run now says of where it comes from: the trace (a resumed run), or the
    earlier run a continued one took it from."""
    if event.copied_from is not None:
        return f" (from run {event.copied_from[:8]})"
    return " (from the trace)" if event.replayed else ""


def ocr_line(title: str, done: int, total: int, seconds: float) -> str:
    """'OCR scan.pdf: page 3 of 6 · 0.42 pages/s', for every view."""
    rate = f" · {done / seconds:.2f} pages/s" if seconds > 0 else ""
    return f"OCR {visible(title)}: page {done} of {total}{rate}"


def _words(runs: list[str]) -> int:
    return sum(len(r.split()) for r in runs)


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "-:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class LiveView:
    """The full-screen-width live display: header, progress, the memory as it is written.
    Everything, printed lines included, is drawn at most `fps` times a second."""

    def __init__(
        self,
        console: Console,
        fps: float = FPS,
        gpu_hint: str | None = None,
        draw_share: float | None = DRAW_SHARE,
        answer_below: bool = False,
    ):
        self.console = console
        # the answer is printed below the view on the same terminal (stdout is one): the last frame
        # shows the final memory, so that the answer is said once
        self.answer_below = answer_below
        self.gpu_hint = gpu_hint  # a GPU this build cannot use, said in the header (install.doctor.gpu_hint_due)
        self.interval = 1.0 / fps
        self.header = Text("memagent")
        self.started = time.perf_counter()
        self.step = 0
        self.total_steps: int | None = None
        self.tokens_read = 0
        self.document_tokens: int | None = None
        self.writing: list[str] = []  # the reply being streamed
        self.planning = False  # the reply streamed is InfMem's planner's
        self.streamed = 0  # pieces streamed in the current reply, for the live generation rate
        self.first_piece_at: float | None = None  # when its first piece came: the prompt was read by then
        self.streaming = False
        self.phase = "loading model"
        self.step_seconds: list[float] = []
        self.step_started = time.perf_counter()
        self.prompt_read: tuple[int, int] | None = None  # (done, total) tokens of the prompt being read
        self.prompt_rate: float | None = None
        self.gen_rate: float | None = None
        self.memory = ""
        self.protocol = get_protocol("")
        self.history: list[Text] = []  # step summaries, also kept for the snapshot
        self.pending: list[RenderableType] = []  # lines to print above the view at the next frame
        self.ocr: str | None = None  # the OCR progress line, while a document's pages are recognised
        self.last_draw = 0.0
        self.draw_seconds = 0.0  # what the last redraw took (DRAW_SHARE)
        self.draw_share = draw_share  # None: every `fps` redraw, however long (tests pin the frames so)
        # Events redraw the view (at most `fps` times a second); between them a timer redraws it
        # TICKS times a second, so the clock and the prompt's progress never look frozen.
        self.live = Live(
            console=console,
            auto_refresh=console.is_terminal,
            refresh_per_second=TICKS,
            get_renderable=self.render,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    # -- event handling ------------------------------------------------------------------------

    def __enter__(self) -> "LiveView":
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._draw(force=True)  # the last frame, with every line still pending
        self.live.stop()

    def handle(self, event: Event) -> None:
        method = getattr(self, "_on_" + type(event).__name__, None)
        if method is not None:
            method(event)

    def _on_RunStarted(self, e: RunStarted) -> None:
        self.protocol = get_protocol(e.config.protocol)
        sources = ", ".join(visible(s.title) for s in e.sources[:3])
        if len(e.sources) > 3:
            sources += f" and {len(e.sources) - 3} more"
        # the model by its file, as the user names it (a GGUF's own name can be a converter's title-casing
        # of a folder: "Smollm2 135M 8k Lc100K Mix1 Ep2"); a served model by the name it is served under
        shown = os.path.basename(e.model_path) or e.model
        self.header = Text.assemble(
            ("memagent ", "bold"),
            (visible(shown), "cyan"),
            "  ",
            (sources, "green"),
            "\n",
            ("Q: ", "bold"),
            clip(e.asked or e.question, 200),  # a follow-up: the question as asked, not the problem composed
        )
        self._draw()

    def _on_Notice(self, e: Notice) -> None:
        style = "yellow" if e.level == "warning" else "dim"
        self._print(Text(("warning: " if e.level == "warning" else "") + visible(e.message), style=style))

    def _on_OcrProgressed(self, e: OcrProgressed) -> None:
        self.ocr = ocr_line(e.title, e.done, e.total, e.seconds) if e.done < e.total else None
        self._draw()

    def _on_ModelLoaded(self, e: ModelLoaded) -> None:
        self.header.append_text(
            Text.assemble("\n", (e.device, "magenta"), f"  ·  context {e.n_ctx:,}  ·  loaded in {e.seconds:.1f}s", style="dim")
        )
        if e.gpu_reason:
            self.header.append_text(Text(f"\n{visible(e.gpu_reason)}", style="dim"))
        if self.gpu_hint:
            self.header.append_text(Text(f"\n{visible(self.gpu_hint)}", style="yellow"))
        self.phase = "reading"
        self._draw()

    def _on_DocumentRead(self, e: DocumentRead) -> None:
        self.total_steps = e.steps
        self.document_tokens = e.document_tokens

    def _on_StepStarted(self, e: StepStarted) -> None:
        self.step = e.index
        self.total_steps = e.total_steps or self.total_steps
        self.tokens_read = e.tokens_read
        self.writing, self.planning = [], False
        self.streamed, self.streaming, self.first_piece_at = 0, True, None
        self.step_started, self.prompt_read = time.perf_counter(), None
        where = visible(e.chunk.describe())
        self.phase = f"step {e.index}: reading {where}"
        self._draw()

    def _on_PromptProgressed(self, e: PromptProgressed) -> None:
        self.prompt_read = (e.done, e.total) if e.done < e.total else None
        self._draw()

    def _on_TokenText(self, e: TokenText) -> None:
        if e.planning != self.planning:  # InfMem's planner thinks first: its text is not the memory
            self.planning = e.planning
            self.phase = f"step {e.step}: planning (search the whole input, or stop)"
        self.writing.append(e.text)
        self.streamed += 1
        if self.first_piece_at is None:
            self.first_piece_at = time.perf_counter()
        self._draw()

    def _on_ReplyRestarted(self, e: ReplyRestarted) -> None:
        self.writing = []
        self.streamed, self.first_piece_at = 0, None
        self._draw()

    def _on_StepFinished(self, e: StepFinished) -> None:
        s = e.step
        self.streaming = False
        self.memory = s.memory
        self.step_seconds.append(s.seconds)
        if s.prompt_seconds > 0:
            self.prompt_rate = (s.prompt_tokens - s.cached_tokens) / s.prompt_seconds
        if s.generate_seconds > 0:
            self.gen_rate = s.generated_tokens / s.generate_seconds
        added, dropped = changes(s.previous_memory, s.memory)
        where = visible(s.chunk.describe())
        total = f"/{self.total_steps}" if self.total_steps else ""
        line = Text.assemble(
            ("✓ ", "green"),
            (f"step {s.index}{total}", "bold"),
            f"  {where}  ",
            (f"+{_words(added)}", "green"),
            " ",
            (f"−{_words(dropped)}", "red"),
            f" words  {s.memory_tokens} tok memory  {s.seconds:.1f}s",
            (f"  drafted {s.drafted_tokens}, {s.accepted_tokens} taken" if s.drafted_tokens else "", "magenta"),
            (_replayed(e), "dim"),
            (" (cut at the token limit)" if s.finish_reason == "length" else "", "yellow"),
        )
        if added:
            line.append_text(Text("\n  + " + clip(" … ".join(added), CHANGE_CHARS), style="green"))
        if dropped:
            line.append_text(Text("\n  − " + clip(" … ".join(dropped), CHANGE_CHARS), style="red"))
        self.history.append(line)
        self._print(line)

    def _on_StepPlanned(self, e: StepPlanned) -> None:
        line = Text.assemble(("  plan ", "cyan"), (f"step {e.index}", "bold"), "  ", visible(e.decision.describe()))
        self.history.append(line)
        self._print(line)
        self.planning, self.writing = False, []  # the write's own reply comes next
        self.streamed, self.first_piece_at = 0, None
        found = " and what the search found" if e.decision.action == "search" else ""
        self.phase = f"step {e.index}: writing the memory from the chunk{found}"
        self._draw()

    def _on_ReadingStopped(self, e: ReadingStopped) -> None:
        line = Text(e.describe(), style="bold cyan")
        self.history.append(line)
        self._print(line)

    def _on_AnswerStarted(self, e: AnswerStarted) -> None:
        self.writing, self.planning = [], False
        self.streamed, self.streaming, self.first_piece_at = 0, True, None
        self.prompt_read = None
        self.phase = "answering from the memory"
        self._draw()

    def _on_AnswerFinished(self, e: AnswerFinished) -> None:
        self.phase = "done"
        self.streaming = False
        self.writing = [] if self.answer_below else [e.raw]
        self._draw()

    def _on_RunFinished(self, e: RunFinished) -> None:
        self.phase = f"done in {duration_text(e.result.timings.get('total_seconds'))}"
        if e.result.evidence:
            self._print(Text.assemble(("evidence: ", "bold"), evidence_line(e.result)))
        for line in quote_lines(e.result):
            self._print(Text.assemble(("quote ", "bold"), line))
        self._draw(force=True)

    # -- drawing -------------------------------------------------------------------------------

    def _print(self, renderable: RenderableType) -> None:
        # Printed above the live area at the next frame: each print redraws the whole view,
        # and a small model finishes several steps a second.
        self.pending.append(renderable)
        self._draw()

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        wait = max(self.interval, self.draw_seconds / self.draw_share) if self.draw_share else self.interval
        if force or now - self.last_draw >= wait:
            self.last_draw = now
            for renderable in self.pending:
                self.live.console.print(renderable)
            self.pending.clear()
            self.live.refresh()
            self.draw_seconds = time.perf_counter() - now

    def _eta(self) -> float | None:
        """Seconds left for the steps, from their average so far less what the current one has
        taken; None (shown -:--) when unknown, or when the estimate has run out before the end:
        never 0:00 while a step is still going."""
        if not self.total_steps or not self.step_seconds or not self.streaming or self.phase.startswith("answer"):
            return None
        average = sum(self.step_seconds) / len(self.step_seconds)
        left = average * max(self.total_steps - len(self.step_seconds), 0) - (time.perf_counter() - self.step_started)
        return left if left >= 1 else None

    def progress(self) -> Table:
        total = self.total_steps
        done = len(self.step_seconds)
        grid = Table.grid(padding=(0, 1))
        tokens = f"{self.tokens_read:,}/{self.document_tokens:,}" if self.document_tokens else f"{self.tokens_read:,}/…"
        tokens += " tokens"
        rates = []
        if self.prompt_rate:
            rates.append(f"prompt {self.prompt_rate:,.0f}")
        gen = self._live_rate() or self.gen_rate
        if gen:
            rates.append(f"gen {gen:,.0f}" if gen >= 100 else f"gen {gen:.1f}")
        if self.prompt_read is not None:  # a CPU reads a chunk's prompt for tens of seconds before writing
            tokens += f" · prompt {self.prompt_read[0]:,}/{self.prompt_read[1]:,} read"
        cells = [
            Text(f"Step {self.step}/{total if total else '?'}", style="bold"),
            Text(tokens, style="cyan"),
            Text(f"{duration_text(time.perf_counter() - self.started)} · ETA {duration_text(self._eta())}", style="dim"),
            Text(" · ".join(rates) + (" tok/s" if rates else ""), style="magenta", no_wrap=True),
        ]
        # Within the terminal's width, never wrapping a word onto a line of its own: the rates go
        # first, then the bar narrows, then the token counts shorten.
        room = self.console.width - sum(cell.cell_len + 1 for cell in cells)
        if room < 8:
            cells.pop()
            room = self.console.width - sum(cell.cell_len + 1 for cell in cells)
        for cell in cells:
            cell.no_wrap, cell.overflow = True, "ellipsis"
        bar = ProgressBar(total=total or 100, completed=done if total else 0, width=max(4, min(24, room - 1)), pulse=not total)
        grid.add_row(cells[0], bar, *cells[1:])
        if self.ocr:
            grid.add_row(Text(self.ocr, style="yellow"))
        return grid

    def _live_rate(self) -> float | None:
        """Pieces per second of the reply being streamed (about tokens: most pieces are one), from
        its first piece on: the time before it went into reading the prompt, which at a 5,000-token
        chunk took most of the step and made generation look seven times slower than it ran."""
        if not self.streaming or self.first_piece_at is None or self.streamed < 2:
            return None
        elapsed = time.perf_counter() - self.first_piece_at
        return (self.streamed - 1) / elapsed if elapsed > 0 else None

    def memory_panel(self) -> Panel | Group:
        text = "".join(self.writing) if self.writing else self.memory
        plan = ""
        thinking = False
        if self.writing:  # a thinking model's reasoning shown dim until the reply proper starts
            reasoning, rest = self.protocol.reasoning(text)
            if rest.strip():
                text = rest.strip("\n")
            elif reasoning and self.streaming:
                thinking = True
        elif self.protocol.has_plan:  # qwenlong: the plan shown apart from the memory
            text, plan = self.protocol.parts(text)
        lines = text.splitlines() or [""]
        shown = "\n".join(lines[-MEMORY_LINES:])
        if len(shown) > MEMORY_CHARS:
            shown = "…" + shown[-MEMORY_CHARS:]
        answering = self.phase.startswith("answer") or self.phase.startswith("done")
        title = "Answer" if answering and self.writing else ("Memory · being rewritten" if self.writing else "Memory")
        if self.planning:
            title = "Planner" + (" · thinking" if thinking else "")
        elif thinking:
            title = ("Answer" if answering else "Memory") + " · thinking"
        memory = Panel(
            Text(visible(shown), style="dim" if thinking else ""),
            title=title,
            title_align="left",
            subtitle=self.phase,
            subtitle_align="right",
            border_style="blue",
        )
        if not plan:
            return memory
        plan_lines = "\n".join(plan.splitlines()[:PLAN_LINES])
        return Group(memory, Panel(Text(visible(clip(plan_lines, MEMORY_CHARS)), style="dim"), title="Plan", title_align="left"))

    def render(self) -> Group:
        return Group(self.header, self.progress(), self.memory_panel())

    def snapshot(self) -> Group:
        """The whole run in one picture: header, every step's summary, final state."""
        return Group(self.header, *self.history[-8:], self.progress(), self.memory_panel())


class PlainProgress:
    """One line per step on stderr, for logs and pipes where a live view cannot draw."""

    def __init__(self, console: Console):
        self.console = console
        self.total: int | None = None

    def handle(self, event: Event) -> None:
        if isinstance(event, Notice):
            self.console.print(
                ("warning: " if event.level == "warning" else "") + visible(event.message),
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        elif isinstance(event, OcrProgressed):
            self.console.print(ocr_line(event.title, event.done, event.total, event.seconds), markup=False, highlight=False)
        elif isinstance(event, DocumentRead):
            self.total = event.steps
        elif isinstance(event, StepFinished):
            if event.copied_from is not None:  # the notice that ends them says which, in one line
                return
            s = event.step
            where = visible(s.chunk.describe())
            again = _replayed(event)
            self.console.print(
                f"step {s.index}/{self.total or '?'} {where}: {s.memory_tokens} memory tokens, {s.seconds:.2f}s{again}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        elif isinstance(event, StepPlanned):
            self.console.print(
                f"plan {event.index}: {visible(event.decision.describe())}", markup=False, highlight=False, soft_wrap=True
            )
        elif isinstance(event, ReadingStopped):
            self.console.print(event.describe(), markup=False, highlight=False)
        elif isinstance(event, RunFinished) and event.result.evidence:
            self.console.print(f"evidence: {evidence_line(event.result)}", markup=False, highlight=False, soft_wrap=True)
            for line in quote_lines(event.result):
                self.console.print(f"quote {line}", markup=False, highlight=False, soft_wrap=True)
