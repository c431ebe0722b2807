"""Which formats memagent reads, how a file's format is told, and which reader reads it.

The table is the one place a format is named: its kind (as `Source.kind` and the JSON say it),
its file-name endings, the words an error uses for it, and the reader (module and function,
imported only when a document of that kind is read, so `memagent --help` pays for none).
"""

from __future__ import annotations

import codecs
import importlib
import os
import re
from dataclasses import dataclass

from .base import Reader


@dataclass(frozen=True)
class Format:
    kind: str
    what: str  # "Word file": how errors and notes name a document of this kind
    endings: tuple[str, ...]
    reader: str  # "module:function" in this package


FORMATS: tuple[Format, ...] = (
    Format("text", "text file", (), "text:read_text"),
    Format("pdf", "PDF", (".pdf",), "pdf:read_pdf"),
    Format("docx", "Word file", (".docx", ".docm"), "word:read_docx"),
    Format("odt", "OpenDocument text", (".odt",), "word:read_odt"),
    Format("pptx", "PowerPoint file", (".pptx", ".pptm"), "slides:read_pptx"),
    Format("odp", "OpenDocument presentation", (".odp",), "slides:read_odp"),
    Format("xlsx", "Excel file", (".xlsx", ".xlsm"), "sheets:read_xlsx"),
    Format("xls", "Excel 97-2003 file", (".xls",), "sheets:read_xls"),
    Format("ods", "OpenDocument spreadsheet", (".ods",), "sheets:read_ods"),
    Format("rtf", "RTF file", (".rtf",), "word:read_rtf"),
    Format("epub", "EPUB", (".epub",), "ebook:read_epub"),
    Format("html", "web page", (".html", ".htm", ".xhtml"), "web:read_html"),
    Format("feed", "feed", (".rss", ".atom"), "web:read_feed"),
    Format("mail", "e-mail", (".eml",), "mail:read_eml"),
    Format("msg", "Outlook message", (".msg",), "mail:read_msg"),
    Format("ipynb", "notebook", (".ipynb",), "notebook:read_notebook"),
    Format("man", "manual page", (".man",), "man:read_man"),
    Format("image", "image", (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"), "ocr:read_image"),
)

BY_KIND = {f.kind: f for f in FORMATS}
_BY_ENDING = {ending: f.kind for f in FORMATS for ending in f.endings}

# Archives are not read by a reader: they are expanded into the documents inside them.
ARCHIVE_ENDINGS = (".zip",)
ARCHIVE = "zip"

# Older binary Office formats no well-kept library reads: said by name, with the ending to save as.
LEGACY = {".doc": ("Word 97-2003", ".docx"), ".ppt": ("PowerPoint 97-2003", ".pptx")}

_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # the compound-file header of .xls, .msg, .doc, .ppt
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*")  # "BM" (BMP) is too weak: text can begin so
_WIDE_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE)
_HTML_HEAD = re.compile(rb"^\s*(<\?xml[^>]*>\s*)?(<!--.*?-->\s*)*<(!doctype\s+html|html[\s>])", re.IGNORECASE | re.DOTALL)
# A manual page: a section ending (tmux.1, printf.3p, ssl.1ssl, Tcl's .n) and troff that sets up
# a page (.TH for man(7), .Dd/.Dt for mdoc(7), .so for a page that points at another).
_MAN_ENDING = re.compile(r"\.(?:[1-9][a-z0-9]{0,8}|n|l)$", re.IGNORECASE)
_MAN_HEAD = re.compile(rb"^[.'][ \t]*(?:TH|Dd|Dt|SH|Sh|so)\b", re.MULTILINE)
_FEED_HEAD = re.compile(
    rb"^\s*(<\?xml[^>]*>\s*)?(<\?xml-stylesheet[^>]*>\s*)?(<!--.*?-->\s*)*<(rss[\s>]|feed[\s>]|rdf:RDF[\s>])", re.DOTALL
)


def ending(name: str) -> str:
    return os.path.splitext(name)[1].lower()


def detect(name: str, head: bytes) -> str | None:
    """The kind of a document from its name and first bytes; "zip" for an archive; None for
    data memagent does not read (binary files of other kinds)."""
    end = ending(name)
    if head.startswith(b"%PDF-"):
        return "pdf"
    if end in ARCHIVE_ENDINGS:
        return ARCHIVE
    kind = _BY_ENDING.get(end)
    if kind is not None:
        return kind
    if head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP"):
        return "image"
    if head.startswith(b"{\\rtf"):
        return "rtf"
    if looks_binary(head):
        return None  # the OLE and zip families are known only by their endings
    if _MAN_ENDING.search(name) and _MAN_HEAD.search(head):
        return "man"
    if _HTML_HEAD.match(head):
        return "html"
    if _FEED_HEAD.match(head):
        return "feed"
    return "text"


def looks_binary(head: bytes) -> bool:
    """A NUL byte marks binary data, except in UTF-16/32 text, where most characters have one."""
    return b"\0" in head and not head.startswith(_WIDE_BOMS)


def is_tar(head: bytes) -> bool:
    """Whether `head` starts a tar archive (POSIX or GNU: "ustar" at offset 257)."""
    return head[257:262] == b"ustar"


def legacy_format(name: str, head: bytes) -> tuple[str, str] | None:
    """("Word 97-2003", ".docx") for a .doc (or .ppt) file, which memagent cannot read: its
    format and what to save it as; else None."""
    if head.startswith(_OLE):
        return LEGACY.get(ending(name))
    return None


def reader(kind: str) -> Reader:
    """The reading function for `kind`, importing its module now."""
    module, _, function = BY_KIND[kind].reader.partition(":")
    loaded = importlib.import_module(f"{__package__}.{module}")
    found: Reader = getattr(loaded, function)
    return found


def what(kind: str) -> str:
    known = BY_KIND.get(kind)
    return known.what if known else "file"
