"""The folders under the page's roots, listed for the ask form: only what lies under a root, on its
real path (links followed, `..` collapsed, before the check), hidden entries left out as memagent
skips them when it reads a folder."""

from __future__ import annotations

import os
from typing import Any, Sequence

from starlette.exceptions import HTTPException

SHOWN = 1000  # entries of one folder listed at most


def folder(roots: Sequence[str], root: int, rel: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Folder `rel` (relative, "/"-separated) of root number `root`: what the form says of it, and its
    entries (folders first, then files, each by name). 403 for a path that leads out of the root, 404
    for one that is not a folder."""
    if not 0 <= root < len(roots):
        raise HTTPException(404, f"There is no root {root}; this page serves {len(roots)}.")
    base = roots[root]
    real = os.path.realpath(os.path.join(base, rel.lstrip("/")))
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise HTTPException(403, "That folder lies outside the folders this page serves.")
    if not os.path.isdir(real):
        raise HTTPException(404, "No such folder under the roots.")
    entries: list[dict[str, Any]] = []
    try:
        listed = sorted(os.scandir(real), key=lambda e: e.name)
    except OSError as exc:
        raise HTTPException(403, f"The folder cannot be listed: {exc.strerror}.") from None
    for entry in listed:
        if entry.name.startswith("."):
            continue
        path = os.path.realpath(entry.path)
        if path != base and not path.startswith(base.rstrip(os.sep) + os.sep):
            continue  # a link that leads out of the root
        try:
            is_dir = entry.is_dir()
            size = None if is_dir else entry.stat().st_size
        except OSError:
            continue
        entries.append(
            {
                "name": entry.name,
                "folder": is_dir,
                "rel": os.path.relpath(path, base),
                "value": path,
                "size": _size(size) if size is not None else "",
            }
        )
        if len(entries) >= SHOWN:
            break
    entries.sort(key=lambda e: (not e["folder"], e["name"]))
    inside = os.path.relpath(real, base)
    up = None if real == base else os.path.dirname(inside)
    return {"root": root, "shown": real, "up": "" if up == "." else up}, entries


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return ""
