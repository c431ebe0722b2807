"""The catalog of known MemAgent builds (models/catalog.toml, shipped as memagent_cli.model_catalog).

An alias names a model and a quantization: `memagent-7b` (the default quantization) or
`memagent-14b:q8_0`. The catalog knows where to look on the Hub and roughly how big the
file is; the Hub's own listing decides which file is taken.
"""

from __future__ import annotations

import importlib.resources
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypedDict

from ..errors import EXIT_USAGE, MemagentError
from ..model.convert.quantize import DEFAULT_QUANT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class Quantization(TypedDict, total=False):
    """A catalog build at one quantization: its approximate size, and the sha256 once one is pinned."""

    size: int  # bytes
    sha256: str


@dataclass(frozen=True)
class Entry:
    alias: str  # e.g. "memagent-7b"
    base_model: str
    weights: str  # the published safetensors repository
    license: str
    architecture: str
    candidates: tuple[str, ...]  # Hub repositories that may hold GGUF builds
    quantizations: dict[str, Quantization]  # tag -> {"size": bytes, "sha256": optional}
    notes: str = ""
    protocol: str = "memagent"  # the memory-agent protocol the model was trained on (core/protocols.py)
    weights_size: int | None = None  # bytes of the published safetensors, approximately: what converting downloads

    def size(self, quant: str) -> int | None:
        return (self.quantizations.get(quant) or {}).get("size")

    def sha256(self, quant: str) -> str | None:
        return (self.quantizations.get(quant) or {}).get("sha256")


@lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    text = (importlib.resources.files("memagent_cli.model_catalog") / "catalog.toml").read_text(encoding="utf-8")
    catalog: dict[str, Any] = tomllib.loads(text)
    return catalog


def entries() -> dict[str, Entry]:
    out = {}
    for alias, e in _load()["models"].items():
        out[alias] = Entry(
            alias=alias,
            base_model=e["base_model"],
            weights=e["weights"],
            license=e["license"],
            architecture=e["architecture"],
            candidates=tuple(e["candidates"]),
            quantizations=dict(e["quantizations"]),
            notes=e.get("notes", ""),
            protocol=e.get("protocol", "memagent"),
            weights_size=e.get("weights_size"),
        )
    return out


def default_alias() -> str:
    alias: str = _load()["default"]
    return alias


def split_alias(name: str) -> tuple[str, str]:
    """'memagent-14b:Q8_0' -> ('memagent-14b', 'q8_0'); no tag -> the default quantization."""
    alias, _, quant = name.partition(":")
    return alias.lower(), (quant or DEFAULT_QUANT).lower()


def canonical(name: str) -> str:
    alias, quant = split_alias(name)
    return f"{alias}:{quant}"


def lookup(name: str) -> tuple[Entry, str] | None:
    """The catalog entry and quantization an alias names, or None if it is not an alias."""
    alias, quant = split_alias(name)
    entry = entries().get(alias)
    return (entry, quant) if entry else None


def require(name: str) -> tuple[Entry, str]:
    found = lookup(name)
    if found is None:
        known = ", ".join(sorted(entries()))
        raise MemagentError(
            f"{name!r} is not in the catalog.", f"Known models: {known}; or use hf:OWNER/REPO.", exit_code=EXIT_USAGE
        )
    return found
