"""The `memagent` command line, assembled: the commands (one module each: ask, batch, watch, chat,
inspect, traces, eval, models, mcp, serve), the version flag, and `main`, which maps an unexpected error to one line.

Answers go to stdout, everything else (live view, warnings, errors) to stderr, so
`memagent ask doc.pdf "q" > answer.txt` and `--json | jq` work.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, NoReturn

import typer
from rich.text import Text

from ..errors import EXIT_ERROR, EXIT_INTERRUPTED
from ..version import __version__
from .common import command_group
from .metavars import name_values

app = command_group(
    "Ask questions about documents of any length, on your own machine.\n\n"
    "MemAgent reads the text in chunks; after each chunk the model rewrites a bounded memory, and the "
    "answer is written from the final memory alone. Context stays ~8K tokens whatever the length.",
    name="memagent",
    pretty_exceptions_enable=False,  # main() decides what an unexpected error looks like
)

from .ask import ask  # noqa: E402  # the commands, registered below in the order --help lists them
from .batch import batch  # noqa: E402
from .chat import chat  # noqa: E402
from .inspecting import inspect  # noqa: E402
from .watch import watch  # noqa: E402

app.command(no_args_is_help=True)(ask)
app.command(no_args_is_help=True)(batch)
app.command(no_args_is_help=True)(watch)
app.command(no_args_is_help=True)(chat)
app.command(no_args_is_help=False)(inspect)


def _traces_app() -> typer.Typer:
    from .traces import app as traces

    return traces


app.add_typer(_traces_app(), name="traces")


def _eval_app() -> typer.Typer:
    from .evals import app as evaluation

    return evaluation


app.add_typer(_eval_app(), name="eval")


def _register_model_commands() -> None:
    from .models import config_app, doctor, models_app

    app.add_typer(models_app, name="models")
    app.add_typer(config_app, name="config")
    app.command()(doctor)


_register_model_commands()


def _register_servers() -> None:
    from .mcp import mcp
    from .serve import serve

    app.command()(mcp)
    app.command()(serve)


_register_servers()


def _reflow(text: str | None) -> str | None:
    """A help text's paragraphs as single lines, for the terminal to wrap: typer's rich help keeps
    a docstring's line breaks, which cut sentences at the source's width ("the / number of"). An
    indented line (an example command) and a blank line stay where they are. Typer's markdown help
    mode reflows too, but joins the examples' lines into one paragraph and prints rich markup as it
    stands (tests/test_help.py holds every --help to both, at 80 and 120 columns)."""
    import inspect as pyinspect

    if not text:
        return text
    out: list[str] = []
    for line in pyinspect.cleandoc(text).split("\n"):
        joins = out and out[-1].strip() and line.strip() and not line[0].isspace() and not out[-1][0].isspace()
        if joins and not out[-1].startswith("[dim]"):
            out[-1] = out[-1] + " " + line.strip()
        else:
            out.append(line)
    return "\n".join(out)


def _reflow_help(group: typer.Typer) -> None:
    """Every command's and group's help, reflowed (see _reflow), down the tree."""
    group.info.help = _reflow(group.info.help) if isinstance(group.info.help, str) else group.info.help
    for command in group.registered_commands:
        if command.help:
            command.help = _reflow(command.help)
        elif command.callback is not None and command.callback.__doc__:
            command.help = _reflow(command.callback.__doc__)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _reflow_help(sub.typer_instance)
        if isinstance(sub.help, str):
            sub.help = _reflow(sub.help)


_reflow_help(app)
name_values(app)  # every value's metavar a word, not a Python type


def _version(value: bool) -> None:
    if value:
        print(f"memagent {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks of internal errors (may be given anywhere; or MEMAGENT_DEBUG=1).")
    ] = False,
) -> None:
    pass


def main() -> None:
    # --debug is taken from anywhere on the line (people add it at the end of the command
    # that failed), so it is removed here before typer parses the rest.
    debug = "--debug" in sys.argv[1:] or os.environ.get("MEMAGENT_DEBUG", "") not in ("", "0")
    sys.argv[1:] = [a for a in sys.argv[1:] if a != "--debug"]
    if any("\udc80" <= c <= "\udcff" for a in sys.argv[1:] for c in a):  # an argument that is not UTF-8
        from .common import hinter, stderr_console
        from .textargs import decode_arguments

        err = stderr_console()
        sys.argv[1:] = decode_arguments(sys.argv[1:], hinter(err))
    from typer.exceptions import TyperException

    try:
        code = app(standalone_mode=False)  # click's errors come here, to be said as memagent says its own
    except TyperException as exc:  # a usage error, or another error click raises, said as one line
        _usage_error(exc)
    except BrokenPipeError:  # the reader went away (`| head`): what it wanted it has; a quiet success
        _closed_pipe()
    except SystemExit as exc:  # click ends a command whose stdout reader went away with exit 1
        if exc.code == 1 and _reader_gone():
            _closed_pipe()
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # a bug: one line, the traceback on request
        if debug:
            raise
        from .textout import visible

        print(
            f"internal error: {visible(type(exc).__name__)}: {visible(str(exc))[:300]}\n"
            "This is a bug in memagent. Please report it on the memagent issue tracker with the command you ran "
            "and the output of `memagent doctor`; run again with --debug for the traceback. "
            "A run's completed steps are kept: memagent ask --resume last",
            file=sys.stderr,
        )
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else 0)


def _usage_error(exc: Exception) -> NoReturn:
    """click's own errors (an unknown option, a bad value) as memagent says every error: `error:`
    and one line, then where the help is; click's exit code (2 for usage)."""
    from .common import stderr_console
    from .textout import visible

    message = getattr(exc, "format_message", lambda: str(exc))()
    ctx = getattr(exc, "ctx", None)
    where = f"\nTry '{ctx.command_path} -h' for help." if ctx is not None else ""
    if message.strip():  # a bare command with no arguments has had its help shown: nothing more to say
        stderr_console().print(Text.assemble(("error: ", "bold red"), visible(message), where), soft_wrap=True)
    sys.exit(getattr(exc, "exit_code", EXIT_ERROR))


def _reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll says POLLERR)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno() if sys.__stdout__ is not None else 1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or no stdout at all
        return False


def _closed_pipe() -> NoReturn:
    # Python would report the unflushed stdout at exit ("Exception ignored ... BrokenPipeError"):
    # point it at /dev/null first, as the Python docs advise for SIGPIPE.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.exit(0)


if __name__ == "__main__":
    main()
