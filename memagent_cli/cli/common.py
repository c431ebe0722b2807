"""What every command shares: the console for messages, one-line errors with their exit codes,
and the guard that turns a MemagentError into them."""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import TYPE_CHECKING, Callable, Iterator, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from ..errors import MemagentError
from .textout import SafeConsole, visible

if TYPE_CHECKING:
    from types import FrameType

    from ..traces.store import TraceStore

P = ParamSpec("P")
R = TypeVar("R")


def stderr_console() -> Console:
    # Bound to the real stderr now: later redirections (llama.cpp's loader) must not catch it.
    return SafeConsole(file=sys.stderr, stderr=True, highlight=False)


def fail(err: Console, exc: MemagentError, after: str | None = None) -> NoReturn:
    # Messages quote file names, which may hold control characters: visible() shows them harmlessly.
    err.print(
        Text.assemble(("error: ", "bold red"), visible(str(exc)), ("\nThe run stopped" + after) if after else ""), soft_wrap=True
    )
    raise typer.Exit(exc.exit_code)


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


def open_store(err: Console, required: bool = False) -> TraceStore | None:
    """The trace store; when it cannot be opened, a run goes on untraced (a resume cannot)."""
    from ..traces import store as trace_store

    try:
        store = trace_store.TraceStore(timeout=trace_store.BUSY_TIMEOUT)
    except MemagentError as exc:
        if required:
            raise
        err.print(f"warning: {exc} This run is not recorded.", style="yellow", markup=False, soft_wrap=True)
        return None
    if store.notice:
        err.print(f"warning: {store.notice}", style="yellow", markup=False, soft_wrap=True)
    return store
