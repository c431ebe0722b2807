"""User settings: `memagent config get|set|list`, kept in config.toml.

The file lives in the platformdirs user config directory, or in MEMAGENT_HOME when that is set
(tests, portable installs). Only known keys are accepted, each with its type checked, so a typo
is an error now rather than a silent no-op later.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import EXIT_USAGE, MemagentError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _gpu_layers(value: str) -> str | int:
    if value == "auto":
        return value
    try:
        layers: int | None = int(value)
    except ValueError:
        layers = None
    if layers is None or layers < -1:
        raise MemagentError(
            f"gpu_layers must be auto, -1 (all), 0 (none) or a number of layers, not {value!r}.", exit_code=EXIT_USAGE
        )
    return layers


def whole_number(value: str, refusal: str) -> int:
    """A value the user typed as a whole number of at least 1 (a count, a step); anything else,
    0 and words included, is a usage error saying `refusal`."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise MemagentError(refusal, exit_code=EXIT_USAGE)
    return n


def _threads(value: str) -> int:
    return whole_number(value, f"threads must be a whole number of at least 1, not {value!r}.")


# key -> (parse a command-line value, what it means)
KEYS: dict[str, tuple[Callable[[str], str | int], str]] = {
    "default_model": (str, "model used when --model and MEMAGENT_MODEL are not given (an alias, a name or a path)"),
    "gpu_layers": (_gpu_layers, "layers offloaded to the GPU: auto (default), -1 (all), 0 (none) or a number"),
    "threads": (_threads, "CPU threads for generation"),
}


def config_file() -> Path:
    return paths.config_file()


def load() -> dict[str, Any]:
    try:
        text = paths.written_text(config_file())
        data: dict[str, Any] = tomllib.loads(text) if text is not None else {}
        return data
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MemagentError(f"{config_file()} cannot be read ({exc}).", "Fix it, or remove it to start over.") from None


def get_setting(key: str) -> Any:
    return load().get(key)


def check_key(key: str) -> None:
    if key not in KEYS:
        raise MemagentError(f"Unknown setting {key!r}.", f"Known: {', '.join(KEYS)}.", exit_code=EXIT_USAGE)


def set_setting(key: str, value: str | None) -> None:
    """Sets key to the parsed value; None removes it."""
    import tomli_w

    check_key(key)
    data = load()
    if value is None:
        data.pop(key, None)
    else:
        data[key] = KEYS[key][0](value)
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with paths.atomic_write(path, "wb") as fh:
        tomli_w.dump(data, fh)
