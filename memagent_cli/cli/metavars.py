"""What `--help` shows for a value: a word that says what is expected (SCHEMA, TOKENS, GLOB),
never the Python type typer shows by default (`<str>`, `<float range>`, `<list[str]>`).

`name_values(app)` gives every option and argument of the command tree that has none a metavar:
by its name where the name says what is expected, else by its type. An argument's type column
(typer shows `<str>` there whatever its metavar) says `<text>` or `<path>`, through a parser that
reads the value as typer would."""

from __future__ import annotations

import enum
import inspect
import typing
from pathlib import Path
from typing import Any, Callable

import typer
from typer.models import ArgumentInfo, OptionInfo

# By a parameter's name: what the value is
_BY_NAME = {
    "answer_tokens": "TOKENS",
    "chunk_tokens": "TOKENS",
    "memory_tokens": "TOKENS",
    "tokens": "TOKENS",
    "ctx": "TOKENS",
    "n_ctx": "TOKENS",
    "api_key": "KEY",
    "base_url": "URL",
    "include": "GLOB",
    "exclude": "GLOB",
    "final": "boxed|answer-is",
    "instructions": "TEXT",
    "model": "MODEL",
    "served_model": "NAME",
    "older_than": "AGE",
    "output": "FILE",
    "svg": "FILE",
    "data": "FILE",
    "schema": "SCHEMA",
    "password": "PASSWORD",
    "question": "QUESTION",
    "temperature": "FLOAT",
    "top_p": "FLOAT",
    "fmt": "FORMAT",
}
# Else by its type
_BY_TYPE: dict[type, str] = {int: "N", float: "NUMBER", Path: "PATH"}


def name_values(app: typer.Typer) -> None:
    """Every command's options and arguments below `app` given a metavar where they have none."""
    for command in app.registered_commands:
        if command.callback is not None:
            _name_params(command.callback)
    if app.registered_callback is not None and app.registered_callback.callback is not None:
        _name_params(app.registered_callback.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            name_values(group.typer_instance)


def _name_params(callback: Callable[..., Any]) -> None:
    defaults = {n: p.default for n, p in inspect.signature(callback).parameters.items()}
    hints = typing.get_type_hints(callback, include_extras=True)
    # Under `from __future__ import annotations` each evaluation makes new OptionInfo objects: the
    # evaluated ones, named below, take the strings' place, so that typer reads these.
    for function in {callback, inspect.unwrap(callback)}:
        function.__annotations__.update({n: h for n, h in hints.items() if n != "return"})
    for name, hint in hints.items():
        infos = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, (OptionInfo, ArgumentInfo))]
        if isinstance(defaults.get(name), (OptionInfo, ArgumentInfo)):  # declared as the default, not Annotated
            infos.append(defaults[name])
        if not infos:
            continue
        kind = _base(typing.get_args(hint)[0] if getattr(hint, "__metadata__", None) else hint)
        info = infos[0]
        if kind is bool or (isinstance(kind, type) and issubclass(kind, enum.Enum)):
            continue  # a flag has no value; a choice shows its choices
        if isinstance(info, ArgumentInfo):  # usage names it: its own name ("K", "L") says more than its type
            word = _BY_NAME.get(name) or name.upper()
            if kind in (str, Path, int) and info.parser is None and info.click_type is None:
                info.parser = _reading(kind, info)
        else:
            word = _BY_NAME.get(name) or _BY_TYPE.get(kind) or name.upper()
        info.metavar = info.metavar or word


def _base(hint: Any) -> Any:
    """The type a value is read as: Optional[X] and list[X] are X."""
    while typing.get_origin(hint) in (typing.Union, list, tuple) or type(hint).__name__ == "UnionType":
        args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
        hint = args[0]
    return hint


def _reading(kind: Any, info: ArgumentInfo) -> Callable[[str], Any]:
    """A parser that reads a value as typer would read `kind` (an integer within the argument's
    `min` and `max` too), named for what it reads: typer shows its name as the argument's type."""

    def read(value: str) -> Any:
        if kind is Path:
            return Path(value)
        if kind is not int:
            return value
        try:
            number = int(value)
        except ValueError:
            raise typer.BadParameter(f"{value!r} is not a whole number") from None
        if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
            bounds = " to ".join(str(b) for b in (info.min, info.max) if b is not None)
            raise typer.BadParameter(f"{number} is out of range ({'from ' if info.max is None else ''}{bounds})")
        return number

    read.__name__ = {Path: "path", int: "integer"}.get(kind, "text")
    return read
