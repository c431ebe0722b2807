"""Every command's --help renders, and teaches: no traceback, and a flag (which takes no value) is
never shown with a value's type (`--json <bool>`)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from memagent_cli.cli.app import app


def command_paths() -> list[list[str]]:
    root = typer.main.get_command(app)
    paths: list[list[str]] = []

    def walk(command, path: list[str]) -> None:  # typer brings its own copy of click: by shape, not class
        paths.append(path)
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])

    walk(root, [])
    return paths


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "memagent")
def test_help_renders_and_shows_no_value_for_a_flag(path):
    result = CliRunner().invoke(app, [*path, "--help"], env={"NO_COLOR": "1", "COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert result.exception is None and "Traceback" not in result.output
    assert "<bool>" not in result.output
    assert "--help" in result.output and "Show this message and exit." in result.output


def test_every_command_is_walked():
    names = {" ".join(p) for p in command_paths()}
    assert {"ask", "batch", "inspect", "traces list", "eval run", "models pull", "config set", "doctor"} <= names
