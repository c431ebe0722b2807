"""What a request to a server (the MCP server, the page) may read, checked before anything is read.

The caller may be a language model, and a document it reads can carry instructions; a page may be
asked for anything by whoever reaches it. So every path a request names is checked here on its real
path (symbolic links followed, `..` collapsed) against the allowed roots: the server's folders
(`mcp --allow`, `serve ROOTS`), narrowed to the roots an MCP client declares when it declares any.
Folders are walked first and every entry in them checked (a link inside an allowed folder that
leads out is refused), then each document memagent found is checked again (a document inside an
archive lives in the archive file, which must be allowed), and the bounds of one call (MAX_*) are
applied. A refusal names its rule and lists what broke it; as everything is checked first, a
refused call has read nothing. A stored run (resume, the trace tools, the page) is held to the same
rules through the paths it recorded.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from ..errors import EXIT_USAGE, MemagentError
from ..ingest.base import printable
from ..ingest.sources import STDIN_PATH, Source
from ..traces.recorder import was_found

# The bounds of one call: a host is a language model, and a document can ask it for anything.
MAX_TOTAL_BYTES = 2 * 1024**3  # the sources' bytes, summed over every document they hold
MAX_FILES = 1_000  # documents (files, and documents inside archives) one call reads
MAX_WALK_ENTRIES = 20_000  # entries looked at under the folders one call names, before reading

URL_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
SHOWN = 5  # refusals listed in one error; the count says how many more


class Refused(MemagentError):
    """A call asked for what the rules forbid; nothing was read."""


@dataclass(frozen=True)
class Roots:
    """Real paths of the folders a call may read under: the server's (`allowed`, given as `given`
    says: MCP's --allow, the page's ROOT arguments), and the client's (`client`, None when it declared
    none), both of which must hold a path."""

    allowed: tuple[str, ...]
    client: tuple[str, ...] | None = None
    given: str = "--allow"

    def covers(self, real: str) -> bool:
        return self.why_not(real) is None

    def why_not(self, real: str) -> str | None:
        """Why the real path `real` may not be read, naming the rule; None if it may."""
        if not any(_under(real, root) for root in self.allowed):
            return f"outside the allowed roots (rule: the server reads only under {self.given} {', '.join(self.allowed)})"
        if self.client is not None and not any(_under(real, root) for root in self.client):
            return f"outside the roots the client declared (rule: only under {', '.join(self.client)})"
        return None


def _under(real: str, root: str) -> bool:
    return root == os.sep or real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def client_roots(uris: Iterable[str]) -> tuple[str, ...] | None:
    """The real paths of the file:// roots a client declared; None when it declared none (its
    other roots name no folder of this machine, and narrow nothing)."""
    found: list[str] = []
    for uri in uris:
        parsed = urlparse(uri)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            continue
        found.append(os.path.realpath(url2pathname(unquote(parsed.path))))
    return tuple(dict.fromkeys(found)) or None


def _refuse(problems: list[str]) -> Refused:
    more = f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return Refused(
        "Refused, nothing was read: " + "; ".join(problems[:SHOWN]) + more,
        "Name files and folders under the allowed roots (the server's, and an MCP client's).",
        exit_code=EXIT_USAGE,
    )


def check_named(paths: Sequence[str], roots: Roots, cwd: str) -> list[str]:
    """The real paths of what a call names, to be read; raises Refused naming every rule they
    break. Folders are walked (hidden entries aside, as memagent skips them) and each entry's
    real path checked, so a link inside an allowed folder that leads out refuses the call."""
    problems: list[str] = []
    real_paths: list[str] = []
    budget = [MAX_WALK_ENTRIES]
    if not paths:
        raise Refused("No source named.", "Give the files or folders to read in `sources`.", exit_code=EXIT_USAGE)
    for path in paths:
        shown = printable(path)
        if not path.strip():
            problems.append("an empty path (rule: name a file or folder)")
            continue
        if path == STDIN_PATH:
            problems.append('"-" is standard input, which the server does not read (rule: files and folders only)')
            continue
        if URL_LIKE.match(path):
            problems.append(f"{shown} looks like a URL (rule: the server reads local files only, it fetches nothing)")
            continue
        if "\0" in path:
            problems.append(f"{shown} holds a NUL byte (rule: a path names a file)")
            continue
        joined = os.path.join(cwd, os.path.expanduser(path))
        real = os.path.realpath(joined)  # links resolved before `..` is collapsed, as the system does
        absolute = os.path.normpath(joined)
        why = roots.why_not(real)
        if why is not None:
            problems.append(f"{shown} {_through(path, absolute, real)}is {why}")
            continue
        try:
            info = os.stat(real)
        except OSError as exc:
            problems.append(f"{shown} {_through(path, absolute, real)}cannot be opened: {exc.strerror or exc}")
            continue
        if stat.S_ISDIR(info.st_mode):
            problems += _walk(real, shown, roots, budget)
        elif not stat.S_ISREG(info.st_mode):
            problems.append(f"{shown} is not a regular file (rule: files and folders only, no pipes or devices)")
            continue
        real_paths.append(real)
    if problems:
        raise _refuse(problems)
    return real_paths


def _through(path: str, absolute: str, real: str) -> str:
    """Where a path named was taken to be, when that is not what it says: a link (or `..`) that
    took it elsewhere, or a relative path resolved from the server's directory."""
    if absolute != real:
        return f"(it leads to {printable(real)}) "
    return f"(resolved as {printable(absolute)}) " if path != absolute else ""


def _walk(folder: str, shown: str, roots: Roots, budget: list[int]) -> list[str]:
    """The refusals among the entries under a folder (real path `folder`, named `shown`)."""
    problems: list[str] = []
    pending, seen = [(folder, shown)], {folder}
    while pending:
        directory, title = pending.pop()
        try:
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:
            continue  # unreadable: memagent skips it with a note, and reads nothing there
        for entry in entries:
            if entry.name.startswith("."):
                continue  # hidden: never read
            budget[0] -= 1
            if budget[0] < 0:
                return problems + [
                    f"{shown} holds more than {MAX_WALK_ENTRIES:,} entries (rule: at most that many looked at per call)"
                ]
            real = os.path.realpath(entry.path)
            name = f"{title}/{printable(entry.name)}"
            why = roots.why_not(real)
            if why is not None:
                problems.append(f"{name} (it leads to {printable(real)}) is {why}")
                continue
            if os.path.isdir(real) and real not in seen:
                seen.add(real)
                pending.append((real, name))
    return problems


def check_sources(sources: Sequence[Source], roots: Roots) -> None:
    """Every document memagent found, before any is read: a regular file under the roots (a
    document in an archive: the archive), and the call's bounds on files and bytes."""
    problems: list[str] = []
    total = 0
    for source in sources:
        if source.path == STDIN_PATH or source.size is None:
            problems.append(f"{printable(source.title)} is a pipe or standard input (rule: regular files only)")
            continue
        total += source.size
        real = os.path.realpath(source.path)
        why = roots.why_not(real)
        if why is not None:
            where = f" (inside {printable(real)})" if source.member else f" (it leads to {printable(real)})"
            problems.append(f"{printable(source.title)}{where} is {why}")
    if len(sources) > MAX_FILES:
        problems.append(f"the sources hold {len(sources):,} documents (rule: at most {MAX_FILES:,} per call)")
    if total > MAX_TOTAL_BYTES:
        problems.append(f"the sources hold {total:,} bytes (rule: at most {MAX_TOTAL_BYTES:,} bytes, 2 GiB, per call)")
    if problems:
        raise _refuse(problems)


def stored_sources(run: Mapping[str, Any], roots: Roots) -> list[Source]:
    """A recorded run's documents as Sources to read again (their recorded titles, so the text
    is laid out as it was; those found in a folder marked so, so that one that cannot be read is
    skipped again), after the same checks as a new call's; raises Refused."""
    problems: list[str] = []
    sources: list[Source] = []
    for record in run["sources"]:
        if record.get("kind") == "stdin" or not record.get("abspath"):
            problems.append(f"run {run['id'][:8]} read standard input (rule: files only; resume it with memagent ask --resume)")
            continue
        sources.append(
            Source(
                path=record["abspath"],
                title=record["title"],
                kind=record["kind"],
                size=record.get("size"),
                member=tuple(record.get("member") or ()),
                found=was_found(record),  # as `memagent ask --resume` marks it
            )
        )
    if problems:
        raise _refuse(problems)
    check_sources(sources, roots)
    return sources


def run_visible(run: Mapping[str, Any], roots: Roots) -> bool:
    """Whether a recorded run read only what this server may read: the trace tools show no
    other (its memories hold what it read)."""
    for record in run.get("sources") or []:
        path = record.get("abspath")
        if record.get("kind") == "stdin" or not path or not roots.covers(os.path.realpath(path)):
            return False
    return bool(run.get("sources"))
