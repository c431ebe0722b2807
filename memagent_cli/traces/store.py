"""The trace store: every MemAgent run recorded in SQLite, step by step.

This module owns the database file (`traces.db` under $MEMAGENT_HOME, else the platform's
user data directory) and every read and write of it; the schema and its numbered migrations
are in migrations.py. A run row holds the question, where the input came from (paths, sizes,
hashes: never the document's text), the model, the settings and the answer; a step row holds
the memory after each chunk and what the step cost. The rest of memagent only calls TraceStore.

A run also records who runs it (process id, host name, and on Linux the process's start time),
so that a "running" run whose process is gone can be told from one still at work: the first
is marked interrupted when it is looked at (listed, shown, removed), the second is never removed.
What is recorded of that process, and the checks whether it is still at work, are in ownership.py.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..errors import EXIT_USAGE, MemagentError
from ..paths import default_home
from .conversations import conversation_list, conversation_record, new_turn, own_turn, resolve_conversation
from .database import open_database, raise_for
from .ownership import Owner, liveness, this_process

DB_NAME = "traces.db"
BUSY_TIMEOUT = 10.0  # seconds a writer waits for another process's write to finish
STATUSES = ("running", "complete", "interrupted", "failed")

RUN_COLUMNS = (
    "id",
    "started_at",
    "ended_at",
    "status",
    "error",
    "question",
    "sources",
    "model",
    "settings",
    "document_tokens",
    "steps_total",
    "raw_answer",
    "answer",
    "quotes",
    "continued_from",
    "reuses",
    "reused_at",
)
JSON_COLUMNS = ("sources", "model", "settings", "spans", "quotes", "decision", "continued_from", "result")
UPDATABLE = (
    "document_tokens",
    "steps_total",
    "sources",
    "settings",
    "status",
    "error",
    "raw_answer",
    "answer",
    "ended_at",
    "quotes",
    "result",
    "continued_from",
)
STEP_FIELDS = (
    "index",
    "spans",
    "tokens",
    "memory",
    "memory_tokens",
    "prompt_tokens",
    "generated_tokens",
    "drafted_tokens",
    "accepted_tokens",
    "seconds",
    "finish_reason",
    "decision",  # InfMem's steps only: read back only where it is
    "copied_from",  # a continued run's steps taken from an earlier run: read back only where it is
    "digest",  # the chunk's token ids' sha256: read back only by `continuable`
)
# A run's own turn (not one answered from it elsewhere): its conversation and turn number.
_OWN_TURN = "SELECT {} FROM turns WHERE turns.run_id = runs.id AND turns.reused = 0 ORDER BY asked_at LIMIT 1"
_RUN_SELECT = (
    ", ".join(RUN_COLUMNS)
    + ", (SELECT count(*) FROM steps WHERE steps.run_id = runs.id) AS step_count"
    + f", ({_OWN_TURN.format('conversation')}) AS conversation, ({_OWN_TURN.format('turn')}) AS turn"
    + f", ({_OWN_TURN.format('question')}) AS asked"
)
_SOURCE_HAS = "EXISTS (SELECT 1 FROM json_each(runs.sources) AS s WHERE icontains(json_extract(s.value, '$.path'), ?))"
_STEP_SELECT = ", ".join(f'"{name}"' for name in STEP_FIELDS)
# Read back as 0 from steps recorded before migration 4, so a step has one shape whatever its age.
_STEP_READ = ", ".join(
    f'COALESCE("{name}", 0) AS "{name}"' if name in ("drafted_tokens", "accepted_tokens") else f'"{name}"'
    for name in STEP_FIELDS
    if name != "digest"
)
OWNER_COLUMNS = ("pid", "host", "pid_started")  # internal: not in the run records reads return


class TraceStore:
    """One connection to the trace database. `notice` is a line for the user, or None."""

    def __init__(self, path: Path | str | None = None, *, timeout: float = BUSY_TIMEOUT):
        self.path = Path(path) if path is not None else default_home() / DB_NAME
        self.timeout = timeout
        self.notice: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise MemagentError(
                f"Cannot create {self.path.parent}: {e.strerror}",
                hint="set MEMAGENT_HOME to a writable directory, or use --no-trace",
            ) from e
        self._conn: sqlite3.Connection | None = None
        self._conn, self.notice = open_database(self.path, self.timeout, lambda: _timestamp(None))

    @property
    def _db(self) -> sqlite3.Connection:
        """The open connection; after close(), the error sqlite3 gives for a closed one."""
        if self._conn is None:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One committed write transaction. IMMEDIATE takes the write lock up front, waiting
        for it under the busy timeout; a deferred transaction that upgrades to writing later
        gets SQLITE_BUSY at once when another process wrote meanwhile, without waiting."""
        conn = self._db
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise_for(self.path, e)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.OperationalError):
                raise_for(self.path, e)
            raise

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """Reads that see one state of the database (a run and its steps agree)."""
        conn = self._db
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    # Writing a run ---------------------------------------------------------------------

    def create_run(
        self,
        *,
        question: str,
        sources: list[dict[str, Any]],
        model: Mapping[str, Any],
        settings: Mapping[str, Any],
        started_at: str | None = None,
        keys: Mapping[str, str | None] | None = None,
        turn: bool = True,
        conversation: str | None = None,
        asked: str | None = None,
        changed: Mapping[str, Any] | None = None,
    ) -> str:
        """A new running run; `keys` ({"answer", "lineage"}: core/keys.AnswerKey) find it again once
        complete. A `turn` is a turn of `conversation` (its next one), else the first of its own;
        `asked` is the question as asked, where the run reads it in a longer problem (a follow-up's),
        and `changed` the settings the turn gave over the conversation's first run's. A run that is
        not a turn (a job's) is in no conversation."""
        keys = keys or {}
        with self._write() as conn:
            run_id = secrets.token_hex(6)
            while conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                run_id = secrets.token_hex(6)  # 1 in 2**48 per existing run; cheap to be sure
            conn.execute(
                "INSERT INTO runs (id, started_at, status, question, sources, model, settings, answer_key, lineage_key,"
                " pid, host, pid_started) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    _timestamp(started_at),
                    question,
                    _json(sources),
                    _json(model),
                    _json(settings),
                    keys.get("answer"),
                    keys.get("lineage"),
                    *this_process(),
                ),
            )
            if turn:
                new_turn(conn, conversation, run_id, asked or question, reused=False, changed=changed, now=_timestamp(None))
        return run_id

    # Conversations (conversations.py) ------------------------------------------------------

    def add_turn(
        self, conversation: str | None, run_id: str, question: str, *, changed: Mapping[str, Any] | None = None
    ) -> tuple[str, int]:
        """A turn answered from run `run_id` (reused): the next of `conversation`, else the first of a new one."""
        with self._write() as conn:
            return new_turn(conn, conversation, run_id, question, reused=True, changed=changed, now=_timestamp(None))

    def own_turn(self, run_id: str) -> tuple[str, int] | None:
        """The conversation a run answered in, and its turn there."""
        return own_turn(self._db, run_id)

    def resolve_conversation(self, ref: str) -> str:
        return resolve_conversation(self._db, ref)

    def conversation(self, ref: str) -> dict[str, Any]:
        """A conversation ("last", or a prefix of its id) with its turns (conversations.conversation_record)."""
        conversation_id = self.resolve_conversation(ref)
        with self._snapshot() as conn:
            return conversation_record(conn, conversation_id)

    def conversations(self, *, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
        """Conversations, the one asked in last first (conversations.conversation_list)."""
        return conversation_list(self._db, limit, offset)

    def add_step(self, run_id: str, step: Mapping[str, Any]) -> None:
        """Records one step and commits it. Adding an index again replaces that step."""
        unknown = sorted(set(step) - set(STEP_FIELDS))
        if unknown or "index" not in step or "memory" not in step:
            raise ValueError(f"step needs index and memory, may have {', '.join(STEP_FIELDS)}; got {sorted(step)}")
        values = [step.get(name) for name in STEP_FIELDS]
        values[STEP_FIELDS.index("spans")] = _json(step.get("spans") or [])
        if step.get("decision") is not None:
            values[STEP_FIELDS.index("decision")] = _json(step["decision"])
        updates = ", ".join(f'"{name}" = excluded."{name}"' for name in STEP_FIELDS[1:])
        with self._write() as conn:
            self._require(conn, run_id)
            conn.execute(
                f"INSERT INTO steps (run_id, {_STEP_SELECT}) VALUES (?{', ?' * len(STEP_FIELDS)})"
                f' ON CONFLICT (run_id, "index") DO UPDATE SET {updates}',
                [run_id, *values],
            )

    def update_run(self, run_id: str, **fields: Any) -> None:
        unknown = sorted(set(fields) - set(UPDATABLE))
        if unknown:
            raise ValueError(f"cannot update {', '.join(unknown)}; fields are {', '.join(UPDATABLE)}")
        if not fields:
            return
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}")
        if fields.get("ended_at") is not None:
            fields["ended_at"] = _timestamp(fields["ended_at"])
        values = [_json(v) if isinstance(v, (dict, list)) else v for v in fields.values()]
        names = list(fields)  # checked above
        if fields.get("status") == "running":  # resumed: this process runs it now
            names += OWNER_COLUMNS
            values += this_process()
        assignments = ", ".join(f"{name} = ?" for name in names)
        with self._write() as conn:
            self._require(conn, run_id)
            conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?", [*values, run_id])

    def finish_run(
        self,
        run_id: str,
        status: str,
        *,
        answer: str | None = None,
        raw_answer: str | None = None,
        error: str | None = None,
        quotes: list[dict[str, Any]] | None = None,
        result: dict[str, Any] | None = None,
        continued_from: dict[str, Any] | None = None,
    ) -> None:
        """Ends a run. `quotes` are places ({source, start, end, step, location}), never text;
        `result`, the rest of its record (see migration 7), keeps no quote's text either."""
        if status not in STATUSES or status == "running":
            raise ValueError("a run finishes complete, interrupted or failed")
        if quotes is not None and any("text" in q for q in quotes):
            raise ValueError("the trace store keeps a quote's place, not its text")
        if result is not None and any("text" in q for q in _quotes_of(result)):
            raise ValueError("the trace store keeps a quote's place, not its text")
        given = {"answer": answer, "raw_answer": raw_answer, "error": error, "quotes": quotes, "result": result}
        fields = {k: v for k, v in given.items() if v is not None}
        if continued_from is not None:
            fields["continued_from"] = continued_from
        self.update_run(run_id, status=status, ended_at=_timestamp(None), **fields)

    def _require(self, conn: sqlite3.Connection, run_id: str) -> None:
        # A run can vanish mid-way when `memagent traces delete` runs from another terminal.
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise MemagentError(
                f"Trace {run_id} no longer exists (deleted while it was running?)", hint="run again, or use --no-trace"
            )

    # Reading ---------------------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """A full run id from "last" or a unique prefix of one."""
        key = ref.strip().lower()
        if key == "last":
            row = self._db.execute("SELECT id FROM runs ORDER BY started_at DESC, rowid DESC LIMIT 1").fetchone()
            if row is None:
                raise MemagentError("No traces recorded yet", hint="`memagent ask` records one for every run")
            newest: str = row[0]
            return newest
        # Ids are hex, so a hex prefix is also a safe GLOB pattern (and uses the primary key).
        ids: list[str] = (
            [r[0] for r in self._db.execute("SELECT id FROM runs WHERE id GLOB ? ORDER BY started_at DESC", (key + "*",))]
            if re.fullmatch(r"[0-9a-f]+", key)
            else []
        )
        if not ids:
            raise MemagentError(f"No trace matches '{ref}'", hint="`memagent traces list` shows the ids")
        if len(ids) > 1:
            more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
            raise MemagentError(
                f"'{ref}' matches {len(ids)} traces: {', '.join(ids[:5])}{more}", hint="give more characters of the id"
            )
        return ids[0]

    def get_run(self, ref: str, *, with_steps: bool = True) -> dict[str, Any]:
        run_id = self.resolve(ref)
        self._reap(run_id)  # so that a run whose process died is not shown as running
        with self._snapshot() as conn:
            run_id = self.resolve(run_id)  # still there (not removed meanwhile)
            run = _decode(conn.execute(f"SELECT {_RUN_SELECT} FROM runs WHERE id = ?", (run_id,)).fetchone())
            if with_steps:
                run["steps"] = self._steps(conn, run_id, 1, -1)
        return run

    def steps(self, run_id: str, *, start: int = 1, limit: int | None = None) -> list[dict[str, Any]]:
        """A run's steps from index `start` on, at most `limit` of them (a page loads them as they are scrolled to)."""
        return self._steps(self._db, run_id, start, -1 if limit is None else limit)

    def _steps(self, conn: sqlite3.Connection, run_id: str, start: int, limit: int) -> list[dict[str, Any]]:
        sql = f'SELECT {_STEP_READ} FROM steps WHERE run_id = ? AND "index" >= ? ORDER BY "index" LIMIT ?'
        return [_step(row) for row in conn.execute(sql, (run_id, start, limit))]

    def list_runs(
        self,
        *,
        status: str | None = None,
        source: str | None = None,
        limit: int | None = 20,
        reused: bool = False,
        text: str | None = None,
        model: str | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Runs newest first, from the `offset`th; `source` keeps those with a source path containing
        the text; `text` those whose question or a source path contains it; `model` those whose model's
        name or file contains it; `reused` those whose answer was given again, the last given first."""
        where: list[str] = []
        params: list[str] = []
        if text:
            where.append(f"(icontains(question, ?) OR {_SOURCE_HAS})")
            params += [text, text]
        if model:
            where.append("(icontains(json_extract(model, '$.name'), ?) OR icontains(json_extract(model, '$.path'), ?))")
            params += [model, model]
        if status is not None:
            if status not in STATUSES:
                raise MemagentError(f"Unknown status '{status}'", hint=f"use one of {', '.join(STATUSES)}", exit_code=EXIT_USAGE)
            where.append("status = ?")
            params.append(status)
        if source:
            where.append(_SOURCE_HAS)
            params.append(source)
        if reused:
            where.append("reuses > 0")
        self._reap()  # so that a run whose process died is not listed as running
        sql = f"SELECT {_RUN_SELECT} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {'reused_at DESC, ' if reused else ''}started_at DESC, rowid DESC LIMIT ? OFFSET ?"
        rows = self._db.execute(sql, [*params, -1 if limit is None else limit, offset])
        return [_decode(row) for row in rows]

    def unfinished_job_runs(self, job: str) -> dict[str, str]:
        """The interrupted or failed runs of a job (`batch`'s results file: settings.job.file), by
        their key within it (settings.job.key); the newest run where a key ran more than once."""
        self._reap()  # a run whose process died is interrupted, and so resumable
        rows = self._db.execute(
            "SELECT id, json_extract(settings, '$.job.key') FROM runs"
            " WHERE json_extract(settings, '$.job.file') = ? AND status IN ('interrupted', 'failed')"
            " ORDER BY started_at, rowid",
            (job,),
        )
        return {str(key): str(run_id) for run_id, key in rows if key is not None}

    # Answers found again (core/keys.py) ------------------------------------------------

    def answered(self, answer_key: str) -> dict[str, Any] | None:
        """The newest complete run with this answer key, with its steps and `result`; None if none."""
        row = self._db.execute(
            "SELECT id FROM runs WHERE answer_key = ? AND status = 'complete' AND result IS NOT NULL"
            " ORDER BY ended_at DESC LIMIT 1",
            (answer_key,),
        ).fetchone()
        if row is None:
            return None
        try:
            run = self.get_run(row[0])
        except MemagentError:  # removed since: as if never found
            return None
        run["result"] = self.stored_result(run["id"])
        return run

    def stored_result(self, run_id: str) -> dict[str, Any] | None:
        """The rest of a run's `ask --json` record (see migration 7); None before it finished."""
        row = self._db.execute("SELECT result FROM runs WHERE id = ?", (run_id,)).fetchone()
        return json.loads(row[0]) if row is not None and row[0] is not None else None

    def continuable(self, lineage_key: str) -> tuple[str, list[dict[str, Any]]] | None:
        """The newest complete run with this lineage key, and its steps with each one's `digest`
        (their chunks' token ids), to continue; None if none."""
        row = self._db.execute(
            "SELECT id FROM runs WHERE lineage_key = ? AND status = 'complete' ORDER BY ended_at DESC LIMIT 1",
            (lineage_key,),
        ).fetchone()
        if row is None:
            return None
        rows = self._db.execute(f'SELECT {_STEP_READ}, digest FROM steps WHERE run_id = ? ORDER BY "index"', (row[0],))
        return str(row[0]), [_step(r) for r in rows]

    def mark_reused(self, run_id: str) -> None:
        """Counts one more answer given again from a run (runs list it with `reuses`, `reused_at`)."""
        with self._write() as conn:
            conn.execute("UPDATE runs SET reuses = reuses + 1, reused_at = ? WHERE id = ?", (_timestamp(None), run_id))

    def search(self, text: str, *, limit: int = 20) -> list[dict[str, Any]]:
        """Runs and steps whose memory, question or answer holds every word of `text`."""
        words = text.split()
        if not words:
            raise MemagentError("Nothing to search for", hint="give a word or phrase", exit_code=EXIT_USAGE)
        # Each word as an FTS5 string: the user's quotes, operators and stars are just text.
        query = " ".join('"' + word.replace('"', '""') + '"' for word in words)
        rows = self._db.execute(
            "SELECT d.run_id, d.step, d.field, snippet(search_fts, 0, '[', ']', '…', 16) AS snippet,"
            " r.question, r.started_at"
            " FROM search_fts JOIN search_docs AS d ON d.id = search_fts.rowid JOIN runs AS r ON r.id = d.run_id"
            " WHERE search_fts MATCH ? ORDER BY search_fts.rank LIMIT ?",
            (query, limit),
        )
        return [dict(row) for row in rows]

    # Deleting --------------------------------------------------------------------------

    def delete(self, ref: str) -> int:
        """Removes one run; refuses one still running (here, or on another host)."""
        run_id = self.resolve(ref)
        with self._write() as conn:  # steps go by ON DELETE CASCADE, search rows by trigger
            for owner in self._running(conn, "id = ?", (run_id,)):
                if owner.state == "alive":
                    raise MemagentError(
                        f"Run {run_id[:8]} is still running ({owner.where()})",
                        hint=f"Stop it first (Ctrl-C in its terminal, or kill {owner.pid}), then remove it.",
                    )
                if owner.state == "elsewhere":
                    raise MemagentError(
                        f"Run {run_id[:8]} is running on another host ({owner.where()}), which memagent cannot check from here",
                        hint=f"Stop it there first (Ctrl-C in its terminal, or kill {owner.pid} on that host), then remove it;"
                        f" if that host or container is gone, `memagent traces release {run_id[:8]}` first.",
                    )
            return conn.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount

    def release(self, ref: str) -> Owner:
        """Marks interrupted a run recorded as running on another host, whose process the user
        knows to be gone (a container replaced, a machine renamed): memagent cannot check it from
        here, so it would stay "running" for good. Refuses a run whose process is alive here."""
        run_id = self.resolve(ref)
        with self._write() as conn:
            owners = self._running(conn, "id = ?", (run_id,))
            if not owners:
                raise MemagentError(
                    f"Run {run_id[:8]} is not running: there is nothing to release.",
                    hint=f"Resume it (memagent ask --resume {run_id[:8]}) or remove it as it is.",
                    exit_code=EXIT_USAGE,
                )
            owner = owners[0]
            if owner.state == "alive":
                raise MemagentError(
                    f"Run {run_id[:8]} is still running here ({owner.where()})",
                    hint=f"Stop it (Ctrl-C in its terminal, or kill {owner.pid}); it is then marked interrupted by itself.",
                )
            note = owner.ended_note()
            if owner.state == "elsewhere":
                note = f"Released on {socket.gethostname()}: its process (pid {owner.pid} on {owner.host}) was taken to be gone."
            conn.execute("UPDATE runs SET status = 'interrupted', error = ? WHERE id = ? AND status = 'running'", (note, run_id))
        return owner

    def delete_older_than(self, seconds: float) -> Removed:
        """Removes every run started longer ago than `seconds`, except those still running:
        a running run whose process is gone is marked interrupted and removed like the rest."""
        if seconds < 0:
            raise ValueError("seconds must be 0 or more")
        cutoff = _timestamp(datetime.now(timezone.utc) - timedelta(seconds=seconds))
        with self._write() as conn:  # the write lock: no run starts, resumes or finishes meanwhile
            owners = self._running(conn, "started_at < ?", (cutoff,))
            self._mark_ended(conn, owners)
            count = conn.execute("DELETE FROM runs WHERE started_at < ? AND status != 'running'", (cutoff,)).rowcount
        return Removed(count, [o for o in owners if o.state != "dead"])

    # Running runs ----------------------------------------------------------------------

    def _running(self, conn: sqlite3.Connection, where: str = "", params: Sequence[object] = ()) -> list[Owner]:
        """The runs recorded as running (those matching `where` too), each judged alive or not."""
        sql = "SELECT id, pid, host, pid_started FROM runs WHERE status = 'running'" + (f" AND {where}" if where else "")
        return [Owner(row[0], row[1], row[2], row[3], liveness(row[1], row[2], row[3])) for row in conn.execute(sql, params)]

    def _mark_ended(self, conn: sqlite3.Connection, owners: Sequence[Owner]) -> None:
        """Marks interrupted the runs among `owners` whose process is gone. The owner must still
        be the one judged: a run resumed meanwhile by another process is left alone."""
        for owner in owners:
            if owner.state == "dead":
                conn.execute(
                    "UPDATE runs SET status = 'interrupted', error = ? WHERE id = ? AND status = 'running'"
                    " AND pid IS ? AND host IS ? AND pid_started IS ?",
                    (owner.ended_note(), owner.run_id, owner.pid, owner.host, owner.started),
                )

    def _reap(self, run_id: str | None = None) -> None:
        """Marks interrupted the running runs (or the one) whose process is gone. A read does
        this: it writes only when it finds one, and a write that fails leaves it for later."""
        where, params = ("id = ?", (run_id,)) if run_id is not None else ("", ())
        dead = [o for o in self._running(self._db, where, params) if o.state == "dead"]
        if not dead:
            return
        try:
            with self._write() as conn:
                self._mark_ended(conn, dead)
        except (sqlite3.Error, MemagentError):  # a read-only or busy database: still readable
            pass


@dataclass(frozen=True)
class Removed:
    """What `delete_older_than` did: how many runs it removed, and the running ones it kept."""

    count: int
    kept: list[Owner]


def _timestamp(moment: str | datetime | None) -> str:
    """ISO 8601 UTC in one fixed format, so that comparing the text compares the times."""
    if moment is None:
        moment = datetime.now(timezone.utc)
    elif isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is None:  # a naive time is taken as UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")


def _json(value: object) -> str:
    # ASCII escapes: a path from a non-UTF-8 file name holds lone surrogates, which SQLite's
    # UTF-8 text cannot store but a \udcXX escape round-trips exactly (resume reopens it).
    return json.dumps(value, ensure_ascii=True, default=str)  # default: Paths become text


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for name in JSON_COLUMNS:
        if out.get(name) is not None:
            out[name] = json.loads(out[name])
    return out


def _step(row: sqlite3.Row) -> dict[str, Any]:
    """A step as it was recorded: a `decision` only where the step has one (an InfMem step)."""
    step = _decode(row)
    for name in ("decision", "copied_from"):
        if step.get(name) is None:
            step.pop(name, None)
    return step


def _quotes_of(result: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every quote a stored result holds: its own and each field's."""
    by_field = result.get("evidence_by_field") or {}
    return [*(result.get("quotes") or []), *(q for found in by_field.values() for q in found)]
