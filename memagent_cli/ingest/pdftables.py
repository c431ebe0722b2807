"""Tables on a PDF page as rows, cells apart by " | ", as Word, ODT and tbl tables are given
(docs/FORMATS.md, "PDF tables").

A page is searched for tables only when its drawing has ruling lines that could bound one
(`Rules`, collected while pypdf extracts the page's text, at no cost worth measuring): two
horizontal rules of the same extent, with text between them that is not mostly monospaced and
not closed into a box by two vertical rules. Then PDFium (pypdfium2, which memagent already uses
to highlight quotes) gives the page's words with their boxes, and a table is:

- **where**: a run of horizontal rules of one extent (booktabs' top, mid and bottom rules, a grid's
  row lines, LibreOffice's borders), split where text runs wider than the rules between two of them
  (two tables on a page, a paragraph between);
- **its columns**: the gaps that every line of two cells or more leaves free, and vertical rules;
- **its rows**: its text lines, a line joined to the row above where it carries on that row's cells
  (a cell that wraps), never across a rule; in a grid, what lies between two rules.

A region with fewer than two columns in two lines, set in a monospaced font (a framed code
listing), run across by its text (a paragraph) or mostly empty (indented pseudocode) is not a
table. The table's text replaces the page text's lines that stood in its box (`place`), at the
place of the first of them; the rest of the page keeps pypdf's text. Boxes are in points from the
page's top left (y down), as `top` and `bottom`; pypdf's rules and pieces are in page space (y up).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MIN_RULE = 30.0  # points: a horizontal rule shorter than this is an underline, not a table's
THIN = 3.0  # points: a rectangle at most this thick is a rule
MIN_VRULE = 5.0  # points: TeX draws a vertical rule per row, one row high
TWO_LINES = 16.0  # points: a table's first and last rules are at least two lines of text apart
BACKGROUND = 0.8  # of the page's height: a rectangle this tall is its background or clip, not a box
SAME = 3.0  # points: rules whose ends are this close have one extent
WORD_GAP = 1.5  # points: a gap wider than this parts two words (TeX's spaces shrink to 2 points)
GUTTER = 6.0  # points: the least gap between two columns (TeX's \tabcolsep is 6 pt a side)
STRAY = 0.2  # of a table's lines that may run across its columns (headings spanning them)
FILLED = 0.5  # of a table's cells that hold text, at least
NUMBER = re.compile(r"[-+−]?[$€£]?[\d.,]+%?")
RULED_ROWS = 4  # full rules that make a table ruled between its rows (three bands or more)
PROSE = 75  # characters: a piece of text this long is a paragraph's line, not a table cell's
CODE = 0.8  # of a region's characters in a monospaced font that make it code, not a table
MONOSPACED = re.compile(r"mono|courier|typewriter|consol|cmtt|lmtt|sftt|ectt|tctt|txtt", re.IGNORECASE)
LOST = 0.02  # of the characters a table's box held in pypdf's text that its rows may lack
MARK = "\x00"  # a table's place in a page's text: MARK, its index, MARK, on a line of its own


@dataclass(frozen=True)
class Table:
    """A table found on a page: its box (points from the page's top left) and its rows of cells,
    a wrapped cell's lines apart by "\\n"."""

    x0: float
    top: float
    x1: float
    bottom: float
    rows: tuple[tuple[str, ...], ...]

    def holds(self, x: float, top: float) -> bool:
        """Whether a line of text whose baseline starts at x, top is in the table: between its
        first and last rules (a line's baseline just above the first is not)."""
        return self.x0 - SAME <= x <= self.x1 + SAME and self.top < top < self.bottom


@dataclass
class Rules:
    """pypdf's `visitor_operand_before`: the page's thin rectangles and straight lines, as
    horizontal (x0, x1, y) and vertical (x, y0, y1) rules in page space."""

    horizontal: list[tuple[float, float, float]] = field(default_factory=list)
    vertical: list[tuple[float, float, float]] = field(default_factory=list)
    rectangles: list[tuple[float, float, float, float]] = field(default_factory=list)  # x0, y0, x1, y1
    _at: tuple[float, float] | None = None

    def __call__(self, operator: bytes, operands: Sequence[Any], cm: Sequence[float], tm: Sequence[float]) -> None:
        try:
            if operator == b"re" and len(operands) == 4:
                x, y, w, h = (float(v) for v in operands)
                (a, b), (c, d) = _apply(cm, x, y), _apply(cm, x + w, y + h)
                if abs(c - a) >= MIN_RULE and abs(d - b) >= TWO_LINES:  # a box, a background or a clip
                    self.rectangles.append((min(a, c), min(b, d), max(a, c), max(b, d)))
                else:
                    self._add((a, b), (c, d))
            elif operator == b"m" and len(operands) == 2:
                self._at = _apply(cm, float(operands[0]), float(operands[1]))
            elif operator == b"l" and len(operands) == 2 and self._at is not None:
                to = _apply(cm, float(operands[0]), float(operands[1]))
                self._add(self._at, to)
                self._at = to
        except (TypeError, ValueError):  # an operand that is not a number: not a rule
            pass

    def _add(self, a: tuple[float, float], b: tuple[float, float]) -> None:
        width, height = abs(b[0] - a[0]), abs(b[1] - a[1])
        if height <= THIN and width >= MIN_RULE:
            self.horizontal.append((min(a[0], b[0]), max(a[0], b[0]), (a[1] + b[1]) / 2))
        elif width <= THIN and height >= MIN_VRULE:
            self.vertical.append(((a[0] + b[0]) / 2, min(a[1], b[1]), max(a[1], b[1])))

    def promising(self, pieces: Pieces, height: float) -> bool:
        """Whether the rules could bound a table on a page `height` high: two horizontal ones of one
        extent, two lines of text apart or more (a box framing one line is not a table), with text
        between them that is neither mostly code nor prose (`_code`), that are not a box (closed
        by two vertical rules, none inside: a framed note, a diagram's box) nor a page's frame (no
        rule between them, half the page apart: the rules under a running head and over a foot)."""
        rules = sorted(self.horizontal)
        for i, (x0, x1, y) in enumerate(rules):
            for a0, a1, b in rules[i + 1 :]:
                if a0 - x0 > SAME:
                    break
                if abs(a1 - x1) > SAME or abs(b - y) < TWO_LINES:
                    continue
                low, high = min(y, b), max(y, b)
                if (
                    not _code(pieces, x0, x1, low, high)
                    and not self._box(x0, x1, low, high, height)
                    and not self._frame(x0, x1, low, high, height)
                ):
                    return True
        return False

    def _inner(self, x0: float, x1: float, low: float, high: float) -> bool:
        """Whether a vertical rule stands between x0 and x1 in the band from low to high."""
        return any(x0 + SAME < v < x1 - SAME and v0 < high and low < v1 for v, v0, v1 in self.vertical)

    def _box(self, x0: float, x1: float, low: float, high: float, height: float) -> bool:
        """Whether the rules at low and high from x0 to x1 are a box's, or in one: two vertical rules
        close them, or a rectangle (smaller than the page: not its background or clip) holds them,
        and no vertical rule parts them inside (rules across a box make it no table either: it has
        one column). A diagram's boxes, a framed note."""

        def side(x: float) -> bool:
            return any(abs(v - x) <= SAME and v0 <= low + SAME and v1 >= high - SAME for v, v0, v1 in self.vertical)

        held = any(
            a - SAME <= x0 and x1 <= c + SAME and b - SAME <= low and high <= d + SAME and d - b < BACKGROUND * height
            for a, b, c, d in self.rectangles
        )
        return (held or (side(x0) and side(x1))) and not self._inner(x0, x1, low, high)

    def _frame(self, x0: float, x1: float, low: float, high: float, height: float) -> bool:
        """Whether the rules at low and high frame a page's text: half its height apart or more,
        and no rule between them."""
        across = any(a0 < x1 and x0 < a1 and low + SAME < at < high - SAME for a0, a1, at in self.horizontal)
        return high - low >= height / 2 and not across and not self._inner(x0, x1, low, high)


@dataclass
class Pieces:
    """pypdf's `visitor_text`: the page text's pieces in order, each with where it begins in page
    space (None for the line breaks pypdf adds, which have no place); and those with a place and
    text, with whether their font is monospaced."""

    pieces: list[tuple[str, float, float] | tuple[str, None, None]] = field(default_factory=list)
    placed: list[tuple[str, float, float, bool]] = field(default_factory=list)

    def __call__(self, text: str, cm: Sequence[float], tm: Sequence[float], font: Any = None, *_: Any) -> None:
        if not text:
            return
        if not any(tm) and not any(cm[4:]):
            self.pieces.append((text, None, None))
            return
        x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
        y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
        self.pieces.append((text, x, y))
        if text.strip():
            name = str(font.get("/BaseFont", "")) if hasattr(font, "get") else ""
            self.placed.append((text, x, y, MONOSPACED.search(name) is not None))


def _apply(cm: Sequence[float], x: float, y: float) -> tuple[float, float]:
    return (cm[0] * x + cm[2] * y + cm[4], cm[1] * x + cm[3] * y + cm[5])


def place(pieces: Pieces, tables: Sequence[Table], height: float) -> str | None:
    """The page's text with the pieces that begin in a table's box left out and, where the first
    of them stood, a line MARK index MARK for the table. `height` is the page's (a table's `top` is
    `height - y`). None where the tables do not hold the text left out (more than LOST of its
    characters): the page is better read as it was than with text lost."""
    out: list[str] = []
    left_out: list[str] = []
    pending: list[str] = []  # white space, kept unless a table's pieces are on both sides of it
    placed: set[int] = set()
    inside = False
    for text, x, y in pieces.pieces:
        where = None
        if x is not None and y is not None and text.strip():
            where = next((k for k, table in enumerate(tables) if table.holds(x, height - y)), None)
        if not text.strip() or x is None:
            pending.append(text)
            continue
        if where is None:
            out += pending
            out.append(text)
            inside = False
        else:
            left_out.append(text)
            if where not in placed:
                out += [] if inside else pending
                out.append(f"\n{MARK}{where}{MARK}\n")
                placed.add(where)
            inside = True
        pending = []
    out += pending
    held = _characters(cell for table in tables for row in table.rows for cell in row)
    gone = _characters(left_out)
    if sum(max(0, n - held[c]) for c, n in gone.items()) > max(2, LOST * sum(gone.values())):
        return None
    return re.sub(rf"\n+({MARK}\d+{MARK})\n+", r"\n\1\n", "".join(out)).lstrip("\n")


def _characters(texts: Iterable[str]) -> Counter[str]:
    """The characters of `texts` but white space and control characters (which the model never
    reads: base.without_controls), in NFKC (pypdf and PDFium give ligatures alike or not)."""
    return Counter(
        c for text in texts for c in unicodedata.normalize("NFKC", text) if not c.isspace() and unicodedata.category(c) != "Cc"
    )


def render(table: Table, mend: Any) -> str:
    """The table as rows, cells apart by " | ", each cell made one line by `mend` (its hyphens
    joined, leader dots shortened, its lines joined with spaces)."""
    rows = []
    for row in table.rows:
        cells = [mend(cell) for cell in row]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------
# Finding tables in PDFium's words


def find_tables(textpage: Any, height: float, rules: Rules, pieces: Pieces) -> list[Table]:
    """The tables on a page: its `rules` and text `pieces` as pypdf's extraction met them, its
    words from PDFium's text page (`textpage`, pypdfium2's), `height` the page's."""
    words = _words(textpage, height)
    horizontal = [{"x0": x0, "x1": x1, "top": height - y} for x0, x1, y in _joined(rules.horizontal)]
    vertical = [
        {"x0": x, "top": height - y1, "bottom": height - y0}
        for x, y0, y1 in _joined([(y0, y1, x) for x, y0, y1 in rules.vertical], vertical=True)
    ]
    tables: list[Table] = []
    for x0, x1, tops in _regions(horizontal, words):
        if any(t.x0 < x1 and x0 < t.x1 and t.top <= tops[-1] and tops[0] <= t.bottom for t in tables):
            continue
        if _code(pieces, x0, x1, height - tops[-1], height - tops[0]):
            continue
        table = _table(x0, x1, tops, horizontal, vertical, words)
        if table is not None:
            tables.append(table)
    return tables


def _joined(segments: Iterable[tuple[float, float, float]], vertical: bool = False) -> list[Any]:
    """Rules (start, end, at) as whole rules: pieces on one line that meet or overlap are one (a
    grid drawn cell by cell, TeX's vertical rules drawn row by row). Given back as (start, end, at),
    or for `vertical` as (at, start, end)."""
    out: list[list[float]] = []
    for a, b, at in sorted(segments, key=lambda s: (round(s[2]), s[0])):
        last = out[-1] if out else None
        if last is not None and abs(last[2] - at) <= 1 and a <= last[1] + 2:
            last[1] = max(last[1], b)
        else:
            out.append([a, b, at])
    return [(at, a, b) if vertical else (a, b, at) for a, b, at in out]


def _words(textpage: Any, height: float) -> list[dict[str, Any]]:
    """The page's words from PDFium's characters: a word ends at white space (PDFium's own, and the
    spaces it adds where it sees a gap), at a gap wider than WORD_GAP, or where the next character
    stands on another line. Boxes as x0, x1, and top and bottom from the page's top; PDFium's mark
    for a hyphen at a line's end (U+0002, which its text range gives as U+FFFE) is a hyphen."""
    import ctypes

    import pypdfium2.raw as pdfium_c  # type: ignore[import-untyped]

    # PDFium's own calls, not pypdfium2's wrappers (each of which makes a box and a tuple): half
    # the time on a page of 2,000 characters
    unicode_of, box_of, page = pdfium_c.FPDFText_GetUnicode, pdfium_c.FPDFText_GetLooseCharBox, textpage.raw
    box = pdfium_c.FS_RECTF()
    where = ctypes.byref(box)
    words: list[dict[str, Any]] = []
    word: dict[str, Any] | None = None
    for i in range(pdfium_c.FPDFText_CountChars(page)):
        code = unicode_of(page, i)
        space = code <= 32 and code != 2  # 2: PDFium's mark for a hyphen at a line's end
        if space or code in (0xA0, 0x2028, 0x2029) or not box_of(page, i, where) or box.right <= box.left:
            word = None  # white space: PDFium's own, and the spaces it adds where it sees a gap
            continue
        left, right, top, bottom = box.left, box.right, height - box.top, height - box.bottom
        middle = (top + bottom) / 2
        if (
            word is None
            or left > word["x1"] + WORD_GAP
            or left < word["x0"] - THIN
            or not word["top"] <= middle <= word["bottom"]
        ):
            word = {"text": "", "x0": left, "x1": right, "top": top, "bottom": bottom}
            words.append(word)
        word["text"] += "-" if code in (2, 0xFFFE) else chr(code)
        word["x1"] = max(word["x1"], right)
        word["top"], word["bottom"] = min(word["top"], top), max(word["bottom"], bottom)
    for word in words:  # PDFium counts UTF-16 units: a character past U+FFFF comes as two halves
        word["text"] = word["text"].encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return words


def _code(pieces: Pieces, x0: float, x1: float, low: float, high: float) -> bool:
    """Whether the text pieces between `low` and `high` (page space, y up) from x0 to x1 are none,
    mostly (CODE of their characters) in a monospaced font (code between two rules), or mostly in
    lines of PROSE characters or more (paragraphs between a page's head and foot rules)."""
    inside = [(len(t.strip()), mono) for t, x, at, mono in pieces.placed if x0 - SAME <= x <= x1 + SAME and low < at < high]
    text = sum(n for n, _ in inside)
    code = sum(n for n, mono in inside if mono)
    prose = sum(n for n, _ in inside if n >= PROSE)
    return not text or code > CODE * text or prose > CODE * text


def _regions(horizontal: list[dict[str, Any]], words: list[dict[str, Any]]) -> Iterable[tuple[float, float, list[float]]]:
    """Runs of horizontal rules of one extent (x0, x1, their tops), two rules or more, split where
    a word between two of them runs past the rules' ends (a paragraph between two tables)."""
    groups: list[list[dict[str, Any]]] = []
    for edge in sorted((e for e in horizontal if e["x1"] - e["x0"] >= MIN_RULE), key=lambda e: e["top"]):
        for group in groups:
            if abs(group[0]["x0"] - edge["x0"]) <= SAME and abs(group[0]["x1"] - edge["x1"]) <= SAME:
                if edge["top"] - group[-1]["top"] > THIN:
                    group.append(edge)
                break
        else:
            groups.append([edge])
    for group in groups:
        x0, x1 = group[0]["x0"], group[0]["x1"]
        run = [group[0]["top"]]
        for edge in group[1:]:
            wide = any(
                run[-1] < w["top"] and w["bottom"] < edge["top"] and (w["x0"] < x0 - SAME or w["x1"] > x1 + SAME) for w in words
            )
            if wide:
                if len(run) >= 2:
                    yield x0, x1, run
                run = []
            run.append(edge["top"])
        if len(run) >= 2:
            yield x0, x1, run


def _table(
    x0: float,
    x1: float,
    tops: list[float],
    horizontal: list[dict[str, Any]],
    vertical: list[dict[str, Any]],
    words: list[dict[str, Any]],
) -> Table | None:
    """The table between the rules at `tops` from x0 to x1, or None where it is not one."""
    top, bottom = tops[0], tops[-1]
    inside = [
        w for w in words if x0 - SAME <= w["x0"] and w["x1"] <= x1 + SAME and top < w["top"] and w["bottom"] < bottom + SAME
    ]
    if not inside:
        return None
    lines = _lines(inside)
    rules = sorted(e["top"] for e in horizontal if top < e["top"] < bottom and e["x0"] < x1 and x0 < e["x1"])
    walls = [e["x0"] for e in vertical if x0 + SAME < e["x0"] < x1 - SAME and e["top"] < bottom and top < e["bottom"]]
    cuts = _columns(lines, x0, x1, walls)
    if not cuts:
        return None
    cells = [_cells(line, cuts) for line in lines]
    # text that runs across the columns is not a table's (a paragraph, a caption in a framed box);
    # a heading spanning columns is, where few lines do it: it is kept whole, in its first column
    across = [_segments(line) == 1 and _filled(row) > 1 for line, row in zip(lines, cells)]
    if sum(_filled(row) >= 2 for row in cells) - sum(across) < 2 or sum(across) > STRAY * len(lines):
        return None
    cells = [[line, *([] for _ in cuts)] if spans else row for line, row, spans in zip(lines, cells, across)]
    rows = _rows(lines, cells, cuts, rules, len(tops) >= RULED_ROWS, x0, x1)
    # indented lines (pseudocode, code in a framed box) leave most cells empty; a table's rows fill
    # theirs, and most rows have two cells or more
    if sum(_filled(row) for row in rows) < FILLED * len(rows) * (len(cuts) + 1) or 2 * sum(
        _filled(row) >= 2 for row in rows
    ) < len(rows):
        return None
    return Table(x0, top, x1, bottom, tuple(tuple("\n".join(c) for c in row) for row in rows))


def _unended(words: list[dict[str, Any]]) -> bool:
    """Whether a cell's line ends mid-sentence (no full stop, colon or semicolon)."""
    return not words[-1]["text"].endswith((".", ":", ";"))


def _filled(row: Sequence[Sequence[Any]]) -> int:
    return sum(1 for cell in row if cell)


def _lines(words: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Words in lines, top to bottom, each left to right: a word is on a line its middle is within."""
    lines: list[tuple[float, float, list[dict[str, Any]]]] = []
    for word in sorted(words, key=lambda w: (w["top"], w["x0"])):
        middle = (word["top"] + word["bottom"]) / 2
        for k, (top, bottom, held) in enumerate(lines):
            if top <= middle <= bottom:
                held.append(word)
                lines[k] = (min(top, word["top"]), max(bottom, word["bottom"]), held)
                break
        else:
            lines.append((word["top"], word["bottom"], [word]))
    return [sorted(held, key=lambda w: w["x0"]) for _, _, held in sorted(lines, key=lambda line: line[0])]


def _columns(lines: list[list[dict[str, Any]]], x0: float, x1: float, walls: list[float]) -> list[float]:
    """Where columns part: the middle of each gap of GUTTER or more that the lines of two cells or
    more all leave free (a heading spanning columns, a cell's wrapped line, are one cell), and each
    vertical rule."""
    step = 0.5
    size = int((x1 - x0) / step) + 2
    free = bytearray(b"\x01") * size
    for line in lines:
        if _segments(line) < 2:
            continue
        for word in line:
            a, b = max(0, int((word["x0"] - x0) / step)), min(size, int((word["x1"] - x0) / step) + 1)
            free[a:b] = bytes(b - a)
    gaps: list[tuple[float, float]] = []
    start: int | None = None
    seen = False  # a gap counts only between words, not before the first or after the last
    for k in range(size):
        if free[k] and start is None:
            start = k
        elif not free[k]:
            if start is not None and seen and (k - start) * step >= GUTTER:
                gaps.append((x0 + start * step, x0 + k * step))
            start, seen = None, True
    # a vertical rule in a gap is where its columns part; one outside every gap parts them too
    cuts = [next((wall for wall in walls if a <= wall <= b), (a + b) / 2) for a, b in gaps]
    cuts += [wall for wall in walls if not any(a - SAME <= wall <= b + SAME for a, b in gaps)]
    return sorted(cuts)


def _segments(line: list[dict[str, Any]]) -> int:
    """How many runs of words a line has, runs apart by GUTTER or more."""
    return 1 + sum(1 for a, b in zip(line, line[1:]) if b["x0"] - a["x1"] >= GUTTER)


def _cells(line: list[dict[str, Any]], cuts: list[float]) -> list[list[dict[str, Any]]]:
    cells: list[list[dict[str, Any]]] = [[] for _ in range(len(cuts) + 1)]
    for word in line:
        middle = (word["x0"] + word["x1"]) / 2
        cells[sum(1 for cut in cuts if middle > cut)].append(word)
    return cells


def _rows(
    lines: list[list[dict[str, Any]]],
    cells: list[list[list[dict[str, Any]]]],
    cuts: list[float],
    rules: list[float],
    ruled: bool,
    x0: float,
    x1: float,
) -> list[list[list[str]]]:
    """The lines as rows. A rule between two lines always parts them. In a table `ruled` between
    its rows (a grid), the lines between two rules are one row, but for a line with a first cell
    (a label) under a row that has one. Elsewhere (booktabs, ruled at its head and foot) a line
    carries on the row above where that row's text broke in each column the line has text in (see
    `wrapping`): a line with its first cell empty (a wrapped cell's next line), or one with its first
    cell to a row that has none yet (a label set in the middle of its row's height, as TeX sets an
    m-column's)."""
    edges = [x0, *cuts, x1]
    right = [max((w["x1"] for line in cells for w in line[c]), default=edges[c + 1]) for c in range(len(edges) - 1)]

    def wrapping(words: list[dict[str, Any]], c: int, following: list[dict[str, Any]]) -> bool:
        """Whether a cell's line (`words`) was broken where it ends: it ends with a hyphen, or the
        next line's first word there would not have fit after it, or goes on in lower case after a
        line that ends no clause (ragged-right lines break short); a number is not broken."""
        end = words[-1]
        if end["text"].endswith("-"):
            return True
        if NUMBER.fullmatch(" ".join(w["text"] for w in words)):
            return False
        first = following[0]
        if first["text"][:1].islower() and _unended(words):
            return True
        space = 0.25 * (end["bottom"] - end["top"])
        return bool(end["x1"] + space + first["x1"] - first["x0"] > right[c] + THIN)

    rows: list[list[list[str]]] = []
    last: list[list[dict[str, Any]]] = []  # the row's last words in each column
    for k, line in enumerate(cells):
        parted = k == 0 or any(lines[k - 1][0]["bottom"] < rule < lines[k][0]["top"] for rule in rules)
        if parted or not rows:
            carries = False
        elif ruled:
            carries = not (line[0] and rows[-1][0])
        elif line[0]:  # a label, to a row that has none yet and is still wrapping
            carries = not rows[-1][0] and all(
                not words or wrapping(words, c, line[c]) if line[c] else not words or _unended(words)
                for c, words in enumerate(last)
                if c > 0
            )
        else:  # a wrapped cell's next line, under a row's line that broke there
            carries = all(not cell or (last[c] and wrapping(last[c], c, cell)) for c, cell in enumerate(line))
        text = [" ".join(w["text"] for w in cell) for cell in line]
        if carries:
            for c, words in enumerate(text):
                if words:
                    rows[-1][c].append(words)
            last = [cell or last[c] for c, cell in enumerate(line)]
        else:
            rows.append([[words] if words else [] for words in text])
            last = list(line)
    return rows
