"""Text that leaves memagent for a terminal or a stream: shown safely, encodable always.

`SafeConsole` for people, `print_json` for scripts; `visible` and `clip` are re-exported here so the
CLI has one place to take them from."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, TypeVar, overload

from rich.console import Console, Group
from rich.text import Text, TextType

from ..core.quotes import NO_QUOTE, describe_quotes
from ..display import SCHEMA, clip, json_controls_escaped, visible

__all__ = ["SCHEMA", "SafeConsole", "clip", "json_text", "print_json", "visible"]


def print_json(record: Mapping[str, Any]) -> None:
    """A command's --json answer on stdout: one object, "schema" first."""
    print(json_text({"schema": SCHEMA, **record}))


def json_text(value: object, indent: int | None = 2) -> str:
    """JSON for stdout. A path from a file name that is not UTF-8 holds lone surrogates, which
    no stream can encode; as \\udcXX escapes they are valid JSON and name the file exactly."""
    text = json_controls_escaped(json.dumps(value, ensure_ascii=False, indent=indent))
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class SafeConsole(Console):
    """A rich Console through which outside text (file names, documents, model output, server
    messages, trace content) cannot reach the terminal as control sequences: plain strings and
    Text are passed through visible() (one character for one, so styles keep their places)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(_safe(o) for o in objects), **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # Every plain string a renderable holds (table cells, panel titles) is made a Text here.
        return super().render_str(visible(text), **kwargs)

    def input(self, prompt: TextType = "", **kwargs: Any) -> str:
        return super().input(_safe(prompt), **kwargs)


_T = TypeVar("_T")


@overload
def _safe(obj: str) -> str: ...
@overload
def _safe(obj: _T) -> _T: ...
def _safe(obj: object) -> object:
    """`obj` with its outside text made visible(): a str or a Text, or the Texts inside a Group."""
    if isinstance(obj, str):
        return visible(obj)
    if isinstance(obj, Text):
        shown = visible(obj.plain)
        if shown != obj.plain:
            obj = obj.copy()
            obj.plain = shown
        return obj
    if isinstance(obj, Group):
        return Group(*(_safe(r) for r in obj.renderables))
    return obj


def cited(quotes: Iterable[Mapping[str, Any]]) -> str:
    """The quotes under an answer (--cite), as records give them (docs/JSON.md, "quote"): one
    numbered line each, or one line saying there is none."""
    lines = describe_quotes(quotes)
    return "\n".join(lines) if lines else f"[no quote: {NO_QUOTE}]"
