"""The `memagent` command's entry point: the CLI imported inside the Ctrl-C guard, so an
interrupt while modules are still loading exits 130 quietly like one at any other moment."""

import sys

from ..errors import EXIT_INTERRUPTED


def main() -> None:
    try:
        try:
            from .app import main as cli_main
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(EXIT_INTERRUPTED)
        cli_main()
    finally:
        _forget_python_interrupt()


def _forget_python_interrupt() -> None:
    """A Ctrl-C that lands while code built from text runs (dataclasses and namedtuple make their
    methods with exec(), as when llama_cpp is imported) leaves CPython's "KeyboardInterrupt went
    unhandled" flag set even though memagent handled it; `python -m memagent_cli` then kills
    itself with SIGINT at exit instead of exiting with the code memagent chose. Every exec() of
    source text clears that flag before it runs, so one empty one does, on any CPython."""
    exec("None")
