"""Conversations in the trace database (migration 8): the SQL of their turns, on a connection the
store gives (store.py keeps the transactions). A conversation's first turn names the run whose
sources, model and settings it is about; each turn names the run that answered it, its own or,
answered from the store, an earlier one (`reused`)."""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
from typing import Any, Mapping

from ..errors import EXIT_USAGE, MemagentError


def new_turn(
    conn: sqlite3.Connection,
    conversation: str | None,
    run_id: str,
    question: str,
    *,
    reused: bool,
    changed: Mapping[str, Any] | None,
    now: str,
) -> tuple[str, int]:
    """Records a turn answered by `run_id`: the next of `conversation`, else the first of a new one
    (named as the run, where that name is free). (conversation, turn)."""
    if conversation is None:
        conversation = run_id
        while conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation,)).fetchone():
            conversation = secrets.token_hex(6)
        conn.execute("INSERT INTO conversations (id, started_at, first_run) VALUES (?, ?, ?)", (conversation, now, run_id))
        turn = 1
    else:
        row = conn.execute("SELECT max(turn) FROM turns WHERE conversation = ?", (conversation,)).fetchone()
        if row is None or row[0] is None:
            raise MemagentError(f"Conversation {conversation[:8]} no longer exists (removed meanwhile?)", hint="ask anew")
        turn = int(row[0]) + 1
    conn.execute(
        "INSERT INTO turns (conversation, turn, run_id, question, asked_at, reused, changed) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            conversation,
            turn,
            run_id,
            question,
            now,
            int(reused),
            json.dumps(dict(changed), ensure_ascii=True) if changed else None,
        ),
    )
    return conversation, turn


def own_turn(conn: sqlite3.Connection, run_id: str) -> tuple[str, int] | None:
    """The conversation a run answered in (not one answered from it), and its turn there."""
    row = conn.execute(
        "SELECT conversation, turn FROM turns WHERE run_id = ? AND reused = 0 ORDER BY asked_at LIMIT 1", (run_id,)
    ).fetchone()
    return (str(row[0]), int(row[1])) if row is not None else None


def resolve_conversation(conn: sqlite3.Connection, ref: str) -> str:
    """A conversation's id from "last" (the one with the latest turn) or a unique prefix of one."""
    key = ref.strip().lower()
    if key == "last":
        row = conn.execute("SELECT conversation FROM turns ORDER BY asked_at DESC, rowid DESC LIMIT 1").fetchone()
        if row is None:
            raise MemagentError("No conversation yet", hint='Ask something first: memagent ask FILE "QUESTION"')
        return str(row[0])
    # Ids are hex, so a hex prefix is also a safe GLOB pattern (and uses the primary key).
    ids = (
        [r[0] for r in conn.execute("SELECT id FROM conversations WHERE id GLOB ? ORDER BY started_at DESC", (key + "*",))]
        if re.fullmatch(r"[0-9a-f]+", key)
        else []
    )
    if not ids:
        raise MemagentError(
            f"No conversation matches '{ref}'", hint="`memagent traces list` shows each run's conversation", exit_code=EXIT_USAGE
        )
    if len(ids) > 1:
        raise MemagentError(
            f"'{ref}' matches {len(ids)} conversations: {', '.join(ids[:5])}",
            hint="give more characters of the id",
            exit_code=EXIT_USAGE,
        )
    return str(ids[0])


def answered_turns(conversation: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A conversation's turns (a conversation_record's) as a follow-up's problem holds them:
    (question, answer), those answered."""
    return [(t["question"], t["answer"]) for t in conversation["turns"] if t["answer"] is not None]


def conversation_record(conn: sqlite3.Connection, conversation: str) -> dict[str, Any]:
    """A conversation as docs/JSON.md gives it: id, started_at, first_run, and its turns in order
    (turn, run, question, asked_at, reused, changed, and its run's answer and status)."""
    row = conn.execute("SELECT id, started_at, first_run FROM conversations WHERE id = ?", (conversation,)).fetchone()
    if row is None:
        raise MemagentError(f"No conversation matches '{conversation}'", exit_code=EXIT_USAGE)
    turns = [
        {
            "turn": t["turn"],
            "run": t["run_id"],
            "question": t["question"],
            "asked_at": t["asked_at"],
            "reused": bool(t["reused"]),
            "changed": json.loads(t["changed"]) if t["changed"] else {},
            "answer": t["answer"],
            "status": t["status"],
        }
        for t in conn.execute(
            "SELECT turns.*, runs.answer, runs.status FROM turns LEFT JOIN runs ON runs.id = turns.run_id"
            " WHERE conversation = ? ORDER BY turn",
            (conversation,),
        )
    ]
    return {"id": row["id"], "started_at": row["started_at"], "first_run": row["first_run"], "turns": turns}


def conversation_list(conn: sqlite3.Connection, limit: int, offset: int = 0) -> list[dict[str, Any]]:
    """Conversations, the one asked in last first: id, started_at, first_run, turns (how many),
    last_at, and the first turn's question."""
    rows = conn.execute(
        "SELECT c.id, c.started_at, c.first_run, count(t.turn) AS turns, max(t.asked_at) AS last_at,"
        " (SELECT question FROM turns WHERE conversation = c.id ORDER BY turn LIMIT 1) AS question"
        " FROM conversations AS c LEFT JOIN turns AS t ON t.conversation = c.id"
        " GROUP BY c.id ORDER BY last_at DESC LIMIT ? OFFSET ?",
        (limit, offset),
    )
    return [dict(row) for row in rows]
