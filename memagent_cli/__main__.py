"""`python -m memagent_cli` runs the command line."""

from .entry import main

main()
