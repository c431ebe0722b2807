"""Jupyter notebooks (.ipynb), read as JSON with the standard library (no nbformat).

Cells come in order, one unit each: a markdown (or raw) cell's source as written; a code cell
as a fenced block in the notebook's language, followed by its text outputs (streams, the
text/plain of results and displays, errors as "ename: evalue" and their traceback, all without
terminal colour codes). Images and other binary outputs are left out, and HTML-only outputs are
read as text, never as markup. A markdown cell that starts with a heading starts a section,
`Place("section", n, heading)`; cells before the first heading have no place. nbformat 4 (and
5) is read, and the worksheets of nbformat 3.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from .base import Part, Place, ReadContext, short_reason, strip_controls, unreadable

_HINT = "Check that it is a complete Jupyter notebook (.ipynb)"

# A markdown heading line (ATX): up to three spaces, one to six "#", then a space or the end.
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$")
# Terminal colour codes and other escape sequences, as IPython writes tracebacks and as progress
# bars write streams, then the control characters left.
_LANGUAGE = re.compile(r"[^\w+#.-]")
LABEL_LIMIT = 80

# Output data read as text, in order of preference; images and other binary data never are.
_TEXT_DATA = ("text/plain", "text/markdown", "text/latex")


def read_notebook(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    import json

    try:
        # json reads bytes in UTF-8, -16 or -32, with or without a byte-order mark.
        notebook = json.loads(file.read())
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise unreadable(context.title, "notebook", f"not valid JSON ({short_reason(exc, 80)})", _HINT) from exc
    cells = _cells(notebook, context.title)
    language = _language(notebook)
    section = 0
    place = Place()
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        kind = cell.get("cell_type")
        if kind == "heading":  # nbformat 3
            level = cell.get("level")
            depth = level if isinstance(level, int) and 1 <= level <= 6 else 1
            source = "#" * depth + " " + " ".join(_text(cell.get("source")).split())
        else:
            source = _text(cell.get("source") if "source" in cell else cell.get("input"))
        if kind in ("markdown", "heading"):
            heading = _heading(source)
            if heading is not None:
                section += 1
                place = Place("section", section, heading)
            yield Part(strip_controls(source), place)
        elif kind == "raw":
            yield Part(strip_controls(source), place)
        elif kind == "code":
            text = _code_cell(source, cell.get("outputs"), _cell_language(cell, language))
            if text:
                yield Part(text, place)


def _cells(notebook: Any, title: str) -> list[Any]:
    if isinstance(notebook, dict):
        cells = notebook.get("cells")
        if isinstance(cells, list):
            return cells
        worksheets = notebook.get("worksheets")
        if isinstance(worksheets, list):  # nbformat 3: the cells of each worksheet, in order
            found: list[Any] = []
            for sheet in worksheets:
                inner = sheet.get("cells") if isinstance(sheet, dict) else None
                if not isinstance(inner, list):
                    raise unreadable(title, "notebook", "an nbformat 3 notebook of a shape memagent does not read", _HINT4)
                found.extend(inner)
            return found
    raise unreadable(title, "notebook", "not a Jupyter notebook (no cells)", _HINT)


_HINT4 = "memagent reads nbformat 4 notebooks: open it in Jupyter and save it again"


def _language(notebook: dict[str, Any]) -> str:
    metadata = notebook.get("metadata")
    if isinstance(metadata, dict):
        for key, field in (("kernelspec", "language"), ("language_info", "name")):
            value = metadata.get(key)
            if isinstance(value, dict) and isinstance(value.get(field), str):
                name = _LANGUAGE.sub("", value[field]).lower()
                if name:
                    return name
        if isinstance(metadata.get("language"), str):  # nbformat 3 kept it in the cells
            name = _LANGUAGE.sub("", metadata["language"]).lower()
            if name:
                return name
    return "python"


def _cell_language(cell: dict[str, Any], default: str) -> str:
    value = cell.get("language")  # nbformat 3
    name = _LANGUAGE.sub("", value).lower() if isinstance(value, str) else ""
    return name or default


def _text(value: Any) -> str:
    """A notebook's multiline string: one string, or a list of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(item for item in value if isinstance(item, str))
    return ""


def _heading(source: str) -> str | None:
    """The heading a markdown cell starts with, as a place's label; None if it starts with none."""
    first = source.lstrip("\r\n").split("\n", 1)[0].rstrip("\r")
    match = _HEADING.match(first)
    if match is None:
        return None
    label = " ".join(strip_controls(match.group(2) or "").split())
    if len(label) > LABEL_LIMIT:
        label = label[: LABEL_LIMIT - 1].rstrip() + "…"
    return label or None


def _code_cell(source: str, outputs: Any, language: str) -> str:
    pieces: list[str] = []
    if source.strip():
        code = strip_controls(source).strip("\n")
        longest = max((len(run) for run in re.findall(r"`{3,}", code)), default=0)
        fence = "`" * max(3, longest + 1)  # a fence the code itself cannot close
        pieces.append(f"{fence}{language}\n{code}\n{fence}")
    for output in outputs if isinstance(outputs, list) else []:
        text = _output_text(output).strip("\n")
        if text.strip():
            pieces.append(text)
    return "\n".join(pieces)


def _output_text(output: Any) -> str:
    if not isinstance(output, dict):
        return ""
    kind = output.get("output_type")
    if kind == "stream":
        return strip_controls(_text(output.get("text")))
    if kind in ("execute_result", "display_data", "pyout", "update_display_data"):
        # nbformat 4 keeps the representations under "data"; nbformat 3 beside the type ("text").
        data = output.get("data")
        if not isinstance(data, dict):
            data = {"text/plain": output.get("text"), "text/html": output.get("html")}
        for key in _TEXT_DATA:
            text = _text(data.get(key))
            if text.strip():
                return strip_controls(text)
        html = _text(data.get("text/html"))
        if html.strip():
            from .web import html_to_text

            return strip_controls(html_to_text(html))
        return ""
    if kind in ("error", "pyerr"):
        name = output.get("ename")
        value = output.get("evalue")
        lines = [f"{name if isinstance(name, str) else 'Error'}: {value if isinstance(value, str) else ''}".rstrip()]
        traceback = output.get("traceback")
        if isinstance(traceback, list):
            lines.extend(strip_controls(line).rstrip() for line in traceback if isinstance(line, str))
        return "\n".join(lines)
    return ""
