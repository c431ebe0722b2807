"""One run shown as `ask` shows it (`ask`, `ask -c`, `chat`): its events to its recorder and to the
views (the live view on a terminal, a line a step elsewhere), then its answer, or its JSON record, on
stdout; and standard input, hashed as it passes, for the run layer that plans and records each run."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Iterable, Mapping, Protocol

import typer
from rich.console import Console

from .answers import record_text
from .common import hinter, noter, sigterm_as_interrupt, warner
from .options import ShowFlags
from .textout import SCHEMA, SafeConsole, json_text, print_json

if TYPE_CHECKING:
    from ..core.events import Event, RunResult
    from ..core.pipeline import SourceOptions
    from ..runs.planning import Runs
    from ..runs.setup import RunSetup
    from ..traces.recorder import HashingReader, Recorder
    from ..traces.store import TraceStore
    from .views.live import LiveView


@dataclass(frozen=True)
class Output(ShowFlags):
    """How one run's result is shown: the live view or progress, and what stdout gets."""

    svg: Path | None = None
    lines: bool = False  # the JSON record on one line (a chat's answers, one a line)


class TracedStdin:
    """Standard input, hashed as it passes where runs are traced, and the run layer's planner over it."""

    def __init__(self, err: Console, store: TraceStore | None):
        from ..traces.recorder import HashingReader

        self.err, self.store = err, store
        self.warn = warner(err)
        raw: BinaryIO | None = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
        self.hashing = HashingReader(raw) if store is not None and raw is not None else None
        self.stdin: HashingReader | BinaryIO | None = self.hashing or raw

    def runs(self, setup: RunSetup, sources: SourceOptions, fresh: bool) -> Runs:
        """The runs of a command made with `setup`, reading as `sources` says, over this store."""
        from ..runs.planning import Runs

        return Runs(self.store, setup, sources, fresh, self.warn, stdin=self.hashing)


def show_one(events: Iterable[Event], err: Console, recorder: Recorder | None, out: Output, *, served: bool) -> None:
    """One run through the views to its answer on stdout (or its JSON record)."""

    gpu_hint = None
    if not served and not out.quiet:
        from ..install.doctor import gpu_hint_due, remember_gpu_hint

        gpu_hint = gpu_hint_due()
    result = consume(events, err, recorder, quiet=out.quiet, svg=out.svg, gpu_hint=None if out.json_out else gpu_hint)
    if gpu_hint:
        remember_gpu_hint(gpu_hint)
    record = result.to_dict()
    if out.json_out:
        if gpu_hint:
            record["gpu"]["hint"] = gpu_hint
        if recorder is not None and recorder.failed_write is None:
            record["trace"] = recorder.run_id
        record["conversation"] = recorder.conversation_record() if recorder is not None else None
        if out.lines:
            print(json_text({"schema": SCHEMA, **record}, indent=None), flush=True)
        else:
            print_json(record)
    else:
        # On a terminal, what the model wrote is displayed, not obeyed; piped, it is data.
        print(record_text(record, raw=out.raw, cite=out.cite, tty=sys.stdout.isatty()), flush=True)
    if record.get("answer_cut") and not out.quiet:
        cut_note(err, record)


class _Consumer(Protocol):
    """What a run's events are fed to: the recorder and the views."""

    def handle(self, event: Event) -> None: ...


def consume(
    events: Iterable[Event], err: Console, recorder: Recorder | None, *, quiet: bool, svg: Path | None, gpu_hint: str | None
) -> RunResult:
    """Feeds the run's events to the recorder (first, so a step is saved before it is drawn)
    and the views; returns the result."""
    from ..core.events import RunFinished
    from .views.live import LiveView, PlainProgress

    live = not quiet and err.is_terminal
    views: list[LiveView | PlainProgress] = (
        [LiveView(err, gpu_hint=gpu_hint, answer_below=sys.stdout.isatty())] if live else ([] if quiet else [PlainProgress(err)])
    )
    if gpu_hint and not live and not quiet:
        hinter(err)(gpu_hint)
    if svg is not None and not live:  # draw off screen, for the picture alone
        views.append(LiveView(SafeConsole(file=io.StringIO(), width=110, force_terminal=True), fps=1))
    consumers: list[_Consumer] = [*([recorder] if recorder is not None else []), *views]
    result = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(sigterm_as_interrupt())
        for view in views:
            if isinstance(view, LiveView):
                stack.enter_context(view)
        for event in events:
            for consumer in consumers:
                consumer.handle(event)
            if isinstance(event, RunFinished):
                result = event.result
    if svg is not None:
        _save_svg(next(v for v in views if isinstance(v, LiveView)), svg, err)
    assert result is not None
    return result


def _save_svg(view: LiveView, path: Path, err: Console) -> None:
    recorder = SafeConsole(record=True, file=io.StringIO(), width=110, force_terminal=True, color_system="truecolor")
    recorder.print(view.snapshot())
    try:
        recorder.save_svg(str(path), title="memagent ask")
    except OSError as exc:  # the answer is worth more than the picture: warn, go on
        warner(err)(f"could not save {path}: {exc.strerror}")


def given_flags(ctx: typer.Context) -> set[str]:
    """The parameters given on the command line (not left at their defaults)."""
    given = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)  # by name: typer may bring its own copy of click's enum
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.add(name)
    return given


def cut_note(err: Console, record: Mapping[str, Any]) -> None:
    """The line that says an answer ran out of its budget, and how to get it whole."""
    budget = (record.get("settings") or {}).get("answer_tokens")
    noter(err)(f"the answer was cut at its budget (--answer-tokens {budget}); raise it for the whole answer")
