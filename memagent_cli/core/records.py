"""JSON records from a file the user names (a `batch` job file, an `eval` data set): one object a
line (JSONL), read a line at a time so a file of multi-million-token contexts never sits in memory
whole, or, where a reader takes one, a JSON array. Every fault is a one-line usage error that names
the file and the line. Also the one reader of a results file memagent wrote before (`batch -o`,
`eval --out`), which a rerun goes on from (`written_records`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from ..errors import EXIT_USAGE, MemagentError


def json_records(path: Path, *, what: str, arrays: bool = False) -> Iterator[tuple[int, str, object]]:
    """(number, place, object) of each record: the line's number and "PATH line N" (blank lines
    skipped), or the item's and "PATH item N" in a JSON array when `arrays`. `what` names the file
    in the hints ("job file")."""
    form = "JSONL (one object per line)" + (" or a JSON array" if arrays else "")
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise MemagentError(f"Cannot read {path}: {exc.strerror}.", exit_code=EXIT_USAGE) from None
    with f:
        try:
            head = f.read(1)
            while head and head.isspace():
                head = f.read(1)
            if arrays and head == "[":  # an array has to be read whole
                f.seek(0)
                try:
                    data = json.load(f)
                except json.JSONDecodeError as exc:
                    raise _not_json(str(path), f"{exc.msg} (line {exc.lineno})", form) from None
                for n, obj in enumerate(data, 1):
                    yield n, f"{path} item {n}", obj
                return
            f.seek(0)
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                place = f"{path} line {n}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise _not_json(place, exc.msg, form) from None
                yield n, place, obj
        except UnicodeDecodeError:
            raise MemagentError(f"{path} is not UTF-8 text.", f"Save the {what} as UTF-8 {form}.", exit_code=EXIT_USAGE) from None


def _not_json(place: str, why: str, form: str) -> MemagentError:
    """The usage error for a file, or a line of one, that is not JSON: `place` names it ("PATH" or
    "PATH line N"), `why` is the parser's reason, `form` what to give instead."""
    return MemagentError(f"{place} is not valid JSON: {why}.", f"Give {form}.", exit_code=EXIT_USAGE)


def written_records(path: Path | None) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """The lines of a results file an earlier run wrote, streamed: each line's text (ending in a
    newline) and its object, or None for a line that holds no JSON object (one cut off by a crash).
    Blank lines are skipped; no file, no lines. A file that cannot be read is a usage error."""
    if path is None or not path.exists():
        return
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for text in f:
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError:
                    row = None
                yield (text if text.endswith("\n") else text + "\n"), row if isinstance(row, dict) else None
    except OSError as exc:
        raise MemagentError(f"Cannot read {path}: {exc.strerror}.", exit_code=EXIT_USAGE) from None
