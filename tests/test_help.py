"""Every command's --help renders, and teaches: no traceback, a flag (which takes no value) is
never shown with a value's type (`--json <bool>`), and a value is named by what is expected
(`SCHEMA`, `TOKENS`, `GLOB`), never by a Python type (`<str>`, `<float range>`, `<list[str]>`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Optional

import pytest
import typer
from typer.testing import CliRunner

from memagent_cli.cli.app import app
from memagent_cli.cli.options import option


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
    python_types = re.findall(r"<(?:str|int|float|bool|Path|list\[[^>]*\]|[a-z]+ range)>", result.output)
    assert not python_types, f"a value shown as a Python type: {python_types}"
    assert "--help" in result.output and "Show this message and exit." in result.output


def test_every_command_is_walked():
    names = {" ".join(p) for p in command_paths()}
    assert {"ask", "batch", "inspect", "traces list", "eval run", "models pull", "config set", "doctor"} <= names


# Flags that share a name on several commands but mean different things there, and why: every
# other flag taken by more than one command means one thing, with one help text (options.py).
MEANINGS = {
    "--cid": "ask, chat and inspect go on with a conversation; traces list and export name one to show",
    "--conversation": "the same as --cid",
    "--ctx": "doctor checks the fit of a context size; the run commands make one",
    "--json": "watch and chat print a record a line as each answer lands; the others print one object",
    "--limit": "the runs traces list shows, the hits traces search finds, the items eval runs",
    "--model": "eval make-niah sizes its contexts with a model's tokenizer and runs none",
    "-m": "the same as --model",
    "--name": "what models pull, convert and add call the model, each defaulting from what it installs",
    "--out": "a job's results (batch, eval run), where make-niah writes its items",
    "-o": "--out's, and the file traces export writes",
    "--seed": "make-niah's seed makes the same items again; a run's seeds its sampling",
    "--token": "mcp's guards its HTTP transport for MCP clients; serve's guards the page, given once in a browser",
}


def test_a_flag_means_one_thing_wherever_it_is_taken():
    """Each flag has one help text across every command that takes it, unless it is one of
    MEANINGS, which says why it differs; and each of those still differs (the list stays true)."""
    root = typer.main.get_command(app)
    helps: dict[str, dict[str, list[str]]] = {}

    def walk(command, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        for param in command.params:
            if getattr(param, "param_type_name", "") == "option":
                for name in param.opts:
                    helps.setdefault(name, {}).setdefault((param.help or "").strip(), []).append(" ".join(path))

    walk(root, [])
    differing = {name for name, texts in helps.items() if len(texts) > 1}
    assert differing - set(MEANINGS) == set(), {name: helps[name] for name in differing - set(MEANINGS)}
    assert set(MEANINGS) - differing == set()
    for shared in ("--parallel", "--quiet", "--no-trace", "--offline", "--csv", "--jsonl", "--html", "--cite", "--fresh"):
        assert len(helps[shared]) == 1 and len(next(iter(helps[shared].values()))) >= 2, (shared, helps[shared])


def _examples(help_text: str) -> list[str]:
    """The example command lines a help text gives: the indented lines after its "Examples:"."""
    lines = help_text.split("\n")
    starts = [k for k, line in enumerate(lines) if line.rstrip().endswith("Examples:[/]")]
    found: list[str] = []
    for start in starts:
        for line in lines[start + 1 :]:
            if not line.startswith(" "):
                break
            found.append(line.strip())
    return found


@pytest.mark.parametrize("columns", [80, 120])
def test_every_help_keeps_its_example_lines_and_prints_no_markup(columns):
    """Why app._reflow, and not typer's markdown help mode: tried on every command, markdown mode
    joined each example's lines into one paragraph ("...signed.csv memagent ask --engine ...") and
    printed the rich markup ("[dim]Examples:[/]") as it stands. Here, at 80 and 120 columns: every
    example line starts a line of its own, and no markup tag is printed."""
    root = typer.main.get_command(app)
    checked = 0

    def command_at(path: list[str]):
        command = root
        for name in path:
            command = command.commands[name]
        return command

    for path in command_paths():
        command = command_at(path)
        shown = CliRunner().invoke(app, [*path, "--help"], env={"NO_COLOR": "1", "COLUMNS": str(columns)}).output
        assert not re.search(r"\[/\]|\[/?(?:b|i|dim|bold)\]", shown), (path, shown)
        starts = [line.strip("│ ") for line in shown.split("\n")]
        for example in _examples(command.help or ""):
            assert any(line.startswith(example[: columns - 12]) for line in starts), (path, example, shown)
            checked += 1
    assert checked >= 20  # the walk found the examples it checks


def test_inspect_takes_the_prompt_flags_as_ask_takes_them():
    """`ask` with its flags becomes `inspect` by its name alone, for everything that decides what
    the model is sent: both take run_flags.PromptFlags, with one help text each (test above)."""
    from dataclasses import fields

    from memagent_cli.cli.run_flags import PromptFlags

    root = typer.main.get_command(app)
    wanted = {"--model", "-m", "--protocol", "--chat-template", "--instructions", "--schema", "--schema-multi"}
    wanted |= {"--chunk-tokens", "--memory-tokens"}
    for name in ("ask", "inspect"):
        params = root.commands[name].params
        assert {f.name for f in fields(PromptFlags)} <= {p.name for p in params}, name
        assert wanted <= {opt for p in params for opt in p.opts}, name


def test_ask_and_inspect_take_the_same_ask_flags():
    """Both take ask_flags.AskFlags, a group holding groups: every flag of it, at any depth, is an
    option of each command."""
    from memagent_cli.cli.ask_flags import AskFlags
    from memagent_cli.cli.options import SourceFlags

    root = typer.main.get_command(app)
    ask, inspect = ({p.name for p in root.commands[name].params} for name in ("ask", "inspect"))
    nested = {"include", "exclude", "password", "ocr", "question", "questions_file", "jsonl", "csv_file", "html"}
    nested |= {"json_out", "raw", "cite", "quiet", "resume", "no_trace", "fresh", "each", "parallel", "svg"}
    assert nested <= ask and nested <= inspect
    assert "source_flags" not in ask | inspect  # a group is never an option itself
    assert AskFlags().source_flags == SourceFlags()


@dataclass(frozen=True)
class Inner:
    depth: Annotated[int, option("How deep.", "--depth")] = 1


@dataclass(frozen=True)
class Outer:
    name: Annotated[Optional[str], option("A name.", "--name")] = None
    inner: Inner = Inner()


def test_a_group_of_groups_is_made_from_the_flags_given():
    """options.flag_groups builds each group, nested ones too, from the options given on the line."""
    from memagent_cli.cli.options import flag_groups

    got: list[Outer] = []
    tool = typer.Typer()

    @tool.command()
    @flag_groups
    def run(outer: Outer = Outer(inner=Inner(depth=5))) -> None:
        got.append(outer)

    @tool.command()
    def other() -> None:  # two commands, so that `run` is named on the line
        pass

    assert CliRunner().invoke(tool, ["run"]).exit_code == 0
    assert CliRunner().invoke(tool, ["run", "--name", "x", "--depth", "3"]).exit_code == 0
    assert got == [Outer(None, Inner(5)), Outer("x", Inner(3))]  # the default the parameter gave, then the flags
