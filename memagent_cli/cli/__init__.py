"""The `memagent` command: the only layer that knows typer and rich. `app` assembles the commands,
`common` holds the error line, the exit codes and the guard every command uses, `views/` draws the
live and multi-question views and the inspect/doctor reports."""
