"""Where memagent keeps things: every path under MEMAGENT_HOME (or the user's data and config
directories) is named here, so no layer has to ask another where its files are; and how its own
files are written whole (`atomic_write`) and read back (`written_text`)."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import platformdirs


def default_home() -> Path:
    """Where memagent keeps its data: $MEMAGENT_HOME when set, else the user data directory."""
    home = os.environ.get("MEMAGENT_HOME")
    return Path(home).expanduser() if home else Path(platformdirs.user_data_dir("memagent"))


def traces_db() -> Path:
    return default_home() / "traces.db"


def models_dir() -> Path:
    return default_home() / "models"


def gpu_hint_marker() -> Path:
    """Its presence says the unused-GPU hint has been shown on this machine (it is shown once)."""
    return default_home() / "gpu-hint-shown"


def config_file() -> Path:
    """config.toml: under MEMAGENT_HOME when set (one folder for everything), else the user config directory."""
    home = os.environ.get("MEMAGENT_HOME")
    if home:
        return Path(home).expanduser() / "config.toml"
    return Path(platformdirs.user_config_dir("memagent")) / "config.toml"


def written_text(path: Path) -> str | None:
    """The text of one of memagent's own files (UTF-8), None while none was written; a file that
    cannot be read raises OSError, one that is not UTF-8 UnicodeDecodeError."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _new_file_mode() -> int:
    # The umask can only be read by setting it: done once, at import, before any thread starts.
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


_NEW_FILE_MODE = _new_file_mode()


@contextmanager
def atomic_write(path: Path, mode: str = "w", **open_args: Any) -> Iterator[IO[Any]]:
    """A temporary file beside `path` that replaces it only when the block completes: a crash or an
    error leaves the old file (or none), never half of one. The folder must exist."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp's file is its owner's alone: the file it replaces keeps its mode, a new one gets
        # what any new file gets here (a results table is read by others; a config file is no secret)
        try:
            permissions = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            permissions = _NEW_FILE_MODE
        os.fchmod(fd, permissions)
        with os.fdopen(fd, mode, **open_args) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
