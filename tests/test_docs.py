"""The README's promises that a machine can check."""

import re

from conftest import REPO


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
