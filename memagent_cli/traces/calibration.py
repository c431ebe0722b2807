"""The runs `inspect`'s estimate calibrates on (core/inspection.py reads no store itself)."""

from __future__ import annotations

import sqlite3
from typing import Any

from ..errors import MemagentError
from ..paths import default_home
from .store import DB_NAME, TraceStore


def recorded_runs(path: str, size: int, limit: int = 20) -> list[dict[str, Any]]:
    """The latest complete runs (with their steps, at most `limit`) of the model file at `path` of
    `size` bytes, for `inspect`'s estimate to calibrate on; none where there is no store yet
    (inspect makes none) or it cannot be read."""
    if not (default_home() / DB_NAME).is_file():
        return []
    try:
        with TraceStore() as store:
            listed = store.list_runs(status="complete", limit=10 * limit)
            mine = [r for r in listed if (r.get("model") or {}).get("path") == path and r["model"].get("size") == size]
            return [store.get_run(r["id"]) for r in mine[:limit]]
    except (MemagentError, OSError, sqlite3.Error):
        return []
