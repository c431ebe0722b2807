"""`python -m memagent_cli` runs the command line."""

from .cli.entry import main

main()
