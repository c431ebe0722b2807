"""A file's identity and its content's digest, as the commands that ask about a file again find it
(an answer looked up, a trace, a quote read again, `watch` for hours)."""

from __future__ import annotations

import hashlib
import os
import threading


def file_id(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """One file however it is named (links, relative paths): its device and inode; None where no
    file is there (not made yet, or a member of an archive)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return (info.st_dev, info.st_ino)


# A file's digest by its stat identity: a command that asks about a file several times (an answer
# looked up, then the run's trace, then its quotes read again; `watch`, for hours) reads its bytes
# once until it changes. ctime too: a write restoring the size and mtime still moves it. One entry a
# file (its latest version): a log `watch` follows for days leaves one digest, not one per append.
_DIGESTS: dict[tuple[int, int], tuple[tuple[int, int, int], str]] = {}
_DIGESTS_LOCK = threading.Lock()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes (hex), read once per version of the file in this process."""
    info = os.stat(path)
    file, version = (info.st_dev, info.st_ino), (info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    with _DIGESTS_LOCK:
        known = _DIGESTS.get(file)
    if known is not None and known[0] == version:
        return known[1]
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            sha.update(block)
    digest = sha.hexdigest()
    with _DIGESTS_LOCK:
        _DIGESTS[file] = (version, digest)
    return digest
