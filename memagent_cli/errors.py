"""The one exception type the core raises for problems a user can fix.

The library never prints or exits; the CLI turns a MemagentError into one line on stderr
and the exit code carried here.
"""

from __future__ import annotations

# Exit codes, documented in the README: scripts rely on them.
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class MemagentError(Exception):
    """A problem with the user's input or environment, said in one line.

    `message` says what is wrong, `hint` what to do about it.
    """

    def __init__(self, message: str, hint: str | None = None, exit_code: int = EXIT_ERROR):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        # The message is closed as a sentence; the hint is kept as written, because it often
        # ends in a command to copy, which a full stop would spoil.
        return f"{_sentence(self.message)} {self.hint}" if self.hint else _sentence(self.message)


def _sentence(text: str) -> str:
    """Ends the text with a full stop when it has none, so message and hint read as one line.
    (No capitalising: a message may start with a file name.)"""
    text = text.strip()
    if not text:
        return text
    return text if text[-1] in ".!?:" else text + "."


class EngineGone(MemagentError):
    """The engine can take no more calls (every server of a pool has failed): each run still to
    come would fail the same way, so a job stops here rather than fail them one by one."""
