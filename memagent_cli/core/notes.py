"""A run's notes: what it told on the way (a running head left out, a file skipped, a document not
UTF-8), kept in its RunResult so that its record names them (docs/JSON.md, "notes"), from the
Notices its events carry."""

from __future__ import annotations

import functools
from typing import Callable, Iterator, ParamSpec

from .events import Event, Notice, RunFinished

P = ParamSpec("P")


def kept_notes(run: Callable[P, Iterator[tuple[int | None, Event]]]) -> Callable[P, Iterator[tuple[int | None, Event]]]:
    """`run`'s events, each run's notes (the Notices it and the shared reading told) kept in its
    RunResult, so that its record names what was left out or skipped (docs/JSON.md, "notes")."""

    @functools.wraps(run)
    def kept(*args: P.args, **kwargs: P.kwargs) -> Iterator[tuple[int | None, Event]]:
        shared: list[str] = []
        own: dict[int, list[str]] = {}
        for index, event in run(*args, **kwargs):
            if isinstance(event, Notice):
                (shared if index is None else own.setdefault(index, [])).append(event.message)
            elif isinstance(event, RunFinished) and index is not None:
                event.result.notes = [*shared, *own.get(index, [])]
            yield index, event

    return kept


def noted(events: Iterator[Event]) -> Iterator[Event]:
    """One run's events, its notes kept in its RunResult (see ask_many_events)."""
    told: list[str] = []
    for event in events:
        if isinstance(event, Notice):
            told.append(event.message)
        elif isinstance(event, RunFinished):
            event.result.notes = told
        yield event
