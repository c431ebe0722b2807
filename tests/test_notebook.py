"""Jupyter notebooks: cells in order, code fenced in the kernel's language with its text outputs,
sections at markdown headings, and damaged or foreign JSON refused in one line."""

from __future__ import annotations

import codecs
import io
import json
from pathlib import Path

import pytest

from memagent_cli.errors import MemagentError
from memagent_cli.ingest.base import Place, ReadContext
from memagent_cli.ingest.notebook import read_notebook
from memagent_cli.ingest.sources import collect_sources, read_source

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


@pytest.fixture
def notes() -> list[str]:
    return []


def read(path: Path, notes: list[str]) -> tuple[str, list[Place]]:
    srcs = collect_sources([str(path)], warn=notes.append)
    segments = list(read_source(srcs[0], warn=notes.append))
    return "".join(s.text for s in segments), [s.place for s in segments]


def write(path: Path, notebook: object) -> Path:
    path.write_text(json.dumps(notebook), encoding="utf-8")
    return path


def nb4(cells: list[dict], metadata: dict | None = None) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": metadata or {}, "cells": cells}


def md(source) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def code(source, outputs=()) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": source, "outputs": list(outputs)}


def test_cells_outputs_and_sections(tmp_path, notes):
    notebook = nb4(
        [
            md("An introduction before any heading."),
            md(["# Setup\n", "We load the data.\n"]),
            code(
                ["import pandas as pd\n", "print('loaded')"],
                [
                    {"output_type": "stream", "name": "stdout", "text": ["loaded\n"]},
                    {
                        "output_type": "execute_result",
                        "execution_count": 1,
                        "metadata": {},
                        "data": {"text/plain": ["   a  b\n", "0  1  2"], "text/html": "<table><tr><td>1</td></tr></table>"},
                    },
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"image/png": PNG, "text/plain": "<Figure size 640x480>"},
                    },
                    {"output_type": "display_data", "metadata": {}, "data": {"image/png": PNG}},
                ],
            ),
            md("## Results  \n\nThe table shows it."),
            code(
                "df.describe()",
                [
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"text/html": ["<div><script>x()</script><b>mean</b> 1.5</div>"]},
                    }
                ],
            ),
            code(
                "1/0",
                [
                    {
                        "output_type": "error",
                        "ename": "ZeroDivisionError",
                        "evalue": "division by zero",
                        "traceback": [
                            "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
                            "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero",
                        ],
                    }
                ],
            ),
            {"cell_type": "raw", "metadata": {}, "source": "raw text"},
            code("", []),  # an empty cell: nothing
        ],
        {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    path = write(tmp_path / "analysis.ipynb", notebook)
    text, places = read(path, notes)
    assert text == (
        "An introduction before any heading."
        "\n\n# Setup\nWe load the data.\n"
        "\n\n```python\nimport pandas as pd\nprint('loaded')\n```\nloaded\n   a  b\n0  1  2\n<Figure size 640x480>"
        "\n\n## Results  \n\nThe table shows it."
        "\n\n```python\ndf.describe()\n```\nmean 1.5"
        "\n\n```python\n1/0\n```\nZeroDivisionError: division by zero\n"
        "---------------------------------------------------------------------------\n"
        "ZeroDivisionError: division by zero"
        "\n\nraw text"
    )
    assert places == [
        Place(),
        Place("section", 1, "Setup"),
        Place("section", 1, "Setup"),
        Place("section", 2, "Results"),
        Place("section", 2, "Results"),
        Place("section", 2, "Results"),
        Place("section", 2, "Results"),
    ]
    assert "\x1b" not in text and PNG not in text and "<" not in text.replace("<Figure", "")
    assert notes == []


@pytest.mark.parametrize(
    ("metadata", "fence"),
    [
        ({"kernelspec": {"name": "ir", "language": "R"}}, "```r"),
        ({"language_info": {"name": "julia"}}, "```julia"),
        ({"kernelspec": {"language": "c`++ ; rm"}}, "```c++rm"),  # never markup from metadata
        ({}, "```python"),
    ],
)
def test_fence_language_comes_from_the_kernel(tmp_path, notes, metadata, fence):
    path = write(tmp_path / "lang.ipynb", nb4([code("x <- 1")], metadata))
    text, places = read(path, notes)
    assert text == f"{fence}\nx <- 1\n```"
    assert places == [Place()]


def test_code_holding_a_fence_gets_a_longer_one(notes):
    notebook = nb4([code('print("""\n```\nnot the end\n```\n""")')])
    context = ReadContext("n.ipynb", "n.ipynb", notes.append)
    parts = list(read_notebook(io.BytesIO(json.dumps(notebook).encode()), context))
    assert [(p.text, p.place) for p in parts] == [('````python\nprint("""\n```\nnot the end\n```\n""")\n````', Place())]


def test_heading_labels_are_short_and_plain(tmp_path, notes):
    long = "word " * 40
    notebook = nb4([md(f"### {long}\nbody"), md("#hashtag is not a heading"), md("# \x1b[1mBold\x1b[0m title #")])
    text, places = read(write(tmp_path / "h.ipynb", notebook), notes)
    first = places[0]
    assert first.unit == "section" and first.number == 1
    assert len(first.label) == 80 and first.label.endswith("…") and first.label.startswith("word word")
    assert places[1:] == [Place("section", 1, first.label), Place("section", 2, "Bold title")]
    assert "\x1b" not in text


def test_utf8_bom_is_read(tmp_path, notes):
    path = tmp_path / "bom.ipynb"
    path.write_bytes(codecs.BOM_UTF8 + json.dumps(nb4([md("Grüße")])).encode())
    assert read(path, notes) == ("Grüße", [Place()])


def test_nbformat3_worksheets_are_read(tmp_path, notes):
    notebook = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {"name": "old"},
        "worksheets": [
            {
                "cells": [
                    {"cell_type": "heading", "level": 2, "source": ["Old style"]},
                    {"cell_type": "markdown", "source": "Some words."},
                    {
                        "cell_type": "code",
                        "language": "python",
                        "input": ["a = 2\n", "a * 3"],
                        "outputs": [
                            {"output_type": "pyout", "prompt_number": 1, "text": ["6"], "png": PNG},
                            {
                                "output_type": "pyerr",
                                "ename": "NameError",
                                "evalue": "b",
                                "traceback": ["\x1b[31mNameError\x1b[0m: b"],
                            },
                        ],
                    },
                ]
            }
        ],
    }
    text, places = read(write(tmp_path / "old.ipynb", notebook), notes)
    assert text == "## Old style\n\nSome words.\n\n```python\na = 2\na * 3\n```\n6\nNameError: b\nNameError: b"
    assert places == [Place("section", 1, "Old style")] * 3


def test_odd_nbformat3_is_refused_naming_nbformat4(tmp_path, notes):
    path = write(tmp_path / "odd.ipynb", {"nbformat": 3, "worksheets": ["not a worksheet"]})
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert str(caught.value) == (
        f"Cannot read notebook {path}: an nbformat 3 notebook of a shape memagent does not read. "
        "memagent reads nbformat 4 notebooks: open it in Jupyter and save it again"
    )


def test_invalid_json_is_one_line_error(tmp_path, notes):
    path = tmp_path / "broken.ipynb"
    path.write_text(json.dumps(nb4([md("cut off here")]))[:30])
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert caught.value.message.startswith(f"Cannot read notebook {path}: not valid JSON (")
    assert "\n" not in str(caught.value)
    assert caught.value.hint == "Check that it is a complete Jupyter notebook (.ipynb)"


def test_binary_junk_named_ipynb_is_one_line_error(tmp_path, notes):
    path = tmp_path / "junk.ipynb"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert caught.value.message.startswith(f"Cannot read notebook {path}: not valid JSON (")


@pytest.mark.parametrize("document", [{"name": "not a notebook"}, [1, 2, 3], "just a string", {"cells": "not a list"}])
def test_json_that_is_not_a_notebook_is_refused(tmp_path, notes, document):
    path = write(tmp_path / "other.ipynb", document)
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert str(caught.value) == (
        f"Cannot read notebook {path}: not a Jupyter notebook (no cells). Check that it is a complete Jupyter notebook (.ipynb)"
    )


def test_deeply_nested_json_is_one_line_error(tmp_path, notes):
    path = tmp_path / "deep.ipynb"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert caught.value.message.startswith(f"Cannot read notebook {path}: not valid JSON (")


def test_cells_of_the_wrong_shape_are_passed_over(tmp_path, notes):
    notebook = nb4(
        [None, 3, {"cell_type": "markdown", "source": 7}, {"cell_type": "code", "source": ["x"], "outputs": "?"}, md("kept")]
    )
    text, places = read(write(tmp_path / "shapes.ipynb", notebook), notes)
    assert text == "```python\nx\n```\n\nkept"
    assert places == [Place(), Place()]
