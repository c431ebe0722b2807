"""EPUB books with ebooklib: the title and authors, then the chapters in reading (spine) order.

Each spine document with text is a `Place("chapter", n, title)`: the title of the table of
contents' entry that points at it (nav document or NCX), else its first heading. Chapter HTML
becomes plain text through web.html_blocks, headings kept. Pages without text (a cover image)
are left out, and image, font and media bytes are never read at all.

A book with DRM (META-INF/encryption.xml encrypting content, beyond the font obfuscation that
EPUB allows) is refused by name, as are books whose zip or package file is missing or damaged.
"""

from __future__ import annotations

import posixpath
import re
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO
from urllib.parse import unquote

from ..errors import MemagentError
from .base import Part, Place, ReadContext, count, short_reason, unreadable
from .web import decode_html, html_blocks, join_blocks, label

_WHAT = "EPUB"
_DAMAGED = "Check that it is a complete, undamaged EPUB"
_CONTAINER = "META-INF/container.xml"
_ENCRYPTION = "META-INF/encryption.xml"
_PACKAGE_TYPE = "application/oebps-package+xml"
_DOCUMENT_TYPES = frozenset({"application/xhtml+xml", "text/html"})

# The font obfuscation of the EPUB (IDPF) and Adobe specifications: a font scrambled so it
# cannot be lifted out of the book, which leaves the text readable. Anything else is DRM.
_FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})
_FONT_ENDINGS = (".otf", ".ttf", ".woff", ".woff2", ".eot", ".pfb", ".pfm")
# Files whose bytes are never text: ebooklib would read every one of them into memory.
_NOT_TEXT_ENDINGS = _FONT_ENDINGS + (
    ".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".avif", ".jxl",
    ".mp3", ".mp4", ".m4a", ".m4v", ".aac", ".ogg", ".oga", ".opus", ".wav", ".webm", ".mov",
)  # fmt: skip
_XMLENC = "{http://www.w3.org/2001/04/xmlenc#}"
_CONTAINER_NS = "{urn:oasis:names:tc:opendocument:xmlns:container}"


def read_epub(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    _check_book(file, context.title)
    file.seek(0)
    book, missing = _load(file, context.title)
    head = _metadata(book)
    if head:
        yield Part(head, Place())
    titles = _toc_titles(book.toc)
    by_id = {item.id: item for item in book.get_items()}  # get_item_with_id searches the whole list
    number = 0
    unlisted = 0
    seen: set[str] = set()  # documents read: spine entries naming places in one ("ch1.xhtml#s2") read it once
    for idref, _linear in book.spine:  # non-linear documents (notes, answers) are read too, in place
        item = by_id.get(idref)
        if item is None:
            unlisted += 1
            continue
        if getattr(item, "media_type", None) not in _DOCUMENT_TYPES or not item.content:
            continue
        document = _path(item.file_name)
        if document in seen:
            continue
        seen.add(document)
        try:
            blocks = html_blocks(decode_html(item.content, context.title, context.warn))
        except Exception as exc:  # one damaged chapter should not cost the rest of the book
            context.warn(f"{context.title}: skipped {item.file_name} ({short_reason(exc)})")
            continue
        if not blocks:
            continue
        number += 1
        heading = next((b.text for b in blocks if b.level), None)
        yield Part(join_blocks(blocks), Place("chapter", number, label(titles.get(_path(item.file_name)) or heading or "")))
    if unlisted:
        context.warn(f"{context.title}: skipped {count(unlisted, 'spine entry')} naming no document in the book")
    if missing:
        context.warn(
            f"{context.title}: {count(len(missing), 'file')} listed in the book missing from it: {', '.join(missing[:3])}"
        )
    if number == 0:
        context.warn(f"{context.title}: no chapter has text (a book of images?)")


def _check_book(file: BinaryIO, title: str) -> None:
    """Refuse, with a reason, what ebooklib would fail on obscurely or read as garbage: not a zip,
    no container, a missing package file, DRM."""
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise unreadable(title, _WHAT, f"it is not a complete zip archive ({short_reason(exc)})", _DAMAGED) from exc
    with archive:
        names = set(archive.namelist())
        if _ENCRYPTION in names and _drm(_read_member(archive, _ENCRYPTION, title)):
            raise unreadable(title, _WHAT, "it is DRM-protected", "memagent cannot read DRM-protected books; use a DRM-free copy")
        if _CONTAINER not in names:
            raise unreadable(title, _WHAT, f"it has no {_CONTAINER} (is it an EPUB?)", _DAMAGED)
        package = _package_path(_read_member(archive, _CONTAINER, title))
        if package is None:
            raise unreadable(title, _WHAT, f"its {_CONTAINER} names no package (.opf) file", _DAMAGED)
        if posixpath.normpath(package) not in names:
            raise unreadable(title, _WHAT, f"its package file {package} is missing", _DAMAGED)


def _read_member(archive: zipfile.ZipFile, name: str, title: str) -> bytes:
    try:
        return archive.read(name)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, NotImplementedError, RuntimeError) as exc:
        raise unreadable(title, _WHAT, f"{name} is damaged ({short_reason(exc)})", _DAMAGED) from exc


def _xml(data: bytes) -> Any:
    """A small XML file of the book's (container, encryption list) parsed without DTDs, entities
    or network; None where it is not XML."""
    from lxml import etree  # type: ignore[import-untyped]

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, recover=True)
    try:
        return etree.fromstring(data, parser)
    except (etree.XMLSyntaxError, ValueError):
        return None


def _drm(encryption: bytes) -> bool:
    """Whether META-INF/encryption.xml encrypts anything but fonts with font obfuscation."""
    root = _xml(encryption)
    if root is None:
        return False  # unreadable: if the content is encrypted, reading shows it
    for data in root.iter(f"{_XMLENC}EncryptedData"):
        method = data.find(f"{_XMLENC}EncryptionMethod")
        algorithm = method.get("Algorithm", "") if method is not None else ""
        if algorithm in _FONT_OBFUSCATION:
            continue
        reference = data.find(f"{_XMLENC}CipherData/{_XMLENC}CipherReference")
        uri = unquote(reference.get("URI", "")) if reference is not None else ""
        if not uri.lower().endswith(_FONT_ENDINGS):
            return True
    return False


def _package_path(container: bytes) -> str | None:
    # As ebooklib: the first rootfile of the package media type.
    root = _xml(container)
    if root is None:
        return None
    for rootfile in root.iter(f"{_CONTAINER_NS}rootfile"):
        if rootfile.get("media-type") == _PACKAGE_TYPE and rootfile.get("full-path"):
            return str(rootfile.get("full-path"))
    return None


def _load(file: BinaryIO, title: str) -> tuple[Any, list[str]]:
    """The book, read by ebooklib from the open file (no copy to disk: zipfile reads a file
    object), and the names of listed files missing from the zip."""
    from ebooklib import epub  # type: ignore[import-untyped]

    missing: list[str] = []
    read: dict[str, bytes] = {}  # by name: items naming places in one document share its bytes

    class Reader(epub.EpubReader):  # type: ignore[misc]
        """ebooklib's reader, without reading media bytes and tolerating a broken table of
        contents or files missing from the zip (real books have them; the text is still there)."""

        def _load(self) -> None:
            # ebooklib's own _load also opens a folder as a book, and before 0.20 it stats its
            # argument as a path, which fails for a file object: the zip is opened here instead.
            self.zf = zipfile.ZipFile(self.file_name)
            try:
                self._load_container()
                self._load_opf_file()
            finally:
                self.zf.close()

        def read_file(self, name: str) -> bytes:
            # A manifest item may name a place in a document ("ch1.xhtml#s2", as SiSU's books
            # do for every section): that is the document, read once (see read_epub).
            name = name.partition("#")[0]
            if name.lower().endswith(_NOT_TEXT_ENDINGS):
                return b""
            if name in read:
                return read[name]
            try:
                data: bytes = super().read_file(name)
            except KeyError:
                missing.append(name)
                data = b""
            read[name] = data
            return data

        def _load_spine(self) -> None:
            try:
                super()._load_spine()  # sets the spine, then reads the NCX
            except Exception:
                self.book.toc = []

        def _parse_ncx(self, data: bytes) -> None:
            try:
                super()._parse_ncx(data)
            except Exception:
                self.book.toc = []

        def _parse_nav(self, data: bytes, base_path: str, navtype: str = "toc") -> None:
            try:
                super()._parse_nav(data, base_path, navtype)
            except Exception:
                if navtype == "toc":
                    self.book.toc = []

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ebooklib's notices about its own future defaults
            # ignore_ncx: an EPUB 3 book's nav document is its table of contents; the NCX is read
            # only for a book without one (EPUB 2).
            book = Reader(file, {"ignore_ncx": True}).load()
    except MemagentError:
        raise
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as exc:
        raise unreadable(title, _WHAT, f"it is damaged ({short_reason(exc)})", _DAMAGED) from exc
    except Exception as exc:  # ebooklib raises what its parsing meets (EpubException, AttributeError…)
        raise unreadable(title, _WHAT, short_reason(exc), _DAMAGED) from exc
    return book, missing


def _metadata(book: Any) -> str:
    lines = []
    titles = [t for t in (_text(v) for v, _ in book.get_metadata("DC", "title")) if t]
    if titles:
        lines.append(f"Title: {titles[0]}")
    authors = [a for a in (_text(v) for v, _ in book.get_metadata("DC", "creator")) if a]
    if authors:
        lines.append(f"{'Author' if len(authors) == 1 else 'Authors'}: {', '.join(authors)}")
    return "\n".join(lines)


def _text(value: Any) -> str:
    return " ".join(str(value or "").split())


def _path(href: str) -> str:
    """A book-relative path as the manifest names it, for matching table-of-contents links."""
    return posixpath.normpath(unquote(href.partition("#")[0])) if href else ""


_FRAGMENT = re.compile(r"#.*$")


def _toc_titles(toc: Any) -> dict[str, str]:
    """Document path -> the title of the first table-of-contents entry pointing at it; an entry
    naming the whole document wins over one naming a place inside it."""
    whole: dict[str, str] = {}
    inside: dict[str, str] = {}
    stack = [toc]
    entries: list[tuple[str, str]] = []
    while stack:  # depth-first, in document order, without recursion
        node = stack.pop()
        if isinstance(node, (list, tuple)):
            stack.extend(reversed(node))
            continue
        href = getattr(node, "href", None)
        title = _text(getattr(node, "title", None))
        if href and title:
            entries.append((href, title))
    for href, title in entries:
        target = whole if not _FRAGMENT.search(href) else inside
        target.setdefault(_path(href), title)
    return {**inside, **whole}
