"""The package's layers, checked: imports point one way, and only the CLI knows typer and rich.

    cli → mcp, webapp → runs → evals, traces → core → install → model, ingest → paths, errors, display

Every import is seen, those inside functions too (an import deferred for speed must still point
down the layers; it may never hide a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

PACKAGE = REPO / "memagent_cli"
# Higher imports lower; equal ranks are siblings and may not import each other.
RANKS = {
    "__main__": 8,
    "cli": 7,
    "mcp": 6,
    "webapp": 6,
    "runs": 5,
    "evals": 4,
    "traces": 4,
    "core": 3,
    "install": 2,
    "model": 1,
    "ingest": 1,
    "paths": 0,
    "errors": 0,
    "display": 0,
    "version": 0,
    "model_catalog": 0,
}
UI_LIBRARIES = ("typer", "rich", "click")


def _layer(module: str) -> str | None:
    """'memagent_cli.core.agent' -> 'core'; the package's own __init__ (the library facade) -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield path, ".".join(parts), path.name == "__init__.py"


def _imports(path: Path, module: str, is_package: bool):
    """(line, imported module) for every import in the file, relative ones made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None or (node.level and not node.module):
                # `from . import a, b`: each name may be a module of its own
                for alias in node.names:
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target


def test_imports_point_down_the_layers():
    wrong = []
    for path, module, is_package in _modules():
        here = _layer(module)
        if here is None:
            continue  # memagent_cli/__init__.py: the library facade, above everything
        for line, target in _imports(path, module, is_package):
            if not target.startswith("memagent_cli"):
                continue
            there = _layer(target)
            if there is None or there == here or there.startswith("__"):
                continue  # the facade's own names (`from .. import __version__`), or the same layer
            if RANKS[there] >= RANKS[here]:
                wrong.append(f"{path.relative_to(REPO)}:{line} ({here}) imports {target} ({there})")
    assert wrong == [], "\n".join(wrong)


def test_only_the_cli_knows_typer_and_rich():
    wrong = []
    for path, module, is_package in _modules():
        if _layer(module) == "cli":
            continue
        for line, target in _imports(path, module, is_package):
            if target.split(".")[0] in UI_LIBRARIES:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert wrong == [], "\n".join(wrong)


def test_private_names_stay_in_their_module():
    """`from x import _name` across modules is how copies and hidden couplings start."""
    wrong = []
    for path, module, is_package in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("memagent_cli")):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno} imports {', '.join(private)}")
    assert wrong == [], "\n".join(wrong)


def test_the_package_has_no_import_cycles():
    """Between modules, counting imports inside functions."""
    graph: dict[str, set[str]] = {}
    names = {module for _, module, _ in _modules()}
    for path, module, is_package in _modules():
        deps = set()
        for _, target in _imports(path, module, is_package):
            while target and target not in names:
                target = target.rpartition(".")[0]
            if target and target != module and target != "memagent_cli" and not module.startswith(target + "."):
                deps.add(target)
        graph[module] = deps
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" → ".join(stack[stack.index(dep) :] + [dep]) if dep in stack else f"{node} → {dep}")
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == [], "\n".join(cycles)


def test_the_command_line_starts_without_heavy_libraries():
    """`memagent --help` pays for typer and rich only: numpy, llama_cpp, huggingface_hub, pypdf,
    gguf and every document format's library are imported by the commands that use them."""
    import subprocess
    import sys

    code = (
        "import sys, memagent_cli.cli.app; "
        "print(' '.join(m for m in ('numpy', 'llama_cpp', 'huggingface_hub', 'pypdf', 'gguf', 'tiktoken', "
        "'docx', 'pptx', 'openpyxl', 'xlrd', 'odf', 'ebooklib', 'trafilatura', 'lxml', 'feedparser', "
        "'extract_msg', 'striprtf', 'charset_normalizer', 'rapidocr', 'onnxruntime', 'pypdfium2', 'PIL') "
        "if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == []
