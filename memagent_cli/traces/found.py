"""Answers found again in the trace store, and earlier runs to continue.

core/keys.py says what decides an answer and makes the keys; this module looks them up. A reused
answer is the stored run's `ask --json` record, whole: the rest of the record the run kept when it
finished (the store's `result`), its steps as stored, its quotes' text read again from the
documents found now (whose content is the run's: the key says so), and `reused_from`. Nothing is
read by the model, and no run is added: the stored run counts the reuse (`reuses`, `reused_at`),
which `traces list --reused` shows. A light count rather than a row per reuse: a script or `watch`
asking the same thing every minute would otherwise fill the store with copies of one answer.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

from ..core.events import StepDict
from ..core.keys import AnswerKey, Continued
from ..errors import MemagentError
from ..ingest.sources import Source
from .quoting import reused_quotes
from .store import TraceStore

# The keys of a step as `ask --json` gives it (events.StepRecord.to_dict), in that order.
STEP_KEYS = tuple(StepDict.__annotations__)


@dataclass(frozen=True)
class Reused:
    """An answer given again: the stored run's id, when it finished, and its record."""

    run: str
    at: str  # ISO 8601, UTC
    record: dict[str, Any]

    @property
    def answer(self) -> str:
        return str(self.record.get("answer") or "")

    def note(self) -> str:
        """What stderr says of it, in one line."""
        return f"answered before (run {self.run[:8]}, {local_minute(self.at)}) from the same text; --fresh reads it again"


def local_minute(moment: str) -> str:
    """An ISO 8601 time as this machine's clock shows it, to the minute: "2026-11-28 15:24"."""
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        return moment
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone().strftime("%Y-%m-%d %H:%M")


def reused_answer(
    store: TraceStore, key: AnswerKey, sources: Sequence[Source], warn: Callable[[str], None], text: str | None = None
) -> Reused | None:
    """The stored answer to a run with this key over `sources` (the documents found now; or `text`,
    the document given inline), or None: no finished run has the key, or the documents' content is
    not known before reading (stdin)."""
    if key.answer is None:
        return None
    run = store.answered(key.answer)
    if run is None or run.get("result") is None:
        return None
    record = _record(run, sources, warn, text)
    own = store.own_turn(run["id"])
    record["conversation"] = {"id": own[0], "turn": own[1]} if own is not None else None
    try:
        store.mark_reused(run["id"])
    except (MemagentError, sqlite3.Error):  # the count is a nicety: a busy or read-only store still answers
        pass
    return Reused(run["id"], str(run["ended_at"]), record)


def continuation(store: TraceStore, key: AnswerKey) -> Continued | None:
    """The newest finished run over an earlier version of the same documents (its lineage key),
    with each step's chunk digest, to go on from; None if none."""
    found = store.continuable(key.lineage)
    if found is None:
        return None
    run_id, steps = found
    return Continued(run_id, steps) if steps else None


def _record(run: Mapping[str, Any], sources: Sequence[Source], warn: Callable[[str], None], text: str | None) -> dict[str, Any]:
    """The stored run as `ask --json` printed it, for the documents as found now."""
    record: dict[str, Any] = {}
    for name, value in run["result"].items():  # in the order `ask --json` printed them, the steps where they were
        record[name] = value
        if name == "settings":
            record["steps"] = [{k: step[k] for k in STEP_KEYS if k in step} for step in run["steps"]]
    ocr = str((run.get("settings") or {}).get("ocr", "auto"))
    record["quotes"] = reused_quotes(record.get("quotes") or [], sources, ocr, warn, text)
    if "evidence_by_field" in record:
        by_field = record["evidence_by_field"] or {}
        record["evidence_by_field"] = {name: reused_quotes(places, sources, ocr, warn, text) for name, places in by_field.items()}
    if len(sources) == 1 and record.get("sources"):
        _retitle(record, sources[0])
    record["trace"] = run["id"]
    record["reused_from"] = {"run": run["id"], "at": run["ended_at"]}
    return record


def _retitle(record: dict[str, Any], now: Source) -> None:
    """One document read under another name than the stored run's (renamed, or named otherwise):
    its answer is the same, told of the name it has now."""
    before = dict(record["sources"][0])
    old = str(before.get("title") or "")
    if not old or old == now.title:
        return

    def renamed(text: Any) -> Any:
        return now.title + text[len(old) :] if isinstance(text, str) and text.startswith(old) else text

    record["sources"] = [{**before, "path": now.path, "title": now.title}]
    for holder in (*record.get("steps", ()), *record.get("evidence", ())):
        holder["spans"] = [{**span, "path": renamed(span.get("path"))} for span in holder.get("spans") or []]
    quotes = [*record.get("quotes", ()), *(q for found in (record.get("evidence_by_field") or {}).values() for q in found)]
    for quote in quotes:
        quote["location"] = renamed(quote.get("location"))
