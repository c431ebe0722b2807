"""The trace store on real SQLite files: schema and migrations, runs and steps, lookup,
search, deletion, damaged and locked databases, and two writers at once."""

from __future__ import annotations

import os
import queue
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import platformdirs
import pytest

from memagent_cli.cli.traces import parse_age
from memagent_cli.errors import EXIT_USAGE, MemagentError
from memagent_cli.paths import default_home
from memagent_cli.traces import store as store_module
from memagent_cli.traces.migrations import MIGRATIONS
from memagent_cli.traces.ownership import liveness, this_process
from memagent_cli.traces.store import Removed, TraceStore

REPO = Path(__file__).resolve().parents[1]
SOURCES = [{"path": "/docs/River Report.pdf", "kind": "pdf", "size": 1234, "sha256": "ab" * 32, "pages": 12, "tokens": 9000}]
MODEL = {"path": "/models/memagent-7b.gguf", "name": "memagent-7b", "size": 4_680_000_000}
SETTINGS = {"chunk_tokens": 5000, "memory_tokens": 1024, "temperature": 0.7, "seed": None}


def step(index: int, memory: str = "nothing yet", **extra) -> dict:
    return {
        "index": index,
        "spans": [{"source": 0, "path": "/docs/a.txt", "pages": None, "start": 0, "end": 10}],
        "tokens": 5000,
        "memory": memory,
        "memory_tokens": 40,
        "prompt_tokens": 5400,
        "generated_tokens": 41,
        "drafted_tokens": 12,
        "accepted_tokens": 9,
        "seconds": 1.25,
        "finish_reason": "stop",
        **extra,
    }


def new_run(store: TraceStore, question: str = "Who flooded the mills?", **kw) -> str:
    kw.setdefault("sources", SOURCES)
    return store.create_run(question=question, model=MODEL, settings=SETTINGS, **kw)


def ago(**delta) -> str:
    return (datetime.now(timezone.utc) - timedelta(**delta)).isoformat()


@pytest.fixture
def store(tmp_path):
    with TraceStore(tmp_path / "traces.db") as s:
        yield s


def raw(path: Path) -> sqlite3.Connection:
    """A second, plain connection: what another process would see."""
    return sqlite3.connect(path, isolation_level=None)


# Location, pragmas, migrations -----------------------------------------------------------


def test_default_location_follows_memagent_home(tmp_path, monkeypatch):
    home = tmp_path / "nested" / "home"
    monkeypatch.setenv("MEMAGENT_HOME", str(home))
    assert default_home() == home
    with TraceStore() as s:
        assert s.path == home / "traces.db"
        new_run(s)
    assert (home / "traces.db").is_file()


def test_default_location_without_memagent_home(monkeypatch):
    monkeypatch.delenv("MEMAGENT_HOME", raising=False)
    assert default_home() == Path(platformdirs.user_data_dir("memagent"))


def test_wal_mode_is_kept_in_the_file(store):
    assert raw(store.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in the file


def test_the_store_enforces_foreign_keys(store):
    """SQLite enforces foreign keys only on a connection that turns them on (a plain one, as here,
    does not): a run's steps go with it only by the schema's ON DELETE CASCADE, so the store's own
    connection must have them on."""
    run_id = new_run(store)
    store.add_step(run_id, step(1))
    store.add_step(run_id, step(2))
    store.finish_run(run_id, "complete")
    other = raw(store.path)
    assert other.execute("PRAGMA foreign_keys").fetchone() == (0,)  # the cascade below is not this one's
    assert other.execute("SELECT count(*) FROM steps WHERE run_id = ?", (run_id,)).fetchone() == (2,)
    assert store.delete(run_id) == 1
    assert other.execute("SELECT count(*) FROM steps WHERE run_id = ?", (run_id,)).fetchone() == (0,)


def test_empty_database_gets_every_migration_once(tmp_path):
    path = tmp_path / "traces.db"
    TraceStore(path).close()
    rows = raw(path).execute("SELECT version, applied_at FROM schema_migrations ORDER BY version").fetchall()
    assert len(MIGRATIONS) >= 2
    assert [v for v, _ in rows] == list(range(1, len(MIGRATIONS) + 1))
    assert all(datetime.fromisoformat(at).tzinfo is not None for _, at in rows)
    TraceStore(path).close()  # reopening applies nothing again
    assert raw(path).execute("SELECT version, applied_at FROM schema_migrations ORDER BY version").fetchall() == rows


def test_upgrade_from_migration_1_keeps_and_indexes_old_rows(tmp_path):
    path = tmp_path / "traces.db"
    conn = raw(path)
    conn.executescript(MIGRATIONS[0])
    conn.executescript(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT);"
        "INSERT INTO schema_migrations VALUES (1, '2024-01-01T00:00:00+00:00');"
        "INSERT INTO runs (id, started_at, status, question, sources, model, settings, answer)"
        " VALUES ('0123456789ab', '2024-01-02T00:00:00.000000+00:00', 'complete', 'Where did the otter swim?',"
        " '[]', '{}', '{}', 'Downstream past the weir');"
        'INSERT INTO steps (run_id, "index", spans, tokens, memory) VALUES'
        " ('0123456789ab', 1, '[]', 10, 'The otter swam by the granary'),"
        " ('0123456789ab', 2, '[]', 10, 'The otter reached the weir');"
    )
    conn.close()

    with TraceStore(path) as s:
        versions = [r[0] for r in raw(path).execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == list(range(1, len(MIGRATIONS) + 1))
        hits = {(h["field"], h["step"]) for h in s.search("otter")}
        assert hits == {("question", None), ("memory", 1), ("memory", 2)}
        assert [(h["field"], h["run_id"]) for h in s.search("weir downstream")] == [("answer", "0123456789ab")]
        assert s.get_run("0123")["step_count"] == 2
        # ...and the triggers took over from the backfill.
        s.add_step("0123456789ab", step(3, "The otter slept under the granary"))
        assert {h["step"] for h in s.search("granary")} == {1, 3}


def database_at(path, version: int):
    """A database as a memagent that knew migrations 1 to `version` left it, open."""
    conn = raw(path)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for number in range(1, version + 1):
        conn.executescript(
            f"BEGIN; INSERT INTO schema_migrations VALUES ({number}, '2024-01-01T00:00:00+00:00');"
            f" {MIGRATIONS[number - 1]}; COMMIT;"
        )
    return conn


def test_upgrade_from_migration_3_reads_old_steps_as_undrafted(tmp_path):
    """Steps recorded before speculative rewrites have no draft counts: they read back as 0, so a
    step has the same shape whatever memagent recorded it."""
    path = tmp_path / "traces.db"
    conn = database_at(path, 3)
    conn.executescript(
        "INSERT INTO runs (id, started_at, status, question, sources, model, settings, answer) VALUES"
        " ('0123456789ab', '2024-01-02T00:00:00.000000+00:00', 'complete', 'Where did the otter swim?',"
        " '[]', '{}', '{}', 'Downstream past the weir');"
        'INSERT INTO steps (run_id, "index", spans, tokens, memory, generated_tokens) VALUES'
        " ('0123456789ab', 1, '[]', 10, 'The otter swam by the granary', 7);"
    )
    conn.close()

    with TraceStore(path) as s:
        old = s.get_run("0123456789ab")["steps"][0]
        assert (old["generated_tokens"], old["drafted_tokens"], old["accepted_tokens"]) == (7, 0, 0)
        s.add_step("0123456789ab", step(2, "The otter reached the weir"))
        assert s.get_run("0123456789ab")["steps"][1]["accepted_tokens"] == 9


def test_upgrade_from_migration_2_adds_run_owners(tmp_path):
    path = tmp_path / "traces.db"
    conn = database_at(path, 2)
    conn.executescript(
        "INSERT INTO runs (id, started_at, status, question, sources, model, settings, answer) VALUES"
        " ('0123456789ab', '2024-01-02T00:00:00.000000+00:00', 'complete', 'Where did the otter swim?',"
        " '[]', '{}', '{}', 'Downstream past the weir'),"
        " ('ba9876543210', '2024-01-03T00:00:00.000000+00:00', 'running', 'Where is the heron?', '[]', '{}', '{}', NULL);"
        'INSERT INTO steps (run_id, "index", spans, tokens, memory) VALUES'
        " ('ba9876543210', 1, '[]', 10, 'The heron stood by the mill');"
    )
    conn.close()

    with TraceStore(path) as s:
        versions = [r[0] for r in raw(path).execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == list(range(1, len(MIGRATIONS) + 1))
        assert {"pid", "host", "pid_started"} <= {r[1] for r in raw(path).execute("PRAGMA table_info(runs)")}
        # A run an older memagent left running has no process to check: it is taken as ended.
        runs = {r["id"]: r for r in s.list_runs()}
        assert runs["0123456789ab"]["status"] == "complete" and runs["0123456789ab"]["error"] is None
        assert runs["ba9876543210"]["status"] == "interrupted" and "older memagent" in runs["ba9876543210"]["error"]
        assert runs["ba9876543210"]["step_count"] == 1 and {h["run_id"] for h in s.search("heron")} == {"ba9876543210"}
        new = new_run(s)
        removed = s.delete_older_than(0)
        assert removed.count == 2 and [(o.run_id, o.state) for o in removed.kept] == [(new, "alive")]
        assert [r["id"] for r in s.list_runs()] == [new] and fts_consistent(s)


def test_upgrade_from_migration_6_keeps_every_run_readable_and_finds_none_again(tmp_path):
    """Runs recorded before answers were found again have no keys: they stay readable and resumable,
    are never given as another run's answer, and a step of theirs has the shape of a new one."""
    path = tmp_path / "traces.db"
    conn = database_at(path, 6)
    conn.executescript(
        "INSERT INTO runs (id, started_at, ended_at, status, question, sources, model, settings, answer, quotes) VALUES"
        " ('0123456789ab', '2024-01-02T00:00:00.000000+00:00', '2024-01-02T00:01:00.000000+00:00', 'complete',"
        " 'Where did the otter swim?', '[]', '{}', '{}', 'Downstream past the weir', '[]');"
        'INSERT INTO steps (run_id, "index", spans, tokens, memory, generated_tokens) VALUES'
        " ('0123456789ab', 1, '[]', 10, 'The otter swam by the granary', 7);"
    )
    conn.close()

    with TraceStore(path) as s:
        versions = [r[0] for r in raw(path).execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == list(range(1, len(MIGRATIONS) + 1))
        old = s.get_run("0123456789ab")
        assert (old["continued_from"], old["reuses"], old["reused_at"], old["answer"]) == (
            None,
            0,
            None,
            "Downstream past the weir",
        )
        assert set(old["steps"][0]) == set(step(1))  # no copied_from, no digest: the shape of every step
        assert s.stored_result("0123456789ab") is None and s.continuable("x" * 64) is None
        new = s.create_run(question="q", sources=[], model={}, settings={}, keys={"answer": "a" * 64, "lineage": "b" * 64})
        s.add_step(new, {**step(1), "digest": "c" * 64})
        s.finish_run(new, "complete", answer="weir", result={"answer": "weir", "quotes": []})
        found = s.answered("a" * 64)
        assert found is not None and found["id"] == new and found["result"] == {"answer": "weir", "quotes": []}
        assert s.continuable("b" * 64) == (new, [{**step(1), "digest": "c" * 64}])
        s.mark_reused(new)
        assert [r["id"] for r in s.list_runs(reused=True)] == [new] and s.get_run(new)["reuses"] == 1
        with pytest.raises(ValueError, match="place, not its text"):
            s.finish_run(new, "complete", result={"quotes": [{"text": "the weir"}]})


def test_answer_lookup_uses_its_index(store):
    """The key look-up reads one row of an index, whatever the number of runs (B18, benchmarks/reuse.py, times it)."""
    plan = (
        raw(store.path)
        .execute(
            "EXPLAIN QUERY PLAN SELECT id FROM runs WHERE answer_key = ? AND status = 'complete' AND result IS NOT NULL"
            " ORDER BY ended_at DESC LIMIT 1",
            ("a" * 64,),
        )
        .fetchall()
    )
    assert any("runs_answer_key" in row[-1] for row in plan), plan
    plan = (
        raw(store.path)
        .execute(
            "EXPLAIN QUERY PLAN SELECT id FROM runs WHERE lineage_key = ? AND status = 'complete' ORDER BY ended_at DESC LIMIT 1",
            ("a" * 64,),
        )
        .fetchall()
    )
    assert any("runs_lineage_key" in row[-1] for row in plan), plan


def test_database_from_a_newer_memagent_is_refused(tmp_path):
    path = tmp_path / "traces.db"
    TraceStore(path).close()
    raw(path).execute("INSERT INTO schema_migrations VALUES (?, 'later')", (len(MIGRATIONS) + 1,))
    with pytest.raises(MemagentError) as info:
        TraceStore(path)
    assert "newer memagent" in info.value.message
    assert "upgrade memagent" in info.value.hint


# Runs and steps ----------------------------------------------------------------------------


def test_run_round_trip(store):
    run_id = new_run(store)
    assert len(run_id) == 12 and all(c in "0123456789abcdef" for c in run_id)
    running = store.get_run(run_id)
    assert running["status"] == "running" and running["ended_at"] is None and running["answer"] is None
    assert running["steps"] == [] and running["step_count"] == 0

    store.update_run(run_id, document_tokens=12000, steps_total=3, settings={**SETTINGS, "seed": 7})
    for index in (2, 1, 3):  # stored by index whatever the order they arrive in
        store.add_step(run_id, step(index, f"memory after step {index}"))
    store.finish_run(run_id, "complete", answer="the miller", raw_answer="\\boxed{the miller}")

    run = store.get_run(run_id)
    assert run["status"] == "complete" and run["answer"] == "the miller"
    assert run["raw_answer"] == "\\boxed{the miller}" and run["error"] is None
    assert datetime.fromisoformat(run["ended_at"]) >= datetime.fromisoformat(run["started_at"])
    assert run["sources"] == SOURCES and run["model"] == MODEL
    assert run["settings"] == {**SETTINGS, "seed": 7}
    assert (run["document_tokens"], run["steps_total"], run["step_count"]) == (12000, 3, 3)
    assert run["steps"] == [step(i, f"memory after step {i}") for i in (1, 2, 3)]
    assert set(run) == {
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
        "step_count",
        "conversation",
        "turn",
        "asked",
        "steps",
    }
    assert (run["continued_from"], run["reuses"], run["reused_at"]) == (None, 0, None)
    assert (run["conversation"], run["turn"]) == (run_id, 1)  # a run of its own begins a conversation
    assert run["quotes"] is None  # a run finished without quotes
    assert "steps" not in store.get_run(run_id, with_steps=False)


def test_a_run_keeps_its_quotes_places_and_refuses_their_text(store):
    """Document text is never stored: a quote is kept as where it is (docs/JSON.md, traces)."""
    run_id = new_run(store)
    place = {"source": 0, "start": 10, "end": 40, "step": 2, "location": "a.txt chars 10–40", "form": None, "pages": None}
    with pytest.raises(ValueError, match="not its text"):
        store.finish_run(run_id, "complete", answer="x", quotes=[{**place, "text": "a sentence of the document"}])
    store.finish_run(run_id, "complete", answer="x", quotes=[place])
    assert store.get_run(run_id)["quotes"] == [place]


def test_failed_run_keeps_its_error(store):
    run_id = new_run(store)
    store.finish_run(run_id, "failed", error="model file vanished")
    run = store.get_run(run_id)
    assert (run["status"], run["error"], run["answer"]) == ("failed", "model file vanished", None)


def test_adding_a_step_again_replaces_it(store):
    run_id = new_run(store)
    store.add_step(run_id, step(1, "first draft about herons"))
    store.add_step(run_id, step(1, "second draft about egrets"))
    assert [s["memory"] for s in store.get_run(run_id)["steps"]] == ["second draft about egrets"]
    assert store.search("herons") == []
    assert [h["step"] for h in store.search("egrets")] == [1]


def test_bad_fields_are_refused(store):
    run_id = new_run(store)
    with pytest.raises(ValueError):
        store.update_run(run_id, question="rewritten")
    with pytest.raises(ValueError):
        store.update_run(run_id, status="done")
    with pytest.raises(ValueError):
        store.add_step(run_id, {**step(1), "source": []})
    with pytest.raises(ValueError):
        store.finish_run(run_id, "running")
    assert store.get_run(run_id)["step_count"] == 0


def test_writing_to_a_deleted_run_says_so(store):
    run_id = new_run(store)
    raw(store.path).execute("DELETE FROM runs WHERE id = ?", (run_id,))  # the sqlite3 shell, an older memagent
    with pytest.raises(MemagentError, match="no longer exists"):
        store.add_step(run_id, step(1))
    with pytest.raises(MemagentError, match="no longer exists"):
        store.finish_run(run_id, "interrupted")


def test_a_step_is_committed_when_added(store):
    run_id = new_run(store)
    store.add_step(run_id, step(1, "kept even if we crash now"))
    other = raw(store.path)
    assert other.execute("SELECT memory FROM steps WHERE run_id = ?", (run_id,)).fetchall() == [("kept even if we crash now",)]
    assert other.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone() == ("running",)


# Finding runs ------------------------------------------------------------------------------


def test_resolve_last_and_unique_prefix(store):
    with pytest.raises(MemagentError, match="No traces recorded yet"):
        store.resolve("last")
    first = new_run(store, started_at=ago(hours=2))
    second = new_run(store, started_at=ago(hours=1))
    assert store.resolve("last") == second
    third = new_run(store, started_at=ago(hours=3))  # newer rowid, older start: not last
    assert store.resolve("last") == second
    for run_id in (first, second, third):
        assert store.resolve(run_id) == run_id
        assert store.resolve(run_id.upper()) == run_id


def test_resolve_unknown(store):
    new_run(store)
    for ref in ("zz", "not-an-id", "%", "*", "0123456789abc0"):
        with pytest.raises(MemagentError) as info:
            store.resolve(ref)
        assert info.value.message == f"No trace matches '{ref}'"
        assert "memagent traces list" in info.value.hint


def test_resolve_ambiguous_prefix(store):
    seen: dict[str, str] = {}
    while True:  # at most 17 runs before two share a first character
        run_id = new_run(store)
        if run_id[0] in seen:
            break
        seen[run_id[0]] = run_id
    with pytest.raises(MemagentError) as info:
        store.resolve(run_id[0])
    assert "matches 2 traces" in info.value.message
    assert run_id in info.value.message and seen[run_id[0]] in info.value.message
    assert store.resolve(run_id[:12]) == run_id


def test_ambiguous_prefix_lists_at_most_five(store):
    for n in range(7):
        old = new_run(store)
        raw(store.path).execute("UPDATE runs SET id = ? WHERE id = ?", (f"abc00000000{n}", old))
    with pytest.raises(MemagentError) as info:
        store.resolve("abc")
    assert "matches 7 traces" in info.value.message and "and 2 more" in info.value.message
    assert sum(f"abc00000000{n}" in info.value.message for n in range(7)) == 5
    assert store.resolve("abc000000003") == "abc000000003"


def test_list_runs_order_and_filters(store):
    old = new_run(store, "Old question", started_at=ago(days=3), sources=[{"path": "/x/Minutes-2019.txt"}])
    mid = new_run(store, "Mid question", started_at=ago(days=2), sources=[{"path": "/x/ledger.pdf"}, {"path": "/y/ÄRGER.md"}])
    new = new_run(store, "New question", started_at=ago(days=1), sources=[{"path": "/x/minutes-2020.txt"}])
    store.add_step(mid, step(1))
    store.add_step(mid, step(2))
    store.finish_run(old, "complete", answer="yes")
    store.finish_run(mid, "interrupted")

    runs = store.list_runs()
    assert [r["id"] for r in runs] == [new, mid, old]
    assert [r["step_count"] for r in runs] == [0, 2, 0]
    assert all("steps" not in r for r in runs)
    assert runs[1]["sources"][1] == {"path": "/y/ÄRGER.md"}  # JSON decoded
    assert [r["id"] for r in store.list_runs(limit=2)] == [new, mid]
    assert len(store.list_runs(limit=None)) == 3
    assert [r["id"] for r in store.list_runs(status="running")] == [new]
    assert [r["id"] for r in store.list_runs(status="complete")] == [old]
    assert [r["id"] for r in store.list_runs(source="MINUTES")] == [new, old]
    assert [r["id"] for r in store.list_runs(source="ärger")] == [mid]  # not only ASCII case
    assert [r["id"] for r in store.list_runs(source="minutes", status="running")] == [new]
    assert store.list_runs(source="nowhere") == []
    with pytest.raises(MemagentError) as info:
        store.list_runs(status="done")
    assert info.value.exit_code == EXIT_USAGE


# Search ------------------------------------------------------------------------------------


def test_search_finds_memories_questions_and_answers(store):
    run_id = new_run(store, "Why did the heron leave?")
    store.add_step(run_id, step(1, "The mill pond froze in January."))
    store.add_step(run_id, step(2, "A heron nested on the mill roof until the pond froze."))
    store.finish_run(run_id, "complete", answer="Its pond froze over")
    other = new_run(store, "Unrelated question about ledgers")

    hits = store.search("heron")
    assert {(h["field"], h["step"]) for h in hits} == {("question", None), ("memory", 2)}
    assert all(h["run_id"] == run_id and h["question"] == "Why did the heron leave?" for h in hits)
    assert all("[heron]" in h["snippet"] for h in hits)
    assert set(hits[0]) == {"run_id", "step", "field", "snippet", "question", "started_at"}
    assert {(h["field"], h["step"]) for h in store.search("froze")} == {("memory", 1), ("memory", 2), ("answer", None)}
    # Every word must be there, anywhere in the text.
    assert [(h["field"], h["step"]) for h in store.search("froze heron")] == [("memory", 2)]
    assert [h["run_id"] for h in store.search("LEDGERS")] == [other]
    assert len(store.search("froze", limit=2)) == 2
    assert store.search("kingfisher") == []


@pytest.mark.parametrize(
    "text",
    [
        'foo" OR bar',
        '"',
        '""',
        "a-b",
        "*",
        "heron*",
        "-heron",
        "(heron",
        "heron)",
        "NEAR(heron mill)",
        "heron AND",
        "OR",
        "NOT mill",
        "^heron",
        "body:heron",
        "{body}: x",
        "'",
        ";DROP TABLE runs;--",
        "a:b:c",
        "+",
    ],
)
def test_search_never_chokes_on_user_text(store, text):
    run_id = new_run(store)
    store.add_step(run_id, step(1, "A heron stood by the mill; a-b testing."))
    hits = store.search(text)  # must not raise
    assert isinstance(hits, list)
    assert store.get_run(run_id)["step_count"] == 1


def test_search_matches_quoted_punctuation_as_words(store):
    run_id = new_run(store)
    store.add_step(run_id, step(1, 'The sign said "a-b road" closed.'))
    assert [h["step"] for h in store.search("a-b")] == [1]
    assert [h["step"] for h in store.search('"road"')] == [1]
    assert store.search('road" OR "heron') == []  # not an OR: the words road, or, heron


def test_empty_search_is_a_usage_error(store):
    for text in ("", "   \n"):
        with pytest.raises(MemagentError) as info:
            store.search(text)
        assert info.value.exit_code == EXIT_USAGE


# Deleting ----------------------------------------------------------------------------------


def fts_consistent(store: TraceStore) -> bool:
    try:
        raw(store.path).execute("INSERT INTO search_fts (search_fts) VALUES ('integrity-check')")
        return True
    except sqlite3.DatabaseError:
        return False


def test_delete_removes_run_steps_and_search_entries(store):
    gone = new_run(store, "Where is the otter?")
    kept = new_run(store, "Where is the badger?")
    for run_id in (gone, kept):
        store.add_step(run_id, step(1, "Seen near the weir."))
        store.add_step(run_id, step(2, "Seen near the granary."))
        store.finish_run(run_id, "complete")
    assert store.delete(gone[:8]) == 1
    with pytest.raises(MemagentError):
        store.resolve(gone)
    conn = raw(store.path)
    assert conn.execute("SELECT count(*) FROM steps WHERE run_id = ?", (gone,)).fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM steps WHERE run_id = ?", (kept,)).fetchone() == (2,)
    assert {h["run_id"] for h in store.search("weir")} == {kept}
    assert store.search("otter") == []
    assert fts_consistent(store)


def test_delete_older_than(store):
    old = [new_run(store, started_at=ago(days=40)), new_run(store, started_at=ago(days=31))]
    recent = [new_run(store, started_at=ago(days=29)), new_run(store)]
    store.add_step(old[0], step(1, "ancient memory"))
    for run_id in old + recent:
        store.finish_run(run_id, "complete")
    assert store.delete_older_than(parse_age("30d")) == Removed(2, [])
    assert {r["id"] for r in store.list_runs()} == set(recent)
    assert raw(store.path).execute("SELECT count(*) FROM steps").fetchone() == (0,)
    assert store.search("ancient") == []
    assert store.delete_older_than(parse_age("30d")) == Removed(0, [])
    assert fts_consistent(store)


# Running runs: alive, ended, elsewhere -----------------------------------------------------


def set_owner(store: TraceStore, run_id: str, **columns) -> None:
    """Records another process (pid, host, pid_started) as the one running the run."""
    assignments = ", ".join(f"{name} = ?" for name in columns)
    raw(store.path).execute(f"UPDATE runs SET {assignments} WHERE id = ?", [*columns.values(), run_id])


def owner(store: TraceStore, run_id: str) -> tuple:
    return raw(store.path).execute("SELECT pid, host, pid_started FROM runs WHERE id = ?", (run_id,)).fetchone()


def ended_pid() -> int:
    """The pid of a process that has ended and been collected."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_run_records_the_process_that_runs_it(store):
    run_id = new_run(store)
    pid, host, started = owner(store, run_id)
    assert (pid, host) == (os.getpid(), socket.gethostname())
    if Path("/proc/self/stat").exists():  # Linux: the start time guards against a reused pid
        assert started.startswith(Path("/proc/sys/kernel/random/boot_id").read_text().strip() + "/")
    assert not {"pid", "host", "pid_started"} & set(store.get_run(run_id))  # internal, not in the record
    # Resumed by another process: that process runs it now.
    set_owner(store, run_id, pid=1, host="elsewhere.example", pid_started=None)
    store.update_run(run_id, status="running", ended_at=None, error=None)
    assert owner(store, run_id) == (pid, host, started)


def test_a_running_run_is_alive_only_while_its_process_is(store):
    alive = new_run(store, "alive")
    ended = new_run(store, "ended")
    set_owner(store, ended, pid=ended_pid())
    elsewhere = new_run(store, "elsewhere")
    set_owner(store, elsewhere, host="gpu-box.example", pid=1)
    no_pid = new_run(store, "no pid")
    set_owner(store, no_pid, pid=0)  # never a process (os.kill(0, 0) would signal our group)
    runs = {r["question"]: r for r in store.list_runs()}
    assert {q: r["status"] for q, r in runs.items()} == {
        "alive": "running",
        "ended": "interrupted",
        "elsewhere": "running",
        "no pid": "interrupted",
    }
    assert runs["ended"]["error"].startswith("Its process (pid ") and "ended without finishing" in runs["ended"]["error"]
    assert runs["alive"]["error"] is None
    assert {r["id"] for r in store.list_runs(status="running")} == {alive, elsewhere}
    assert raw(store.path).execute("SELECT status FROM runs WHERE id = ?", (ended,)).fetchone() == ("interrupted",)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_a_reused_pid_or_a_zombie_is_not_alive(store):
    reused = new_run(store, "reused")
    set_owner(store, reused, pid_started="another-boot/12345")  # our pid, another process's start
    zombie_proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{zombie_proc.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        zombie = new_run(store, "zombie")
        set_owner(store, zombie, pid=zombie_proc.pid, pid_started=None)  # the pid alone: it still exists
        assert store.get_run(zombie)["status"] == "interrupted"
    finally:
        zombie_proc.wait()
    assert store.get_run(reused, with_steps=False)["status"] == "interrupted"


def test_delete_refuses_a_running_run(store):
    alive, elsewhere, ended = new_run(store), new_run(store), new_run(store)
    set_owner(store, elsewhere, host="gpu-box.example", pid=4242)
    set_owner(store, ended, pid=ended_pid())
    with pytest.raises(MemagentError) as info:
        store.delete(alive)
    assert info.value.message == f"Run {alive[:8]} is still running (pid {os.getpid()})"
    assert info.value.hint == f"Stop it first (Ctrl-C in its terminal, or kill {os.getpid()}), then remove it."
    assert info.value.exit_code == 1
    with pytest.raises(MemagentError) as info:
        store.delete(elsewhere)
    assert "another host (pid 4242 on gpu-box.example)" in info.value.message and "kill 4242" in info.value.hint
    assert store.delete(ended) == 1
    assert {r["id"] for r in store.list_runs()} == {alive, elsewhere}
    store.finish_run(alive, "complete")
    assert store.delete(alive) == 1


def test_release_ends_a_run_on_another_host_and_never_one_alive_here(store):
    alive, elsewhere, done = new_run(store), new_run(store), new_run(store)
    set_owner(store, elsewhere, host="gpu-box.example", pid=4242)
    store.finish_run(done, "complete")
    with pytest.raises(MemagentError) as info:
        store.release(alive)
    assert info.value.message == f"Run {alive[:8]} is still running here (pid {os.getpid()})"
    with pytest.raises(MemagentError) as info:
        store.release(done)
    assert info.value.exit_code == 2 and "not running" in info.value.message
    released = store.release(elsewhere)
    assert (released.state, released.where()) == ("elsewhere", "pid 4242 on gpu-box.example")
    run = store.get_run(elsewhere)
    assert run["status"] == "interrupted"
    assert run["error"] == f"Released on {socket.gethostname()}: its process (pid 4242 on gpu-box.example) was taken to be gone."
    assert store.get_run(alive)["status"] == "running"
    assert store.delete(elsewhere) == 1


def test_delete_older_than_keeps_running_runs(store):
    alive, elsewhere, ended, done = (new_run(store, started_at=ago(days=3)) for _ in range(4))
    set_owner(store, elsewhere, host="gpu-box.example", pid=4242)
    set_owner(store, ended, pid=ended_pid())
    store.add_step(ended, step(1, "the ended run's memory"))
    store.finish_run(done, "complete")
    removed = store.delete_older_than(parse_age("1d"))
    assert removed.count == 2
    assert {(o.run_id, o.state, o.where()) for o in removed.kept} == {
        (alive, "alive", f"pid {os.getpid()}"),
        (elsewhere, "elsewhere", "pid 4242 on gpu-box.example"),
    }
    assert {r["id"]: r["status"] for r in store.list_runs()} == {alive: "running", elsewhere: "running"}
    assert store.search("ended") == [] and fts_consistent(store)


def test_a_run_resumed_meanwhile_is_not_marked_ended(store, monkeypatch):
    """A read marks interrupted a running run whose process is gone: it judges the run's owner
    from what it reads, then takes the write lock to mark it. Another process may resume the run
    in between; it runs the run now, so the mark must leave it running. The test resumes the run
    at that moment, from a second store, as the read's check of the ended process comes back
    (the moment lies inside one call: `liveness`, which the store calls for that check, tells it)."""
    run_id = new_run(store)
    dead_pid = ended_pid()
    set_owner(store, run_id, pid=dead_pid)
    judged = []

    def resumed_once_judged(pid, host, started):
        state = liveness(pid, host, started)
        if pid == dead_pid and not judged:
            judged.append(state)
            with TraceStore(store.path) as resumer:  # judged ended... then resumed by a live process
                resumer.update_run(run_id, status="running")
        return state

    monkeypatch.setattr(store_module, "liveness", resumed_once_judged)
    run = store.get_run(run_id)  # ...before the mark
    assert judged == ["dead"]
    assert (run["status"], run["error"]) == ("running", None)
    assert owner(store, run_id) == this_process()


def test_started_at_is_normalised_to_utc(store):
    run_id = new_run(store, started_at="2024-03-01T12:00:00+02:00")
    assert store.get_run(run_id)["started_at"] == "2024-03-01T10:00:00.000000+00:00"
    other = new_run(store, started_at="2024-03-01T10:30:00Z")
    assert store.resolve("last") == other


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("30d", 30 * 86400),
        ("12h", 43200),
        ("90m", 5400),
        ("45s", 45),
        ("2w", 14 * 86400),
        ("1.5h", 5400),
        (" 7 d ", 7 * 86400),
        ("0d", 0),
    ],
)
def test_parse_age(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "30x", "-3d", "3 days", "1h30m", "30D", "ten d"])
def test_parse_age_refuses(text):
    with pytest.raises(MemagentError) as info:
        parse_age(text)
    assert info.value.exit_code == EXIT_USAGE
    assert "30d" in info.value.hint


# Damage and contention ---------------------------------------------------------------------


def test_damaged_database_is_moved_aside_and_replaced(tmp_path):
    path = tmp_path / "traces.db"
    garbage = b"this is not a database at all\x00\x01" * 200
    path.write_bytes(garbage)
    (tmp_path / "traces.db-wal").write_bytes(b"stale wal")
    with TraceStore(path) as s:
        moved = [
            p for p in tmp_path.iterdir() if p.name.startswith("traces.db.corrupt-") and not p.name.endswith(("-wal", "-shm"))
        ]
        assert len(moved) == 1 and moved[0].read_bytes() == garbage  # kept, byte for byte
        assert (tmp_path / f"{moved[0].name}-wal").read_bytes() == b"stale wal"
        assert s.notice is not None and str(moved[0]) in s.notice and "damaged" in s.notice
        run_id = new_run(s)
        assert s.resolve("last") == run_id
    with TraceStore(path) as s:  # the fresh one is healthy: no second notice
        assert s.notice is None


def test_healthy_database_has_no_notice(store):
    assert store.notice is None


def test_locked_database_names_the_other_process(tmp_path):
    path = tmp_path / "traces.db"
    TraceStore(path).close()
    holder = raw(path)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute(
        "INSERT INTO runs (id, started_at, status, question, sources, model, settings)"
        " VALUES ('aaaaaaaaaaaa', '2024-01-01', 'running', 'q', '[]', '{}', '{}')"
    )
    try:
        with TraceStore(path, timeout=0.2) as s:
            assert s.list_runs() == []  # readers still read under WAL
            started = time.monotonic()
            with pytest.raises(MemagentError) as info:
                new_run(s)
            assert time.monotonic() - started >= 0.15  # it waited for the lock first
            assert "Another memagent process holds the trace database" in info.value.message
            assert "--no-trace" in info.value.hint
    finally:
        holder.execute("ROLLBACK")


# A writer process driven line by line through its stdin; it answers on its stdout. "step N hold"
# stops inside its write transaction (the write lock held) until told "release"; "step N wait"
# says "begun" as its write transaction starts (SQLite calls the trace callback as the statement
# starts running, before it asks for the lock). The 60 s busy timeout is a guard against a hang:
# no write waits for longer than the test takes to answer a line. Both moments lie inside one
# call of the store (add_step), which has no hook for them: the writer sets SQLite's trace
# callback on the connection the store opens, caught as sqlite3.connect returns it.
WRITER = """
import os, sqlite3, sys
from pathlib import Path
from memagent_cli.traces.store import TraceStore

path, name = Path(sys.argv[1]), sys.argv[2]
opened = []  # the connections sqlite3.connect made, the store's among them
connect = sqlite3.connect

def connect_and_keep(*args, **kwargs):
    conn = connect(*args, **kwargs)
    opened.append(conn)
    return conn

sqlite3.connect = connect_and_keep

def say(line):
    print(line, flush=True)

def told():
    line = sys.stdin.readline()
    if not line:  # the test is gone
        os._exit(3)
    return line.split()

stop = False  # once, at the step's INSERT (the callback sees it again for each trigger it fires)

def held(sql):
    global stop
    if stop and sql.startswith("INSERT INTO steps"):  # after BEGIN IMMEDIATE: the lock is held
        stop = False
        say("holding")
        if told() != ["release"]:
            os._exit(4)

def begun(sql):
    if sql.startswith("BEGIN"):
        say("begun")

say("ready")
while True:
    words = told()
    if words[0] == "open":
        store = TraceStore(path, timeout=60)
        [conn] = opened  # the store's: it opens one, and keeps it open
        run_id = store.create_run(question=name, sources=[], model={}, settings={})
        say("opened")
    elif words[0] == "step":
        stop = words[2] == "hold"
        conn.set_trace_callback(held if stop else begun)
        i = int(words[1])
        store.add_step(run_id, {"index": i, "spans": [], "tokens": i, "memory": f"{name} memory {i}",
                                "memory_tokens": 3, "prompt_tokens": 9, "generated_tokens": 3, "seconds": 0.01,
                                "finish_reason": "stop"})
        conn.set_trace_callback(None)
        say(f"stepped {i}")
    elif words[0] == "finish":
        store.finish_run(run_id, "complete", answer=name)
        store.close()
        say("finished")
        break
"""
STEPS = 20  # per writer


class Writer:
    """One WRITER process, and the lines it has said (read by a thread, so a wait can time out)."""

    def __init__(self, path: Path, name: str, spawned: list):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        spawned.append(self.proc)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)  # it exited

    def tell(self, *words: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()

    def expect(self, line: str) -> None:
        try:
            said = self.lines.get(timeout=60)  # a guard against a hang: each line comes at once
        except queue.Empty:
            said = "nothing for 60 s"
        if said != line:
            self.proc.kill()
            assert self.proc.stderr is not None
            pytest.fail(f"{self.name} said {said!r}, not {line!r}:\n{self.proc.stderr.read()}")


def test_two_processes_writing_at_once(tmp_path, spawned):
    """Two writer processes, each with its run: both open a database that does not exist yet (in
    whatever order the machine runs them; either way both must open it), then take turns holding
    the write lock while the other asks for it. The one that asks waits under the busy timeout for
    the other's transaction, never failing with "database is locked", and every row lands. The
    order is set by the test, not by the processes' speed: the holder lets go only once the other
    has begun its write, and its write cannot land before the holder's."""
    path = tmp_path / "traces.db"
    alpha, beta = writers = [Writer(path, name, spawned) for name in ("alpha", "beta")]
    for writer in writers:
        writer.expect("ready")  # both imported: told together, they race to create the database
    for writer in writers:
        writer.tell("open")
    for writer in writers:
        writer.expect("opened")
    order = []
    for i in range(1, STEPS + 1):
        holder, other = (alpha, beta) if i % 2 else (beta, alpha)
        holder.tell("step", i, "hold")
        holder.expect("holding")
        other.tell("step", i, "wait")
        other.expect("begun")
        holder.tell("release")
        holder.expect(f"stepped {i}")
        other.expect(f"stepped {i}")
        order += [holder.name, other.name]
    for writer in writers:
        writer.tell("finish")
        writer.expect("finished")
        _, err = writer.proc.communicate(timeout=60)
        assert writer.proc.returncode == 0, err
        assert "locked" not in err
    with TraceStore(path) as s:
        runs = s.list_runs()
        assert sorted(r["question"] for r in runs) == ["alpha", "beta"]
        for r in runs:
            run = s.get_run(r["id"])
            assert run["status"] == "complete" and run["step_count"] == STEPS
            assert [st["memory"] for st in run["steps"]] == [f"{r['question']} memory {i}" for i in range(1, STEPS + 1)]
        assert [r[0] for r in raw(s.path).execute("SELECT version FROM schema_migrations")] == list(range(1, len(MIGRATIONS) + 1))
        assert len(s.search("memory")) == 20 and fts_consistent(s)
        # Each step landed in the turn the test gave it: the holder's first, the waiter's after.
        landed = [
            r[0]
            for r in raw(s.path).execute(
                "SELECT r.question FROM search_docs AS d JOIN runs AS r ON r.id = d.run_id WHERE d.field = 'memory' ORDER BY d.id"
            )
        ]
        assert landed == order
