"""How a run's answer is printed from its record, and an answer the trace store gave again (the run
layer, runs/planning.py, decides that): the line that says so on stderr, the answer on stdout."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Mapping

from rich.console import Console

from .textout import cited, print_json, visible

if TYPE_CHECKING:
    from ..traces.found import Reused


def record_text(record: Mapping[str, Any], *, raw: bool, cite: bool, tty: bool) -> str:
    """A run's answer as stdout has it, from its record: the answer (or the whole reply), and with
    --cite its quotes; on a terminal, what the model wrote is displayed, not obeyed."""
    answer = str((record.get("raw_answer") if raw else record.get("answer")) or "")
    if cite:
        answer += "\n" + cited(record.get("quotes") or [])
    return visible(answer) if tty else answer


def show_reused(reused: Reused, err: Console, *, quiet: bool, json_out: bool, raw: bool, cite: bool) -> None:
    """One answer given again: the line that says so on stderr, the answer (or its record) on stdout."""
    if not quiet:
        say_reused(err, reused.note())
    if json_out:
        print_json(reused.record)
    else:
        print(record_text(reused.record, raw=raw, cite=cite, tty=sys.stdout.isatty()))


def say_reused(err: Console, line: str) -> None:
    err.print(line, style="cyan", markup=False, highlight=False, soft_wrap=True)
