"""Installed models: where they are, what they are called, and which one a run uses.

Pulled models live in `<home>/models/` (home: MEMAGENT_HOME or the user data directory);
`models add` registers a GGUF where it already is. The registry is one small JSON file,
written atomically. Resolution order for a run: --model > MEMAGENT_MODEL > the configured
default (memagent config set default_model ...) > the catalog's default.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict

from .. import paths
from ..errors import EXIT_USAGE, MemagentError
from ..model.gguf import FILE_TYPES, GGUFInfo, read_gguf
from . import catalog

ENV_MODEL = "MEMAGENT_MODEL"


class ModelInfo(TypedDict):
    """What `describe` reads from a GGUF's header."""

    architecture: str
    model_name: str
    size: int  # the file's bytes
    layers: int | None
    context_length: int | None
    quantization: str | None
    chat_template: bool  # whether the GGUF has a chat template of its own
    weights_bytes: int


class Record(ModelInfo):
    """One installed model in the registry file (under its name)."""

    path: str
    source: str  # "local" for `models add` (the file is the user's), else where it was pulled from
    sha256: str | None
    added: str  # when, ISO 8601 in UTC


class NamedRecord(Record):
    """A record with the name it is registered under (`get`)."""

    name: str


def models_dir() -> Path:
    return paths.models_dir()


def _registry_file() -> Path:
    return models_dir() / "registry.json"


def load() -> dict[str, Record]:
    try:
        text = paths.written_text(_registry_file())
        entries: dict[str, Record] = json.loads(text) if text is not None else {}
        return entries
    except (OSError, ValueError) as exc:
        raise MemagentError(
            f"The model registry {_registry_file()} cannot be read ({exc}).",
            "Fix or remove it; the model files themselves are untouched.",
        ) from None


def _save(entries: dict[str, Record]) -> None:
    path = _registry_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with paths.atomic_write(path, encoding="utf-8") as fh:
        json.dump(entries, fh, indent=2, sort_keys=True)


def describe(info: GGUFInfo) -> ModelInfo:
    """What `models add` and `models info` say about a GGUF, read from its header."""
    from ..model.memory import model_memory

    file_type = info.get("general.file_type")
    return {
        "architecture": info.architecture,
        "model_name": info.name,
        "size": info.file_size,
        "layers": info.arch_get("block_count"),
        "context_length": info.arch_get("context_length"),
        "quantization": FILE_TYPES.get(file_type, f"type {file_type}" if file_type is not None else None),
        "chat_template": info.chat_template is not None,
        "weights_bytes": model_memory(info).weights_total if info.has_weights else 0,
    }


def add(path: str | Path, name: str | None = None, *, source: str = "local", sha256: str | None = None) -> tuple[str, Record]:
    """Registers a GGUF after reading its header (a non-GGUF file is refused)."""
    path = Path(path).expanduser().resolve()
    info = read_gguf(path)
    if not info.has_weights:
        raise MemagentError(f"{path.name} holds only a vocabulary, no weights.", "Register a full model.", exit_code=EXIT_USAGE)
    name = name or path.stem
    record: Record = {
        **describe(info),
        "path": str(path),
        "source": source,
        "sha256": sha256,
        "added": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    entries = load()
    entries[name] = record
    _save(entries)
    return name, record


def remove(name: str) -> Record | None:
    """Forgets a model; a file memagent downloaded is deleted, a file you added is left alone."""
    entries = load()
    record = entries.pop(_known(name, entries), None)
    if record and record["source"] != "local":
        Path(record["path"]).unlink(missing_ok=True)
    _save(entries)
    return record


def get(name: str) -> NamedRecord:
    """An installed model's record; NotInstalled (with the pull command) for a catalog model not yet pulled."""
    entries = load()
    try:
        key = _known(name, entries)
    except MemagentError:
        if catalog.lookup(name) is not None:
            raise NotInstalled(name) from None
        raise
    return {"name": key, **entries[key]}


def _known(name: str, entries: dict[str, Record]) -> str:
    for candidate in (name, catalog.canonical(name)):
        if candidate in entries:
            return candidate
    raise MemagentError(f"No installed model is called {name!r}.", "See memagent models list.", exit_code=EXIT_USAGE)


class NotInstalled(MemagentError):
    """A catalog model was asked for (or is the default) but has not been pulled."""

    def __init__(self, name: str):
        self.name = catalog.canonical(name)
        super().__init__(
            f"The model {self.name} is not installed.", f"Run: memagent models pull {self.name}", exit_code=EXIT_USAGE
        )


def catalog_entry(path: str | os.PathLike[str]) -> catalog.Entry | None:
    """The catalog entry of an installed model file (one pulled under a catalog alias), or None."""
    real = os.path.realpath(path)
    for name, record in load().items():
        found = catalog.lookup(name)
        if found is not None and os.path.realpath(record["path"]) == real:
            return found[0]
    return None


def resolve_model(model: str | os.PathLike[str] | None) -> Path:
    """The GGUF file a run uses. Raises NotInstalled for a catalog model not yet pulled."""
    from .config_file import get_setting

    chosen = str(model) if model else os.environ.get(ENV_MODEL) or get_setting("default_model") or catalog.default_alias()
    path = Path(chosen).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        raise MemagentError(
            f"{path} is a directory, not a model file.",
            "Pass a .gguf file to --model; a Hugging Face checkpoint folder becomes one with: memagent models convert FOLDER",
            exit_code=EXIT_USAGE,
        )
    entries = load()
    for name in (chosen, catalog.canonical(chosen)):
        if name in entries:
            stored = Path(entries[name]["path"])
            if not stored.is_file():
                raise MemagentError(
                    f"The model {name} is registered at {stored}, which is gone.",
                    f"Pull it again, or run: memagent models rm {name}",
                )
            return stored
    if catalog.lookup(chosen) is not None:
        raise NotInstalled(chosen)
    if path.suffix.lower() == ".gguf" or os.sep in chosen:
        raise MemagentError(f"Model file not found: {path}", f"Check --model or {ENV_MODEL}.", exit_code=EXIT_USAGE)
    raise MemagentError(
        f"Unknown model {chosen!r}: not a file, an installed model or a catalog alias.",
        "See memagent models list.",
        exit_code=EXIT_USAGE,
    )
