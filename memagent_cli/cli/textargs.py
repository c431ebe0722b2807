"""Text from the command line that is not UTF-8, one rule for every command.

Python gives an argument that is not valid UTF-8 to the program with its bad bytes as lone
surrogates (PEP 383), which no stream can print and no database can store. Before the commands
parse them, such arguments are decoded the way documents are (ingest.text.decode_text: the detected
encoding, Windows-1252 for Western words, else replacement characters), with a one-line note;
except paths, which keep their exact bytes so the file is still found: an argument that names an
existing file, and the value of an option that takes a path.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

# Options whose value is a path (or a model, which may be one) or a file-name pattern: their bytes name files.
PATH_OPTIONS = frozenset(
    {
        "-o",
        "--out",
        "--jsonl",
        "--csv",
        "--html",
        "--svg",
        "--questions",
        "--chat-template",
        "-m",
        "--model",
        "--tokenizer",
        "--allow",
        "--dir",
        "--output",
        "--include",  # patterns are matched against file names, byte for byte
        "--exclude",
    }
)


def _not_utf8(arg: str) -> bool:
    return any("\udc80" <= c <= "\udcff" for c in arg)


def decode_arguments(argv: Sequence[str], note: Callable[[str], None]) -> list[str]:
    """`argv` with each text argument that is not UTF-8 decoded (see the module docstring); `note`
    is told once per argument decoded, with the encoding read."""
    from ..ingest.text import decode_text

    out: list[str] = []
    for i, arg in enumerate(argv):
        if not _not_utf8(arg):
            out.append(arg)
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        previous = argv[i - 1] if i else ""
        if previous in PATH_OPTIONS or (eq and name in PATH_OPTIONS) or os.path.lexists(arg):
            out.append(arg)  # a path: its bytes name the file
            continue
        text, codec = decode_text(os.fsencode(value))
        out.append(f"{name}={text}" if eq else text)
        note(f"an argument is not UTF-8; it was read as {codec}: {text!r}")
    return out
