"""A `memagent watch`'s table in the trace database (migration 9), for the page to show live: the
watch writes itself when it starts (its paths, questions and process), its rows as they change (once
a cycle, in one transaction), and its end; the page reads the watches, newest first, each marked
as still watching or not by its process (ownership.liveness, as a running run is judged), and one
watch's rows. This module owns the two tables; the store (store.py) owns the runs.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import MemagentError
from ..paths import default_home
from .database import open_database, raise_for
from .ownership import liveness, this_process

ROW_FIELDS = ("document", "question", "state", "answer", "run_id", "error")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class WatchLog:
    """One connection to the watch tables of the trace database at `path` (default: the store's)."""

    def __init__(self, path: Path | str | None = None, *, timeout: float = 10.0):
        from .store import DB_NAME

        self.path = Path(path) if path is not None else default_home() / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn, _ = open_database(self.path, timeout, _now)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> WatchLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(sql, rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            raise_for(self.path, exc)

    # the watch's side -----------------------------------------------------------------------

    def begin(self, paths: Sequence[str], questions: Sequence[str], cwd: str) -> str:
        """A new watch, watching now from this process; its id."""
        watch = secrets.token_hex(6)
        now = _now()
        self._write(
            "INSERT INTO watches (id, started_at, updated_at, paths, questions, cwd, pid, host, pid_started)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(watch, now, now, json.dumps(list(paths), ensure_ascii=True), json.dumps(list(questions)), cwd, *this_process())],
        )
        return watch

    def put(self, watch: str, rows: Mapping[str, Mapping[str, Any]], gone: Sequence[str] = ()) -> None:
        """The rows (by key) as they stand now, and the keys of those gone, in one transaction."""
        now = _now()
        values = [(watch, key, *(row.get(f) for f in ROW_FIELDS), now) for key, row in rows.items()]
        fields = ", ".join(ROW_FIELDS)
        updates = ", ".join(f"{f} = excluded.{f}" for f in (*ROW_FIELDS, "updated_at"))
        self._write(
            f"INSERT INTO watch_rows (watch_id, key, {fields}, updated_at) VALUES (?, ?{', ?' * len(ROW_FIELDS)}, ?)"
            f" ON CONFLICT (watch_id, key) DO UPDATE SET {updates}",
            values,
        )
        if gone:
            self._write("DELETE FROM watch_rows WHERE watch_id = ? AND key = ?", [(watch, key) for key in gone])
        self._write("UPDATE watches SET updated_at = ? WHERE id = ?", [(now, watch)])

    def end(self, watch: str) -> None:
        self._write("UPDATE watches SET ended_at = ?, updated_at = ? WHERE id = ?", [(_now(), _now(), watch)])

    # the page's side ------------------------------------------------------------------------

    def watches(self, limit: int = 50) -> list[dict[str, Any]]:
        """Watches, newest first: id, started_at, updated_at, paths, questions, rows (how many), and
        `watching` (its process is still at work, and it has not ended)."""
        found = self._conn.execute(
            "SELECT w.*, (SELECT count(*) FROM watch_rows WHERE watch_id = w.id) AS rows FROM watches AS w"
            " ORDER BY started_at DESC LIMIT ?",
            (limit,),
        )
        return [_watch(dict(row)) for row in found]

    def watch(self, ref: str) -> dict[str, Any]:
        """One watch (a unique prefix of its id) with its rows, ordered by document then question."""
        ids = [r[0] for r in self._conn.execute("SELECT id FROM watches WHERE id GLOB ?", (ref.lower() + "*",))]
        if len(ids) != 1 or not ref.isalnum():
            raise MemagentError(f"No watch matches '{ref}'" if not ids else f"'{ref}' matches {len(ids)} watches")
        row = self._conn.execute("SELECT * FROM watches WHERE id = ?", (ids[0],)).fetchone()
        watch = _watch(dict(row))
        watch["rows"] = [
            dict(r)
            for r in self._conn.execute("SELECT * FROM watch_rows WHERE watch_id = ? ORDER BY document, question", (ids[0],))
        ]
        return watch


def _watch(row: dict[str, Any]) -> dict[str, Any]:
    row["paths"], row["questions"] = json.loads(row["paths"]), json.loads(row["questions"])
    row["watching"] = row["ended_at"] is None and liveness(row["pid"], row["host"], row["pid_started"]) == "alive"
    for name in ("pid", "host", "pid_started"):
        row.pop(name, None)
    return row
