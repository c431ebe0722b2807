"""The benchmark harness keeps its promises: PERFORMANCE.md is what the results make, every
benchmark keeps the module contract and renders from its results file, the package has no import
circle and no file over 600 lines. (The benchmarks themselves are run by hand: they time things.)"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from benchmarks.harness import doc
from benchmarks.harness.registry import BENCHMARKS, Row, Target, module
from benchmarks.harness.results import RESULTS, Results

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "benchmarks"
SCHEMA = {"name", "when", "machine", "commit", "args", "metrics", "targets"}


def test_the_performance_page_is_what_the_results_make():
    assert doc.PAGE.read_text(encoding="utf-8") == doc.render(), "run `python -m benchmarks doc` and commit the page"


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_each_benchmark_keeps_the_contract_and_renders_from_its_results(name):
    bench = module(name)
    for attribute in ("TITLE", "QUICK", "add_arguments", "measure", "rows", "section"):
        assert hasattr(bench, attribute), f"{name} lacks {attribute}"
    found = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    assert set(found) == SCHEMA and found["name"] == name
    results = Results()
    rows = bench.rows(found["metrics"], results)
    assert rows and all(isinstance(r, Row) and r.what and r.result for r in rows)
    body = bench.section(found["metrics"], results)
    assert len(body) > 200 and not body.lstrip().startswith("## "), "the harness writes the heading"
    assert f"## {name}: {bench.TITLE}" in doc.PAGE.read_text(encoding="utf-8")


def test_a_target_is_checked_as_the_table_shows_it():
    assert Target("≤ 1.05").row("x", 1.05).result == "1.05 ✓"
    assert Target("≤ 1.05").row("x", 1.051).met is False
    assert Target("≥ 0.95").row("x", 0.9, "note").result == "0.9 ✗ (note)"
    assert Target("yes").met(True) and not Target("yes").met(False)
    with pytest.raises(ValueError):
        Target("about 3").met(1.0)


def _imports(path: Path) -> set[str]:
    """The benchmarks.* modules a file imports (top level and inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("benchmarks")}
    return found


def test_no_import_circle_and_no_file_over_600_lines():
    files = {
        ".".join(("benchmarks", *p.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__"): p
        for p in ROOT.rglob("*.py")
    }
    graph = {name: {m for m in _imports(path) if m in files and m != name} for name, path in files.items()}
    for name, path in files.items():
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 600, f"{path} is over 600 lines"

    def reach(start: str, seen: set[str]) -> None:
        for nxt in graph[start]:
            # a package's own __init__ importing its submodules is its assembly, not a circle
            if nxt == name and not start.startswith(name + "."):
                raise AssertionError(f"import circle through {name} and {start}")
            if nxt not in seen:
                seen.add(nxt)
                reach(nxt, seen)

    for name in graph:
        reach(name, set())
    assert all("sys.path" not in p.read_text(encoding="utf-8") for p in files.values()), "no benchmark edits sys.path"


def test_no_benchmark_imports_a_module_of_tests():
    """tests/ is not a package and not on a benchmark's path: what both need is in testkit/ (B11's
    drafts part imported tests/qwenlong_task.py and failed outside pytest)."""
    test_modules = {p.stem for p in (REPO / "tests").glob("*.py")}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            assert not {n.split(".")[0] for n in names} & test_modules, f"{path} imports from tests/: {names}"
