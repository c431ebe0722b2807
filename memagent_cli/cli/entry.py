"""The `memagent` command's entry point: the CLI imported inside the Ctrl-C guard, so an
interrupt while modules are still loading exits 130 quietly like one at any other moment."""

import sys


def main() -> None:
    try:
        from .app import main as cli_main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    cli_main()
