"""Zip archives, read like folders: listing a zip's members within bounds, and extracting one.

A zip bomb costs neither the disk nor the memory: the members' total uncompressed size, their
number, each member's compression ratio and the nesting of archives in archives are bounded, and a
member is extracted to an anonymous temporary file (in memory up to SPOOL_BYTES), never to a path
of its own name. A member whose name would climb out of the archive is never read. `sources`
walks the listing with the folder rules; `open_member` opens a document inside (nested) archives.
"""

from __future__ import annotations

import contextlib
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO

from ..errors import MemagentError
from .base import printable, short_reason

# Archives: what is expanded at most, so a zip bomb costs neither the disk nor the memory. A
# member is extracted to an anonymous temporary file (never to a path of its name), in memory up
# to SPOOL_BYTES.
MAX_DEPTH = 3  # an archive inside an archive inside an archive, and no deeper
MAX_BYTES = 4 << 30  # the uncompressed size of all the members of one archive
MAX_RATIO = 200  # uncompressed / compressed, for a member past RATIO_FLOOR
RATIO_FLOOR = 1 << 20
MAX_MEMBERS = 100_000
SPOOL_BYTES = 32 << 20


class ArchiveRefused(Exception):
    """An archive (or a member) past the bounds, or not a zip: said in a note or an error."""

    def __init__(self, reason: str, hint: str = "Check that it is a complete zip archive") -> None:
        super().__init__(reason)
        self.hint = hint


@dataclass
class Listing:
    archive: zipfile.ZipFile
    infos: list[zipfile.ZipInfo]  # the files, sorted by name


def listing(file: IO[bytes], title: str) -> Listing:
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ArchiveRefused(f"not a readable zip archive ({short_reason(exc)})") from exc
    infos = sorted((i for i in archive.infolist() if not i.is_dir()), key=lambda i: i.filename)
    if len(infos) > MAX_MEMBERS:
        archive.close()
        raise ArchiveRefused(
            f"{len(infos):,} files in one archive, over the {MAX_MEMBERS:,} memagent opens",
            hint="Extract the documents you want read and name them",
        )
    total = sum(i.file_size for i in infos)
    if total > MAX_BYTES:
        archive.close()
        raise ArchiveRefused(
            f"{total / 2**30:.1f} GiB uncompressed, over the {MAX_BYTES >> 30} GiB memagent expands (a zip bomb?)",
            hint="Extract the documents you want read and name them",
        )
    return Listing(archive, infos)


def unsafe_name(name: str) -> bool:
    """A member name that would point outside the archive if it were ever used as a path:
    absolute, with a drive, with "..", or with backslashes. memagent writes no member anywhere,
    but such a name marks a hostile archive, so the member is not read either."""
    parts = name.split("/")
    return name.startswith("/") or "\\" in name or ".." in parts or (len(name) > 1 and name[1] == ":") or "\0" in name


def too_compressed(info: zipfile.ZipInfo, floor: int = RATIO_FLOOR) -> bool:
    """Whether a member unpacks past `floor` bytes at more than MAX_RATIO to 1: a zip bomb's mark
    (Office packages, whose XML compresses well, pass a higher floor)."""
    return info.file_size > floor and info.file_size > MAX_RATIO * max(info.compress_size, 1)


def member_problem(info: zipfile.ZipInfo) -> str | None:
    if info.flag_bits & 0x1:
        return "encrypted"
    if too_compressed(info):
        return f"compressed over {MAX_RATIO}:1, a zip bomb?"
    return None


@contextlib.contextmanager
def extract(archive: zipfile.ZipFile, info: zipfile.ZipInfo, title: str) -> Iterator[IO[bytes]]:
    """The member's bytes in an anonymous temporary file (memory up to SPOOL_BYTES), seekable,
    as the readers need. zipfile stops at the declared size and checks the CRC, so a member
    cannot expand past what the bounds were checked against."""
    problem = member_problem(info)
    if problem is not None:
        raise ArchiveRefused(problem)
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    try:
        try:
            with archive.open(info) as member:
                while block := member.read(1 << 20):
                    spool.write(block)
        except (OSError, zipfile.BadZipFile, NotImplementedError, RuntimeError, EOFError) as exc:
            raise MemagentError(
                f"Cannot read {title} from its archive: {short_reason(exc)}",
                hint="Check that the archive is complete and undamaged",
            ) from exc
        spool.seek(0)
        yield spool
    finally:
        spool.close()


@contextlib.contextmanager
def open_member(file: IO[bytes], names: Sequence[str], title: str, shown: str) -> Iterator[IO[bytes]]:
    """The document at `names` (one per level of nesting) inside the zip `file`, titled `title`;
    `shown` names it in errors. An archive that changed since it was listed is one line."""
    with contextlib.ExitStack() as stack:
        current = file
        for name in names:
            try:
                archive = stack.enter_context(zipfile.ZipFile(current))
                info = archive.getinfo(name)
                title = f"{title}/{printable(name)}"
                current = stack.enter_context(extract(archive, info, title))
            except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
                raise MemagentError(
                    f"Cannot read {shown}: {short_reason(exc)}", hint="Check that the archive did not change"
                ) from exc
            except ArchiveRefused as refused:
                raise MemagentError(f"{shown}: {refused}", hint=refused.hint) from None
        yield current
