"""`memagent watch`'s outputs (--csv, --jsonl, --html): a row per document and question, each kept as
the text it has in each file, made once when its answer comes; the files are written whole from
them, each put in place at once (a hidden file beside it, renamed over it), so a spreadsheet,
`watch -n1 cat signed.csv` or a script never sees half a table. The same rows go to the trace database
as they change (TableLog), for the page (`memagent serve`) to show the watch live. Writing costs the rows' bytes, not
their records' formatting: a table of 10,000 rows is rewritten in milliseconds, and a document's
record is not held once its row is made.

The CSV has `ask --each`'s columns, then `growing`: "yes" where the document was still being written
when its row was made (the answer so far, from its complete chunks)."""

from __future__ import annotations

import csv
import io
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, NamedTuple

from ..errors import MemagentError
from .job_runs import csv_header, csv_rows
from .options import OutputFlags
from .textout import json_text

if TYPE_CHECKING:
    from ..core.jobs import Job
    from ..traces.store import TraceStore


class _Row(NamedTuple):
    csv: str
    jsonl: str
    html: dict[str, Any] | None


@dataclass
class Outputs:
    """The rows, by job key, and the files they are written to. `dirty`: a row came or went since
    the files were last written."""

    given: OutputFlags
    fields: tuple[str, ...]
    store: TraceStore | None
    rows: dict[str, _Row] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)  # the rows that hold an error
    dirty: bool = False

    def put(self, key: str, record: dict[str, Any]) -> None:
        """A row's record (with "document" and "growing"), kept as each file has it."""
        given = self.given
        text = ""
        if given.csv_file is not None:
            out = io.StringIO()
            grows = "yes" if record.get("growing") else ""
            csv.writer(out).writerows([*row, grows] for row in csv_rows(record, "document", self.fields))
            text = out.getvalue()
        line = json_text(record, indent=None) + "\n" if given.jsonl is not None else ""
        html = None
        if given.html is not None:
            from .job_runs import html_rows

            html = html_rows([record])[0]
        self.rows[key] = _Row(text, line, html)
        if record.get("error"):
            self.failed.add(key)
        else:
            self.failed.discard(key)
        self.dirty = True

    def drop(self, key: str) -> bool:
        """A row leaves; whether there was one."""
        if self.rows.pop(key, None) is None:
            return False
        self.failed.discard(key)
        self.dirty = True
        return True

    @property
    def answers(self) -> int:
        """The rows that hold an answer (not an error)."""
        return len(self.rows) - len(self.failed)

    def write(self, keys: Iterable[str]) -> None:
        """The rows of `keys`, in that order (those without a row left out), to every file."""
        rows = [row for row in map(self.rows.get, keys) if row is not None]
        given = self.given
        if given.csv_file is not None:
            header = io.StringIO()
            csv.writer(header).writerow([*csv_header("document", self.fields), "growing"])
            # utf-8-sig: spreadsheets (Excel) take a CSV without the mark for their locale's code page
            _put(given.csv_file, [header.getvalue(), *(r.csv for r in rows)], encoding="utf-8-sig")
        if given.jsonl is not None:
            _put(given.jsonl, (r.jsonl for r in rows), encoding="utf-8")
        if given.html is not None:
            from ..traces.report import each_report_html
            from .job_runs import stored_runs

            pages = [r.html for r in rows if r.html is not None]
            _put(given.html, [each_report_html(pages, stored_runs(pages, self.store))], encoding="utf-8")
        self.dirty = False


def _put(path: Path, parts: Iterable[str] | Iterator[str], encoding: str) -> None:
    """`parts` to `path`, whole or not at all (paths.atomic_write)."""
    from ..paths import atomic_write

    try:
        with atomic_write(path, encoding=encoding, errors="backslashreplace", newline="") as f:
            f.writelines(parts)
    except OSError as exc:
        hint = "Free some disk space, or name a folder you can write to."
        raise MemagentError(f"Cannot write {path}: {exc.strerror}.", hint) from None


class TableLog:
    """The watch's table as the page shows it (traces/watchlog.py): its rows as they change, written once
    a cycle; nothing where there is no store, and nothing more after a write fails (said once)."""

    def __init__(self, store: Any, paths: list[str], questions: list[str], warn: Callable[[str], None]):
        self.warn = warn
        self.pending: dict[str, dict[str, Any]] = {}
        self.dropped: list[str] = []
        self.log: Any = None
        self.watch = ""
        if store is None:
            return
        from ..traces.watchlog import WatchLog

        try:
            self.log = WatchLog(store.path)
            self.watch = self.log.begin(paths, questions, os.getcwd())
        except (MemagentError, OSError, sqlite3.Error) as exc:
            self._failed(exc)

    def row(self, job: Job, state: str, record: Mapping[str, Any] | None) -> None:
        if self.log is None:
            return
        record = record or {}
        self.pending[job.key] = {
            "document": job.title,
            "question": job.question,
            "state": state,
            "answer": record.get("answer"),
            "run_id": record.get("trace") or record.get("reused_from"),
            "error": record.get("error"),
        }

    def gone(self, key: str) -> None:
        if self.log is not None:
            self.pending.pop(key, None)
            self.dropped.append(key)

    def flush(self) -> None:
        if self.log is None or not (self.pending or self.dropped):
            return
        try:
            self.log.put(self.watch, self.pending, self.dropped)
        except (MemagentError, OSError, sqlite3.Error) as exc:
            self._failed(exc)
        self.pending, self.dropped = {}, []

    def end(self) -> None:
        if self.log is None:
            return
        try:
            self.flush()
            if self.log is not None:
                self.log.end(self.watch)
                self.log.close()
        except (MemagentError, OSError, sqlite3.Error):
            pass

    def _failed(self, exc: BaseException) -> None:
        self.warn(f"the watch's table could not be recorded ({exc}); memagent serve will not show it")
        self.log = None
