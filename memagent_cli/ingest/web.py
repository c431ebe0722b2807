"""Web pages and feeds: a page's main content with trafilatura, a feed's items with feedparser.

This module also owns the conversion of HTML to plain text (`html_blocks`, `html_to_text`) that
the feed and EPUB readers use: headings kept as "# " lines, paragraphs apart, list items and
table rows one to a line, and nothing of scripts, styles, images or markup.

A page is split into sections at its headings, each a `Place("section", n, heading)`; the text
before the first heading has no place. Nothing is ever fetched: not a page's links, images or
styles, nor a feed's URLs (feedparser is handed an open file, never a string, since it would
fetch a string that looks like a URL and open one that names a file).
"""

from __future__ import annotations

import codecs
import html
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from .base import Part, Place, ReadContext, Warn, short_reason, unreadable

# --------------------------------------------------------------------------------------------
# Decoding


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose mark starts it
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Where a page may declare its encoding: <meta charset>, <meta http-equiv … charset=>, or the
# XML declaration of XHTML. Browsers look only this far (1024 bytes); 4 KiB allows long heads.
_DECLARED = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)|<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""",
    re.IGNORECASE,
)
_DECLARED_SPAN = 4096
# Per the HTML standard, these labels mean windows-1252, and a UTF-16 label in a page read as
# bytes (without a byte-order mark) means UTF-8.
_ENCODING_ALIASES = {"iso8859-1": "cp1252", "latin-1": "cp1252", "ascii": "cp1252", "utf-16": "utf-8"}
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")
# Characters lxml refuses in a string (C0 controls but tab and newlines, and U+FFFE/U+FFFF):
# binary junk in a page is dropped rather than failing the whole page.
_UNPARSABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# Inline base64 data (images, fonts) in attributes and styles: never text, and megabytes of it
# make every later step slower. Its payload is dropped before anything parses the page.
_DATA_URI = re.compile(rb"(data:[A-Za-z0-9/+.;=-]{0,100};base64,)[A-Za-z0-9+/=\s]{256,}")


# A heading's or definition's permalink: Sphinx's and MkDocs' <a class="headerlink">¶</a>, and any
# link to a place in the page whose whole text is one such mark (¶ § # 🔗 ⚓), as Docusaurus,
# rustdoc, Hugo and others write them. The mark is no text of the page; trafilatura keeps it.
_PERMALINK = re.compile(
    r"""<a\s(?=[^>]*(?:\bclass\s*=\s*["']?[^"'>]*\b(?:headerlink|hash-link|anchor-link|doc-anchor|anchorjs-link)\b"""
    r"""|\bhref\s*=\s*["']?\#))[^>]*>\s*(?:¶|§|\#|🔗|⚓|&para;|&sect;|&\#0*182;|&\#0*167;|&\#x0*b6;|&\#x0*a7;|\u200b)?\s*</a\s*>""",
    re.IGNORECASE,
)


def drop_permalinks(text: str) -> str:
    """HTML without its headings' permalink marks (see _PERMALINK)."""
    return _PERMALINK.sub("", text) if "</a" in text or "</A" in text else text


def decode_html(data: bytes, title: str, warn: Warn) -> str:
    """A page's bytes as text: by its byte-order mark, else its declared charset, else UTF-8,
    else the encoding charset-normalizer detects (said in a note). The XML declaration is
    removed (lxml refuses a string that has one) and so are characters lxml cannot take, and
    headings' permalink marks (drop_permalinks)."""
    data = _DATA_URI.sub(rb"\1", data)
    text = None
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            text = data[len(bom) :].decode(encoding, "replace")
            break
    if text is None:
        declared = _declared_encoding(data[:_DECLARED_SPAN])
        if declared is not None:
            try:
                text = data.decode(declared)
            except UnicodeDecodeError:
                warn(f"{title}: bytes invalid in its declared encoding {declared} were replaced")
                text = data.decode(declared, "replace")
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            from .text import detect_encoding

            detected = detect_encoding(data[: 1 << 20]) or "cp1252"
            warn(f"{title} is not UTF-8 and declares no encoding; decoded as {detected} (detected)")
            text = data.decode(detected, "replace")
    text = _XML_DECLARATION.sub("", text, count=1)
    return drop_permalinks(_UNPARSABLE.sub("", text))


def _declared_encoding(head: bytes) -> str | None:
    found = _DECLARED.search(head)
    if found is None:
        return None
    label = (found.group(1) or found.group(2)).decode("ascii").lower()
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return _ENCODING_ALIASES.get(name, name)


# --------------------------------------------------------------------------------------------
# HTML to text


@dataclass(frozen=True)
class Block:
    """A paragraph of converted text. `level` 1-6 marks a heading; `tight` blocks (list items,
    table rows) follow a tight neighbour after one newline instead of a blank line."""

    text: str
    level: int = 0
    tight: bool = False


# Elements whose content is never text a reader sees.
_NOT_TEXT = frozenset(
    "script style noscript template head title svg img picture video audio source track iframe frame frameset "
    "object embed canvas map area input select option datalist textarea button meta link base".split()
)
# What is also left out of a whole page when trafilatura found no main content in it.
_PAGE_CHROME = frozenset({"nav", "header", "footer"})
_BLOCK = frozenset(
    "p div section article main aside blockquote figure figcaption address form fieldset legend details summary "
    "center body html dl dt dd hr header footer nav caption hgroup search dialog".split()
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
# trafilatura's XML names for what HTML calls h1-h6, p, ul/ol, li, table, tr, td, blockquote, br.
_TEI = {"p": "p", "list": "ul", "item": "li", "table": "table", "row": "tr", "cell": "td", "quote": "blockquote", "lb": "br"}
_TEI_NOT_TEXT = frozenset({"graphic"})

_BREAK = "\uffff"  # stands for <br> until white space is collapsed; removed from all input
_BREAKS = re.compile(" ?\uffff ?")
LABEL_LIMIT = 80


class _Renderer:
    """Walks an lxml tree (without recursion: pages nest deeply) into Blocks.

    `tei` reads trafilatura's output tree (head, p, list, item, table, row, cell, lb, code)
    instead of HTML; its text keeps the page's own line breaks, as trafilatura's does.
    """

    def __init__(self, *, tei: bool = False, skip: frozenset[str] = _NOT_TEXT) -> None:
        self.blocks: list[Block] = []
        self._tei = tei
        self._skip = skip
        self._buffer: list[str] = []
        self._heading = 0
        self._heading_element: Any = None
        self._inline = 0  # inside a heading or table cell: blocks within run on
        self._lists: list[int | None] = []  # the next number of each open <ol>, None for <ul>
        self._marker: str | None = None  # the pending "- " of a list item not yet written
        self._tables = 0
        self._cells = 0

    def render(self, root: Any) -> list[Block]:
        from lxml import etree  # type: ignore[import-untyped]

        walker = etree.iterwalk(root, events=("start", "end"))
        names: list[str] = []  # of the open elements; events nest, skipped subtrees included
        skipped = None  # the element whose subtree was skipped: its next event is its own end
        for event, element in walker:
            tag = element.tag
            if not isinstance(tag, str):  # a comment, processing instruction or entity
                if event == "end":
                    if tag is etree.Entity:
                        self._buffer.append(html.unescape(element.text or ""))
                    self._add(element.tail)
                continue
            if event == "end":
                name = names.pop()
                if element is skipped:
                    skipped = None
                else:
                    self._end(name, element)
                self._add(element.tail)
                continue
            name = self._name(element)
            names.append(name)
            if name in self._skip or (not self._tei and element.get("hidden") is not None):
                walker.skip_subtree()
                skipped = element
            elif self._is_preformatted(name, element):
                walker.skip_subtree()
                skipped = element
                self._preformatted(element)
            else:
                self._start(name, element)
                self._add(element.text)
        self._flush()
        return self.blocks

    def _name(self, element: Any) -> str:
        tag: str = element.tag
        if tag[0] == "{":  # XHTML parsed as XML
            tag = tag.rpartition("}")[2]
        tag = tag.lower()
        if not self._tei:
            return tag
        if tag == "head":
            rend = element.get("rend") or "h2"
            return rend if rend in _HEADINGS else "h2"
        if tag in _TEI_NOT_TEXT:
            return "img"
        if tag == "item":
            rend = element.get("rend") or ""
            return rend[:2] if rend.startswith(("dt", "dd")) else "li"
        return _TEI.get(tag, tag if tag == "code" else "span")

    def _is_preformatted(self, name: str, element: Any) -> bool:
        if self._inline:
            return False
        if name == "pre":
            return True
        # trafilatura marks a code block, as against code within a sentence, only by its lines.
        return self._tei and name == "code" and any("\n" in piece for piece in element.itertext())

    def _start(self, name: str, element: Any) -> None:
        if name == "br":
            self._buffer.append(_BREAK)
        elif self._inline:
            if name in _BLOCK or name in _HEADINGS or name in ("li", "tr"):
                self._buffer.append(" ")
            elif name in ("td", "th"):
                self._cell()
        elif name in _HEADINGS:
            self._flush()
            self._heading = _HEADINGS[name]
            self._heading_element = element
            self._inline += 1
        elif name in ("ul", "ol", "dl", "menu"):
            self._flush()
            ordered = name == "ol" or (self._tei and element.get("rend") == "ol")
            self._lists.append(_start_number(element) if ordered else None)
        elif name in ("li", "dt", "dd"):
            self._flush()
            if self._lists:
                number = self._lists[-1]
                self._marker = "  " if name == "dd" else "- " if number is None else f"{number}. "
                if number is not None:
                    self._lists[-1] = number + 1
        elif name == "table":
            self._flush()
            self._tables += 1
        elif name == "tr":
            self._flush()
            self._cells = 0
        elif name in ("td", "th"):
            self._cell()
        elif name in _BLOCK:
            self._flush()

    def _cell(self) -> None:
        if self._cells:
            self._buffer.append(" | ")
        self._cells += 1
        self._inline += 1

    def _end(self, name: str, element: Any) -> None:
        if element is self._heading_element:
            self._inline -= 1
            self._flush()
            self._heading = 0
            self._heading_element = None
        elif name in ("td", "th"):
            self._inline -= 1
        elif self._inline:
            if name in _BLOCK or name in _HEADINGS or name in ("li", "tr"):
                self._buffer.append(" ")
        elif name in ("ul", "ol", "dl", "menu"):
            self._flush()
            if self._lists:
                self._lists.pop()
        elif name == "table":
            self._flush()
            self._tables = max(0, self._tables - 1)
        elif name in _BLOCK or name in ("li", "tr"):
            self._flush()

    def _add(self, text: str | None) -> None:
        if text:
            self._buffer.append(text)

    def _preformatted(self, element: Any) -> None:
        self._flush()
        lines = "".join(element.itertext()).replace(_BREAK, "").split("\n")
        text = "\n".join(line.rstrip() for line in lines).strip("\n")
        if text.strip():
            self.blocks.append(Block(text, tight=bool(self._lists) or bool(self._tables)))

    def _flush(self) -> None:
        raw = "".join(self._buffer)
        self._buffer.clear()
        # str.split() collapses white space (no-break spaces too) many times faster than a regex.
        if self._tei and ("\n" in raw or _BREAK in raw):
            text = "\n".join(" ".join(words) for line in raw.replace(_BREAK, "\n").split("\n") if (words := line.split()))
        else:
            text = " ".join(raw.split())
            if _BREAK in text:
                text = _BREAKS.sub("\n", text).strip()
        if not text:
            return
        if self._heading:
            # Sphinx and others end a heading with a permalink "¶".
            self.blocks.append(Block(" ".join(text.split()).rstrip("¶").rstrip(), level=self._heading))
        elif self._lists:
            indent = "  " * (len(self._lists) - 1)
            marker = self._marker or "  "
            self._marker = None
            self.blocks.append(Block(indent + marker + text.replace("\n", "\n" + indent + "  "), tight=True))
        else:
            self.blocks.append(Block(text, tight=self._tables > 0))


def _start_number(element: Any) -> int:
    try:
        return int(element.get("start") or 1)
    except ValueError:
        return 1


def parse_html(text: str) -> Any:
    """An lxml tree of `text` (from decode_html), or None where there is no document at all."""
    import lxml.html  # type: ignore[import-untyped]
    from lxml import etree

    if not text.strip():
        return None
    try:
        return lxml.html.document_fromstring(text)
    except (etree.ParserError, ValueError):  # "Document is empty"
        return None


def html_blocks(text: str, *, whole_page: bool = False) -> list[Block]:
    """The blocks of an HTML document or fragment. `whole_page` also leaves out the page's
    navigation, header and footer (for a page whose main content was not found)."""
    tree = parse_html(text)
    if tree is None:
        return []
    body = tree.find("body")
    skip = _NOT_TEXT | _PAGE_CHROME if whole_page else _NOT_TEXT
    return _Renderer(skip=skip).render(body if body is not None else tree)


def join_blocks(blocks: list[Block]) -> str:
    """Blocks as text: headings as "## Heading" lines, blocks a blank line apart, list items
    and table rows one to a line."""
    pieces: list[str] = []
    previous: Block | None = None
    for block in blocks:
        if previous is not None:
            pieces.append("\n" if previous.tight and block.tight else "\n\n")
        pieces.append(_shown(block))
        previous = block
    return "".join(pieces)


def html_to_text(text: str) -> str:
    """HTML (a document or a fragment, decoded) as plain text with its headings marked."""
    return join_blocks(html_blocks(drop_permalinks(_UNPARSABLE.sub("", text))))


def _shown(block: Block) -> str:
    return f"{'#' * block.level} {block.text}" if block.level else block.text


def label(text: str) -> str | None:
    """A heading or title as a place's label: one line, at most LABEL_LIMIT characters."""
    text = " ".join(text.split()).rstrip("¶").strip()
    if not text:
        return None
    return text if len(text) <= LABEL_LIMIT else text[: LABEL_LIMIT - 1].rstrip() + "…"


# --------------------------------------------------------------------------------------------
# Web pages


_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_TITLE_SPAN = 1 << 18  # the <title> sits in the head, near the start
_TITLE_SEPARATORS = re.compile(r"\s+[|\-–—·:»]+\s+")
# trafilatura's last resort, when it finds no main content, is the page's text run together
# (navigation included, headings lost). On a page whose result is that flat and this short,
# the page's own visible text, structure kept, serves better.
_FLAT_LIMIT = 500


def read_html(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """A web page's main content, in sections at its headings."""
    text = decode_html(file.read(), context.title, context.warn)
    if not text.strip():
        return
    blocks = _main_content(text)
    if not blocks or _flat_and_short(blocks):
        page = html_blocks(text, whole_page=True)
        if page and (not blocks or len(join_blocks(page)) <= 2 * len(join_blocks(blocks))):
            blocks = page
    if not blocks:
        return
    title = _page_title(text)
    if title and not _names_first_heading(title, blocks):
        blocks.insert(0, Block(title, level=1))
        intro_ends = 1
    else:
        intro_ends = 0
    yield from _sections(blocks, intro_ends)


# What trafilatura is asked for: a page's main text and tables, without comments, images, links
# or metadata.
_EXTRACTION: dict[str, Any] = {
    "include_comments": False,
    "include_tables": True,
    "include_images": False,
    "include_links": False,
    # Recall over precision: a question about the page may turn on a line that a precise
    # extraction drops; a little boilerplate costs less than a lost answer.
    "favor_recall": True,
    "with_metadata": False,
    # The tree is all that is used: "xml" spares the plain-text rendering that the default
    # ("python") makes of it; no formatting spares walking <hi> elements.
    "output_format": "xml",
    "include_formatting": False,
}


def _main_content(text: str) -> list[Block]:
    """The page's main content as found by trafilatura, without comments, images or links."""
    import trafilatura

    _quiet_logs()
    try:
        document = trafilatura.bare_extraction(text, **_EXTRACTION)
    except Exception:  # a library fault on a damaged page: the page's visible text is used instead
        return []
    body = getattr(document, "body", None)
    if body is None:
        return []
    return _Renderer(tei=True, skip=_TEI_NOT_TEXT).render(body)


def _quiet_logs() -> None:
    # trafilatura logs each page it finds no main content in ("discarding data") as a warning,
    # which Python prints raw to stderr; memagent then reads the page's visible text instead.
    logger = logging.getLogger("trafilatura")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.CRITICAL)


def _flat_and_short(blocks: list[Block]) -> bool:
    return all(not b.level and not b.tight for b in blocks) and sum(len(b.text) for b in blocks) < _FLAT_LIMIT


def _page_title(text: str) -> str | None:
    found = _TITLE.search(text, 0, _TITLE_SPAN)
    if found is None:
        return None
    title = " ".join(html.unescape(re.sub(r"<[^>]*>", "", found.group(1))).split())
    return title or None


def _names_first_heading(title: str, blocks: list[Block]) -> bool:
    """Whether the page's title is (or, past a "|" or " - ", holds) its first heading."""
    heading = next((b.text for b in blocks if b.level), None)
    if heading is None:
        return False
    wanted = heading.casefold().rstrip("¶").strip()
    pieces = [title, *_TITLE_SEPARATORS.split(title)]
    return any(piece.casefold().strip() == wanted for piece in pieces)


def _sections(blocks: list[Block], intro_ends: int) -> Iterator[Part]:
    """Parts split at headings: the text before the first heading (a title the reader added
    included) with no place, then one section per heading."""
    number = 0
    start = 0
    for index in range(intro_ends, len(blocks) + 1):
        if index < len(blocks) and not blocks[index].level:
            continue
        if index > start:
            first = blocks[start]
            if start >= intro_ends and first.level:
                number += 1
                place = Place("section", number, label(first.text))
            else:
                place = Place()
            yield Part(join_blocks(blocks[start:index]), place)
        start = index


# --------------------------------------------------------------------------------------------
# Feeds


_HTML_TYPES = ("text/html", "application/xhtml+xml")


def read_feed(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An RSS or Atom feed: its title, then one section per item (title, date, link, text)."""
    import xml.sax

    import feedparser  # type: ignore[import-untyped]

    # An open file, never bytes or a string: feedparser fetches a string that looks like a URL
    # and opens bytes that name an existing file as that file.
    parsed = feedparser.parse(file)
    feed = parsed.get("feed", {})
    entries = parsed.get("entries", [])
    head = _feed_head(feed)
    if not head and not entries:
        problem = parsed.get("bozo_exception")
        reason = f"it is not a readable feed ({short_reason(problem)})" if problem else "it holds no feed items"
        raise unreadable(context.title, "feed", reason, "Check that it is a complete RSS or Atom feed")
    if parsed.get("bozo") and isinstance(parsed.get("bozo_exception"), xml.sax.SAXException):
        context.warn(
            f"{context.title}: the feed is not well-formed XML ({short_reason(parsed['bozo_exception'])}); "
            "read what a lenient parse found"
        )
    if head:
        yield Part(head, Place())
    for number, entry in enumerate(entries, 1):
        title = _plain(entry.get("title_detail"), entry.get("title", ""))
        yield Part(_entry_text(entry, title), Place("section", number, label(title)))


def _feed_head(feed: Any) -> str:
    lines = []
    title = _plain(feed.get("title_detail"), feed.get("title", ""))
    if title:
        lines.append(f"# {title}")
    subtitle = _plain(feed.get("subtitle_detail"), feed.get("subtitle", ""))
    if subtitle:
        lines.append(subtitle)
    return "\n\n".join(lines)


def _entry_text(entry: Any, title: str) -> str:
    lines = []
    if title:
        lines.append(f"# {title}")
    date = entry.get("published") or entry.get("updated")
    if date:
        lines.append(f"Date: {' '.join(str(date).split())}")
    link = entry.get("link")
    if link:
        lines.append(f"Link: {link}")
    bodies = []
    for content in entry.get("content") or [entry.get("summary_detail") or {"value": entry.get("summary", "")}]:
        text = _plain(content, content.get("value", ""))
        if text and text not in bodies:
            bodies.append(text)
    head = "\n".join(lines)
    return "\n\n".join([head, *bodies] if head else bodies)


def _plain(detail: Any, value: str) -> str:
    """A feed's text field as plain text: HTML converted, plain text as it is."""
    kind = (detail or {}).get("type", "text/plain")
    if kind in _HTML_TYPES:
        return html_to_text(value)
    return value.strip()
