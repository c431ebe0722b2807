"""The README's promises that a machine can check."""

import os
import re
import subprocess
import sys

from helpers import REPO


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```sh\n(.*?)\n```", text, flags=re.S)[:2]


def test_readme_opens_with_the_main_job_and_the_test_command():
    main_job, tests = readme_commands()
    assert "pip install ." in main_job and "memagent ask" in main_job
    assert "pytest" in tests and "'.[test]'" in tests


def test_ci_runs_exactly_the_readme_test_command():
    _, tests = readme_commands()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert tests in ci


def test_changelog_has_an_unreleased_section():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text and "memagent ask" in text


def test_every_test_named_in_reliability_md_exists():
    import fnmatch

    text = (REPO / "docs" / "RELIABILITY.md").read_text(encoding="utf-8")
    defined = {}
    for path in (REPO / "tests").glob("test_*.py"):
        names = re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), flags=re.M)
        defined[path.stem] = names
    refs = re.findall(r"\b(test_\w+)::(test_[\w*]+)", text)
    assert len(refs) > 30
    missing = [f"{f}::{t}" for f, t in refs if not fnmatch.filter(defined.get(f, []), t)]
    assert missing == []
    bare = [m for m in re.findall(r"\btest_\w+\b(?!::)", text) if m not in {t for _, t in refs}]
    assert bare == [], "name tests as file::test"


def test_json_md_shows_the_job_line_schema_batch_checks():
    """docs/JSON.md's schema of a batch job line is the one batch checks lines against."""
    import json
    import re

    from memagent_cli.cli.batch import JOB_LINE

    page = (REPO / "docs" / "JSON.md").read_text(encoding="utf-8")
    section = page[page.index("## `memagent batch`") :]
    shown = re.search(r"\n\n((?:    .*\n)+)", section)  # the indented block
    assert shown is not None and json.loads(shown.group(1)) == JOB_LINE


def test_the_live_view_picture_is_made_by_its_script(tmp_path):
    """docs/make_live_view.py, which made the README's picture, still runs: the trained code-word
    model reads its PDF, and the picture shows the step that found the code word and the answer."""
    out = tmp_path / "live.svg"
    done = subprocess.run(
        [sys.executable, str(REPO / "docs" / "make_live_view.py"), "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    word = re.search(r"found '([a-z]+ [a-z]+)'", done.stdout).group(1)
    svg = out.read_text(encoding="utf-8").replace("&#160;", " ")
    assert f"The code word is {word}." in svg and f"boxed{{{word}}}" in svg


DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_and_anchor_of_the_docs_resolves():
    broken = []
    for page in DOCS:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code is not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL: not this repository's
            path, _, anchor = target.partition("#")
            found = (page.parent / path) if path else page
            if not found.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and found.suffix == ".md":
                headings = {_slug(h) for h in re.findall(r"(?m)^#+ (.+)$", found.read_text(encoding="utf-8"))}
                if anchor not in headings:
                    broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []


def test_the_readme_is_read_in_two_minutes():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_every_command_the_docs_show_exists():
    """Each `memagent COMMAND [SUBCOMMAND]` a shell block of the README or docs shows answers --help."""
    import typer
    from typer.testing import CliRunner

    from memagent_cli.cli.app import app

    root = typer.main.get_command(app)
    shown = set()
    for page in DOCS:
        for block in re.findall(r"```sh\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S):
            for words in re.findall(r"(?:^|[|;&(]\s*|\$\s*)memagent ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", block, flags=re.M):
                name, _, sub = words.partition(" ")
                command = root.commands.get(name)  # type: ignore[attr-defined]
                assert command is not None, f"{page.name}: memagent {name} is no command"
                group = getattr(command, "commands", None)
                shown.add((name, sub) if group and sub in group else (name,))
    assert len(shown) >= 15
    for command in sorted(shown):
        done = CliRunner().invoke(app, [*command, "--help"], env={"NO_COLOR": "1", "COLUMNS": "100"})
        assert done.exit_code == 0, (command, done.output[-500:])
