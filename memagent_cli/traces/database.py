"""The trace database's file: opening it (WAL, the busy timeout, the schema brought up to date), a
damaged file moved aside for a new one, and SQLite's errors as lines a user can act on. store.py
calls these; every read and write of the tables is the store's."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Callable, NoReturn

from ..errors import MemagentError
from .migrations import migrate

# SQLite's primary result codes (https://sqlite.org/rc.html), which the sqlite3 module names only
# from Python 3.11 on (as it gives errors their sqlite_errorcode; see error_code).
SQLITE_PERM = 3
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_CORRUPT = 11
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26


def open_database(path: Path, timeout: float, now: Callable[[], str]) -> tuple[sqlite3.Connection, str | None]:
    """The connection to the database at `path`, and a line for the user (or None): a damaged file
    is moved aside and a new one started. `now()` stamps the migrations it applies."""
    try:
        try:
            return _open(path, timeout, now), None
        except _Damaged as damaged:
            notice = f"The trace database was damaged; it was moved to {damaged.moved_to} and a new one started."
            return _open(path, timeout, now), notice
    except sqlite3.Error as e:
        raise_for(path, e)


def _open(path: Path, timeout: float, now: Callable[[], str]) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; writes use BEGIN IMMEDIATE (store._write).
    # `timeout` installs SQLite's busy timeout, so concurrent writers wait their turn.
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        conn.create_function("icontains", 2, _icontains, deterministic=True)
        conn.execute("PRAGMA foreign_keys = ON")
        # WAL: readers never block the writer, and each commit is one append.
        _enable_wal(conn, timeout)
        # In WAL, NORMAL syncs at checkpoints, not at every commit: a crash of memagent loses
        # nothing; a power cut may lose the last steps, which a resume runs again. Halves a
        # step's commit (B10: 13 commits a run, on the thread that hands events to the views).
        conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn, now)
    except sqlite3.DatabaseError as e:
        if error_code(e) not in (SQLITE_CORRUPT, SQLITE_NOTADB):
            conn.close()
            raise
        # Keep the damaged files (they are the user's data) and let the caller start afresh.
        raise _Damaged(_move_aside(path, conn)) from e
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    # Switching a new database to WAL takes an exclusive lock, and SQLite answers "locked"
    # at once, without its busy handler, when another process is doing the same: two runs
    # started together on a fresh machine. Retry for as long as the busy timeout allows.
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _move_aside(path: Path, conn: sqlite3.Connection) -> Path:
    """Moves the database to traces.db.corrupt-<UTC time>, with its -wal and -shm files."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.corrupt-{stamp}-{n}"), n + 1
    # The -wal may hold the last writes, and closing the connection deletes it: copy first.
    for suffix in ("-wal", "-shm"):
        if Path(f"{path}{suffix}").exists():
            shutil.copyfile(f"{path}{suffix}", f"{target}{suffix}")
    conn.close()
    for suffix in ("", "-wal", "-shm"):  # left behind, a stale -wal would poison the new file
        try:
            os.replace(f"{path}{suffix}", f"{target}{suffix}")
        except FileNotFoundError:  # already gone, or another process moved it first
            pass
    return target


def raise_for(path: Path, e: sqlite3.Error) -> NoReturn:
    """Raises the MemagentError a user can act on for a SQLite error, else the error itself."""
    code = error_code(e)
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        raise MemagentError(
            f"Another memagent process holds the trace database {path}",
            hint="wait for it to finish, or run with --no-trace",
        ) from e
    if code in (SQLITE_CANTOPEN, SQLITE_READONLY, SQLITE_PERM):
        raise MemagentError(
            f"Cannot write the trace database {path}: {e}",
            hint="set MEMAGENT_HOME to a writable directory, or use --no-trace",
        ) from e
    raise e


class _Damaged(Exception):
    """The database file was damaged and has been moved to `moved_to`."""

    def __init__(self, moved_to: Path):
        super().__init__(str(moved_to))
        self.moved_to = moved_to


def _icontains(haystack: str | None, needle: str) -> bool:
    return haystack is not None and needle.casefold() in str(haystack).casefold()


def error_code(e: sqlite3.Error) -> int | None:
    code: int | None = getattr(e, "sqlite_errorcode", None)  # Python 3.11 and later
    return None if code is None else code & 0xFF  # the primary code, without extended bits
