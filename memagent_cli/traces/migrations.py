"""The trace database's schema: its numbered migrations, and applying them.

This module owns the SQL that creates and changes the tables of traces.db (runs, steps, the
full-text search index, the owner of a running run) and the schema_migrations table that
records which migrations a database has had. The store opens the database and calls migrate.
"""

from __future__ import annotations

import sqlite3
from typing import Callable

from ..errors import MemagentError

# Numbered migrations: MIGRATIONS[k] brings a database from version k to k + 1. Never edit
# one that has shipped; append a new one instead. Each runs in one transaction, recorded in
# schema_migrations (which migrate creates, so a migration never has to).
MIGRATIONS: list[str] = [
    # 1: runs and their steps.
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,            -- 12 lowercase hex characters
        started_at TEXT NOT NULL,       -- ISO 8601 UTC, one format so text order is time order
        ended_at TEXT,
        status TEXT NOT NULL,           -- running | complete | interrupted | failed
        error TEXT,
        question TEXT NOT NULL,
        sources TEXT NOT NULL,          -- JSON list of {path, kind, size, sha256, pages, tokens}
        model TEXT NOT NULL,            -- JSON {path, name, size}
        settings TEXT NOT NULL,         -- JSON of every setting
        document_tokens INTEGER,
        steps_total INTEGER,
        raw_answer TEXT,
        answer TEXT
    );
    CREATE INDEX runs_started_at ON runs (started_at);
    CREATE TABLE steps (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        "index" INTEGER NOT NULL,       -- 1-based
        spans TEXT NOT NULL,            -- JSON list of {source, path, pages, start, end}
        tokens INTEGER,
        memory TEXT NOT NULL,           -- the memory after this step
        memory_tokens INTEGER,
        prompt_tokens INTEGER,
        generated_tokens INTEGER,
        seconds REAL,
        finish_reason TEXT,
        PRIMARY KEY (run_id, "index")
    );
    """,
    # 2: full-text search over memories, questions and answers.
    # search_docs is the searchable text with a stable integer key: the FTS index needs one,
    # and neither table has it (the implicit rowid of runs and steps may change on VACUUM).
    # Triggers keep search_docs in step with runs and steps, and the index with search_docs.
    """
    CREATE TABLE search_docs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        step INTEGER,                   -- NULL for the run's question and answer
        field TEXT NOT NULL,            -- memory | question | answer
        body TEXT NOT NULL
    );
    CREATE INDEX search_docs_run ON search_docs (run_id, step);
    CREATE VIRTUAL TABLE search_fts USING fts5 (body, content = 'search_docs', content_rowid = 'id');

    CREATE TRIGGER search_docs_ai AFTER INSERT ON search_docs BEGIN
        INSERT INTO search_fts (rowid, body) VALUES (new.id, new.body);
    END;
    CREATE TRIGGER search_docs_ad AFTER DELETE ON search_docs BEGIN
        INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', old.id, old.body);
    END;

    CREATE TRIGGER runs_search_ai AFTER INSERT ON runs BEGIN
        INSERT INTO search_docs (run_id, step, field, body) VALUES (new.id, NULL, 'question', new.question);
        INSERT INTO search_docs (run_id, step, field, body)
            SELECT new.id, NULL, 'answer', new.answer WHERE new.answer IS NOT NULL;
    END;
    CREATE TRIGGER runs_search_au AFTER UPDATE OF id, question, answer ON runs BEGIN
        DELETE FROM search_docs WHERE run_id = old.id AND step IS NULL;
        INSERT INTO search_docs (run_id, step, field, body) VALUES (new.id, NULL, 'question', new.question);
        INSERT INTO search_docs (run_id, step, field, body)
            SELECT new.id, NULL, 'answer', new.answer WHERE new.answer IS NOT NULL;
    END;
    -- Explicit rather than a foreign key, so a run deleted with foreign keys off (the sqlite3
    -- shell's default) still leaves no orphaned search rows.
    CREATE TRIGGER runs_search_ad AFTER DELETE ON runs BEGIN
        DELETE FROM search_docs WHERE run_id = old.id;
    END;

    CREATE TRIGGER steps_search_ai AFTER INSERT ON steps BEGIN
        INSERT INTO search_docs (run_id, step, field, body) VALUES (new.run_id, new."index", 'memory', new.memory);
    END;
    CREATE TRIGGER steps_search_au AFTER UPDATE OF run_id, "index", memory ON steps BEGIN
        DELETE FROM search_docs WHERE run_id = old.run_id AND step = old."index";
        INSERT INTO search_docs (run_id, step, field, body) VALUES (new.run_id, new."index", 'memory', new.memory);
    END;
    CREATE TRIGGER steps_search_ad AFTER DELETE ON steps BEGIN
        DELETE FROM search_docs WHERE run_id = old.run_id AND step = old."index";
    END;

    -- Backfill what was recorded before this migration (the triggers above index it).
    INSERT INTO search_docs (run_id, step, field, body) SELECT id, NULL, 'question', question FROM runs;
    INSERT INTO search_docs (run_id, step, field, body)
        SELECT id, NULL, 'answer', answer FROM runs WHERE answer IS NOT NULL;
    INSERT INTO search_docs (run_id, step, field, body) SELECT run_id, "index", 'memory', memory FROM steps;
    """,
    # 3: who runs a run, so that a running run can be told from one whose process died. Set when
    # the run is created and again when another process resumes it; NULL in runs recorded before.
    # The partial index keeps finding the running runs cheap however many runs there are.
    """
    ALTER TABLE runs ADD COLUMN pid INTEGER;           -- the process running it
    ALTER TABLE runs ADD COLUMN host TEXT;             -- socket.gethostname() of that process
    ALTER TABLE runs ADD COLUMN pid_started TEXT;      -- Linux: "<boot id>/<start time in ticks>", against pid reuse
    CREATE INDEX runs_running ON runs (status) WHERE status = 'running';
    """,
    # 4: speculative memory rewrites: per step, the tokens drafted and the model's share of them
    # (0 without --speculate; NULL in steps recorded before).
    """
    ALTER TABLE steps ADD COLUMN drafted_tokens INTEGER;
    ALTER TABLE steps ADD COLUMN accepted_tokens INTEGER;
    """,
    # 5: the quotes an answer rests on, as places in the sources and never their text (document
    # text is not stored): `traces show` reads the text again from the source, whose sha256 the
    # run's sources keep. NULL in runs recorded before, or not finished.
    """
    ALTER TABLE runs ADD COLUMN quotes TEXT;            -- JSON list of {source, start, end, step, location}
    """,
    # 6: an InfMem step's planner decision (its reply, its searches' queries and the places of the
    # units found, never their text), which --resume replays; NULL for every other protocol's steps.
    """
    ALTER TABLE steps ADD COLUMN decision TEXT;         -- JSON {action, searches, stop_streak, reply}
    """,
    # 7: answers found again (core/keys.py). A run's keys: `answer_key` finds a finished answer to
    # the same question over the same text, `lineage_key` an earlier run over an earlier version of
    # the same files, to continue where their chunks' token ids (a step's `digest`) are the same.
    # `result` is the rest of the run's `ask --json` record (data, device, timings, quotes'
    # places by field), so a reused answer prints as it did. NULL in runs recorded before: never reused.
    """
    ALTER TABLE runs ADD COLUMN answer_key TEXT;        -- sha256 of what decides the answer; NULL: stdin
    ALTER TABLE runs ADD COLUMN lineage_key TEXT;       -- the same, the files by place instead of content
    ALTER TABLE runs ADD COLUMN result TEXT;            -- JSON: ask --json's record less steps, quotes as places
    ALTER TABLE runs ADD COLUMN continued_from TEXT;    -- JSON {run, step}: its first steps were that run's
    ALTER TABLE runs ADD COLUMN reuses INTEGER NOT NULL DEFAULT 0;  -- times its answer was given again
    ALTER TABLE runs ADD COLUMN reused_at TEXT;         -- the last of those
    ALTER TABLE steps ADD COLUMN digest TEXT;           -- sha256 of the chunk's token ids
    ALTER TABLE steps ADD COLUMN copied_from TEXT;      -- the run this step was taken from (continued)
    CREATE INDEX runs_answer_key ON runs (answer_key, ended_at) WHERE status = 'complete';
    CREATE INDEX runs_lineage_key ON runs (lineage_key, ended_at) WHERE status = 'complete';
    """,
    # 8: conversations. Every `ask` is a turn of one: a new question starts one (its id the run's),
    # a follow-up (`ask -c`, `chat`) is its next turn. A turn names the run that answered it: its
    # own, or, for a turn answered from the store, the earlier run it was given from (`reused`).
    # `first_run` holds the conversation's sources, model and settings. Each run recorded before is
    # its own conversation of one turn. A run removed takes its turns with it, and a conversation
    # whose first run is removed goes too.
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        started_at TEXT NOT NULL,
        first_run TEXT NOT NULL
    );
    CREATE TABLE turns (
        conversation TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        turn INTEGER NOT NULL,              -- 1-based
        run_id TEXT NOT NULL,
        question TEXT NOT NULL,             -- as asked (a follow-up's run reads it after the earlier turns)
        asked_at TEXT NOT NULL,
        reused INTEGER NOT NULL DEFAULT 0,  -- 1: answered from run_id, which an earlier turn (or ask) made
        changed TEXT,                       -- JSON {option: value}: the settings this turn gave over the first's
        PRIMARY KEY (conversation, turn)
    );
    CREATE INDEX turns_run ON turns (run_id);
    CREATE INDEX turns_asked_at ON turns (asked_at);
    CREATE TRIGGER runs_turns_ad AFTER DELETE ON runs BEGIN
        DELETE FROM conversations WHERE first_run = old.id;
        DELETE FROM turns WHERE run_id = old.id;
    END;
    INSERT INTO conversations (id, started_at, first_run) SELECT id, started_at, id FROM runs;
    INSERT INTO turns (conversation, turn, run_id, question, asked_at) SELECT id, 1, id, question, started_at FROM runs;
    """,
    # 9: watches. A `memagent watch` records itself (its process, as a running run does) and its
    # table as it keeps it, a row per document and question, so that the page (`memagent serve`)
    # shows it live. (From this version on, the runs of a job, --each, batch, watch or eval, are
    # turns of no conversation: only a question a person asks begins one.)
    """
    CREATE TABLE watches (
        id TEXT PRIMARY KEY,
        started_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        ended_at TEXT,
        paths TEXT NOT NULL,                -- JSON list, as named
        questions TEXT NOT NULL,            -- JSON list
        cwd TEXT,
        pid INTEGER,
        host TEXT,
        pid_started TEXT
    );
    CREATE TABLE watch_rows (
        watch_id TEXT NOT NULL REFERENCES watches (id) ON DELETE CASCADE,
        key TEXT NOT NULL,                  -- the document's title and the question (core.jobs.Job.each)
        document TEXT NOT NULL,
        question TEXT NOT NULL,
        state TEXT NOT NULL,                -- as the watch's own table says it: queued, reading, answered …
        answer TEXT,
        run_id TEXT,
        error TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (watch_id, key)
    );
    CREATE INDEX watches_started_at ON watches (started_at);
    """,
]


def migrate(conn: sqlite3.Connection, now: Callable[[], str]) -> None:
    """Brings the database to the newest schema; `now()` gives each migration's applied_at text."""
    version = _schema_version(conn)
    if version > len(MIGRATIONS):
        raise MemagentError(
            f"The trace database was written by a newer memagent (schema {version}, this one knows {len(MIGRATIONS)})",
            hint="upgrade memagent, or run with --no-trace",
        )
    for number in range(version + 1, len(MIGRATIONS) + 1):
        # The version row goes in first: when two processes open a new database at once, the
        # second one waits for the write lock and then fails on it instead of on the schema.
        script = (
            f"BEGIN IMMEDIATE;"
            f" CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT);"
            f" INSERT INTO schema_migrations VALUES ({number}, '{now()}');"
            f" {MIGRATIONS[number - 1]}; COMMIT;"
        )
        try:
            conn.executescript(script)
        except sqlite3.IntegrityError:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if _schema_version(conn) < number:  # not a concurrent open: a real failure
                raise
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def _schema_version(conn: sqlite3.Connection) -> int:
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").fetchone():
        version: int = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
        return version
    return 0
