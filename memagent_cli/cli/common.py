"""What every command shares: the console for messages, one-line errors with their exit codes,
and the guard that turns a MemagentError into them."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_USAGE, MemagentError
from .textout import SafeConsole, visible

if TYPE_CHECKING:
    from types import FrameType

    from ..traces.store import TraceStore

P = ParamSpec("P")
R = TypeVar("R")


def command_group(help: str, **settings: object) -> typer.Typer:
    """A typer app (memagent, or a group of its commands) with the settings every one shares: help
    when run bare, -h beside --help, rich markup in help, no shell-completion commands."""
    shared: dict[str, object] = {
        "no_args_is_help": True,
        "add_completion": False,
        "rich_markup_mode": "rich",
        "context_settings": {"help_option_names": ["-h", "--help"]},
    }
    return typer.Typer(help=help, **{**shared, **settings})  # type: ignore[arg-type]


def stderr_console() -> Console:
    # Bound to the real stderr now: later redirections (llama.cpp's loader) must not catch it.
    return SafeConsole(file=sys.stderr, stderr=True, highlight=False)


def fail(err: Console, exc: MemagentError, after: str | None = None) -> NoReturn:
    # Messages quote file names, which may hold control characters: visible() shows them harmlessly.
    err.print(
        Text.assemble(("error: ", "bold red"), visible(str(exc)), ("\nThe run stopped" + after) if after else ""), soft_wrap=True
    )
    raise typer.Exit(exc.exit_code)


def warner(err: Console) -> Callable[[str], None]:
    """What warns on `err`: a yellow `warning: ...` line, the message printed as it is (no markup)."""

    def warn(message: str) -> None:
        err.print(f"warning: {message}", style="yellow", markup=False, soft_wrap=True)

    return warn


def hinter(err: Console) -> Callable[[str], None]:
    """What gives a hint the user may act on, on `err`: a yellow `note: ...` line, printed as it is."""

    def hint(message: str) -> None:
        err.print(f"note: {message}", style="yellow", markup=False, soft_wrap=True)

    return hint


def noter(err: Console) -> Callable[[str], None]:
    """What says a side note on `err`: a dim line, printed as it is (no markup, no highlighting)."""

    def note(message: str) -> None:
        err.print(message, style="dim", markup=False, highlight=False, soft_wrap=True)

    return note


def run_guard(fn: Callable[P, R]) -> Callable[P, R]:
    """Turns MemagentError into one line on stderr and its exit code, as `ask` does."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except MemagentError as exc:
            SafeConsole(stderr=True).print(Text.assemble(("error: ", "bold red"), visible(str(exc))), soft_wrap=True)
            raise typer.Exit(exc.exit_code)

    return wrapper


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a run the way Ctrl-C does: recorded as interrupted, resumable."""
    from ..model.runtime import deferred_from_callback

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if not deferred_from_callback(signum, frame):  # inside llama.cpp's callback it would be lost
            raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (embedded): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait for the block to end, then stop the run as they would have. For what
    must land whole once it begins: a finished run's answer on stdout and its JSONL line. (Runs that
    end together end a moment apart, and a Ctrl-C pressed as one is said "answered" on stderr landed
    between that line and its answer: the answer was paid for and lost.) Only in the main thread,
    where Python handles signals."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    if caught:
        raise KeyboardInterrupt


def check_paths(paths: list[str]) -> None:
    """Each named source exists (and may be opened), or the error that reading it would give: said
    before anything about the model, so that nothing is fetched or loaded for a mistyped name."""
    from ..ingest.base import STDIN_PATH, open_error

    for path in paths:
        if path != STDIN_PATH:
            try:
                os.stat(path)
            except (OSError, ValueError) as exc:
                raise open_error(path, exc) from None


def check_outputs(outputs: Mapping[str, Path | None], inputs: Iterable[str | Path] = ()) -> None:
    """The files a command writes (flag -> file), checked before anything runs: none is `-` (it
    would make a file of that name where standard output was meant), none is one of the inputs
    (results would be mixed into a job file, or a source written over), no two are the same."""
    from ..ingest.sources import file_id

    def identity(path: str | Path) -> tuple[int, int] | str:  # a file not made yet: where it would be
        return file_id(path) or os.path.realpath(path)

    written: dict[tuple[int, int] | str, str] = {}
    given = {identity(path): str(path) for path in inputs if str(path) != "-"}
    for flag, path in outputs.items():
        if path is None:
            continue
        if str(path) == "-":
            raise MemagentError(
                f"{flag} takes a file name: - is not standard output here.",
                "Name a file to write.",
                exit_code=EXIT_USAGE,
            )
        key = identity(path)
        if key in given:
            raise MemagentError(
                f"{flag} {path} names a file this command reads ({given[key]}), which it would write into.",
                "Name another file to write.",
                exit_code=EXIT_USAGE,
            )
        if key in written:
            raise MemagentError(
                f"{written[key]} and {flag} name the same file, {path}.", "Give each its own file.", exit_code=EXIT_USAGE
            )
        written[key] = flag


def open_store(err: Console, required: bool = False) -> TraceStore | None:
    """The trace store; when it cannot be opened, a run goes on untraced (a resume cannot)."""
    from ..traces import store as trace_store

    try:
        store = trace_store.TraceStore(timeout=trace_store.BUSY_TIMEOUT)
    except MemagentError as exc:
        if required:
            raise
        warner(err)(f"{exc} This run is not recorded.")
        return None
    if store.notice:
        warner(err)(store.notice)
    return store
