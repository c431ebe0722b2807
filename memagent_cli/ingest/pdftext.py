"""A PDF's page texts as a person reads them: running heads and page numbers left out, contents'
leader dots shortened, words hyphenated at a line end made whole (docs/FORMATS.md, "PDF text").

Everything here changes the reader's parts, before they are numbered into segments, so `inspect
--text`, the model, InfMem's search and a quote's offsets all count the same text; the highlighted
PDF finds a quote in the page's own text by comparing both without hyphens and white space, a run
of dots as one (traces/pdfmarks.py), and a quote that a left-out running head splits, piece by piece.

- **Running heads and feet**: a line at the top or bottom of a page (the first or last two lines of
  pypdf's text) that recurs, modulo its page number, on most pages (or on most left or right pages,
  for books whose heads alternate), or that carries the page's own number (a number that is the
  page's index plus the same offset on most pages). A recurring head with words and no number is
  kept where it first appears (a long table's header repeated on each page is read once).
- **Leader dots**: a run of four or more dots, spaced or not (". . . . ." in a table of contents or
  an index), becomes " … ".
- **Hyphens at line ends**: "com-" + "mands" becomes "commands", the rest of the word moved up to
  its first part; a hyphen that belongs to the word ("well-" + "known") is kept. Which is which is
  decided by the document's own words (`Vocabulary`), measured on 266 TeX Live manuals (the rule
  and its error rate are in docs/FORMATS.md).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from .pdftables import MARK, Table, render

HEAD_LINES = 2  # at most this many lines at each end of a page are a running head or foot
MIN_HEAD_PAGES = 3  # a line must recur on at least this many pages to be a running head
NAMED_HEADS = 3  # running heads named in the note, at most
COMPOUND_PART = 4  # letters each part of an unseen compound has at least (rule 6 of keeps_hyphen)

_NUMBER = re.compile(r"\d+")
_EDGE_NUMBER = re.compile(r"^\W*(\d+)(?![.,:]?\d)\b|(?<![\d.,:])\b(\d+)\W*$")
_LETTER = re.compile(r"[^\W\d_]")
_ROMAN = re.compile(r"(?=[ivxlcdm])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})", re.IGNORECASE)
_PUNCTUATION = "()[]–—-.,:"
_TABLE = re.compile(rf"{MARK}(\d+){MARK}")


@dataclass
class Tidied:
    """A document's page texts after tidying, and what was left out, for one note."""

    pages: list[str]
    heads: list[str] = field(default_factory=list)  # the running heads left out, as first seen
    numbers: bool = False  # whether page numbers were left out
    head_pages: int = 0  # pages that lost a line
    joined: int = 0  # words joined across a line end, hyphen dropped
    kept: int = 0  # words joined across a line end, hyphen kept

    def note(self, title: str, total: int) -> str | None:
        """One line naming what was left out, or None."""
        if not self.head_pages:
            return None
        names = [f"'{_shortened(head)}'" for head in self.heads[:NAMED_HEADS]]
        if len(self.heads) > NAMED_HEADS:
            names.append(f"{len(self.heads) - NAMED_HEADS} more")
        where = f"{self.head_pages} of {total} pages"
        if not names:
            return f"{title}: left out the page numbers of {where}"
        if self.numbers:
            names.insert(0, "page numbers")
        return f"{title}: left out the running heads and feet of {where}: {'; '.join(names)}"


def tidy(pages: Sequence[str], tables: Sequence[Sequence[Table]] = ()) -> Tidied:
    """`pages` (each page's text, "" for one without) tidied as the module says; `tables` each
    page's tables (pdftables), whose places in its text (a line MARK index MARK) become their rows."""
    tidied = _without_running_heads([page.split("\n") for page in pages])
    cells = [cell for found in tables for table in found for row in table.rows for cell in row]
    vocabulary = Vocabulary.of([*tidied.pages, *cells])

    def mend(cell: str) -> str:
        text, joined, kept = join_hyphens(shorten_leaders(cell), vocabulary)
        tidied.joined += joined
        tidied.kept += kept
        return " ".join(text.split())

    out: list[str] = []
    for n, text in enumerate(tidied.pages):
        text, joined, kept = join_hyphens(shorten_leaders(text), vocabulary)
        tidied.joined += joined
        tidied.kept += kept
        if MARK in text and n < len(tables):
            text = _TABLE.sub(lambda m: render(tables[n][int(m.group(1))], mend), text)
        out.append(text)
    tidied.pages = out
    return tidied


# ---------------------------------------------------------------------------------------------
# Running heads and feet


def _key(line: str, page_number: int | None = None) -> str:
    """A line as running heads are compared: white space collapsed, the page's number (where it
    begins or ends the line) as #, and a roman numeral beginning or ending a line of more words as
    # too (front matter's page numbers: "GeoBase® iii"): "the same line, modulo its page number"."""
    line = " ".join(line.split())
    if page_number is not None:
        # the number at the end if it is the page's, else the one at the start
        end = re.sub(rf"(?<![\d.,:])\b{page_number}(\W*)$", r"#\1", line)
        line = end if end != line else re.sub(rf"^(\W*){page_number}(?![.,:]?\d)\b", r"\1#", line)
    words = line.split(" ")
    if len(words) > 1:
        for k in (0, -1):
            if _ROMAN.fullmatch(words[k].strip(_PUNCTUATION)):
                words[k] = "#"
    return " ".join(words)


def _edge_numbers(line: str) -> list[int]:
    """The numbers a line begins or ends with ("12 Chapter title", "Chapter title 12", "– 12 –"),
    not a section's ("2.1 Fonts")."""
    found: list[int] = []
    for match in _EDGE_NUMBER.finditer(line.strip()):
        number = match.group(1) or match.group(2)
        if len(number) <= 5:
            found.append(int(number))
    return found


def _page_offset(numbers: dict[int, list[int]], total: int) -> int | None:
    """The offset between pages' printed numbers and their index (page n prints n + offset) that
    most of the `total` pages' lines given show (page: the numbers at its line's edges); None when
    no offset holds for most pages."""
    offsets: Counter[int] = Counter()
    for n, found in numbers.items():
        offsets.update({number - (n + 1) for number in found})
    if not offsets:
        return None
    offset, hits = offsets.most_common(1)[0]
    return offset if hits >= MIN_HEAD_PAGES and 2 * hits >= total else None


def _without_running_heads(lines: list[list[str]]) -> Tidied:
    """The pages (as lines) without their running heads and feet, peeled from each end in turn."""
    alive = [[i for i, line in enumerate(page) if line.strip()] for page in lines]
    texts = [n for n, page in enumerate(alive) if page]
    dropped: list[set[int]] = [set() for _ in lines]
    passed: list[set[int]] = [set() for _ in lines]  # recurring lines kept where they first appear
    heads: list[str] = []
    numbers = False
    if len(texts) >= MIN_HEAD_PAGES:
        # Pages that print their number alone on a line at either end: a line with words there
        # that holds the same number is not its page number too (a section "3 Usage" on page 3).
        bare = {n: [lines[n][i] for i in (alive[n][0], alive[n][-1]) if not _LETTER.search(lines[n][i])] for n in texts}
        offset = _page_offset({n: [x for line in found for x in _edge_numbers(line)] for n, found in bare.items()}, len(texts))
        printed = {
            n for n, found in bare.items() if offset is not None and any(n + 1 + offset in _edge_numbers(x) for x in found)
        }
        for top in (True, False):
            peeling = set(texts)
            for _ in range(HEAD_LINES):
                candidates: dict[int, int] = {}  # page: index of its line at this end
                for n in sorted(peeling):
                    left = [i for i in alive[n] if i not in dropped[n] and i not in passed[n]]
                    edge = left[0] if top else left[-1] if left else None
                    # a page's only line is its text, unless it is only a number; a table is text
                    if edge is not None and MARK not in lines[n][edge] and (len(left) > 1 or not _LETTER.search(lines[n][edge])):
                        candidates[n] = edge
                chosen, kept, found_heads, found_numbers = _running(candidates, lines, texts, printed, top)
                for n, i in chosen.items():
                    dropped[n].add(i)
                for n, i in kept.items():
                    passed[n].add(i)
                for head in found_heads:  # named once, whatever its numbers
                    if all(_NUMBER.sub("#", head) != _NUMBER.sub("#", seen) for seen in heads):
                        heads.append(head)
                numbers = numbers or found_numbers
                peeling = set(chosen) | set(kept)
                if not peeling:
                    break
    pages = ["\n".join(line for i, line in enumerate(page) if i not in dropped[n]) for n, page in enumerate(lines)]
    return Tidied(pages, heads, numbers, sum(1 for d in dropped if d))


def _running(
    candidates: dict[int, int], lines: list[list[str]], texts: list[int], printed: set[int], top: bool
) -> tuple[dict[int, int], dict[int, int], list[str], bool]:
    """Of the candidate lines (page: line index), those that are running heads or feet: a line
    that carries its page's number (by the offset most candidates show; a line with words only on
    a page that does not print its number alone), or that recurs, modulo its page number, on most
    of the pages with text (`texts`) or on most of one side's. A recurring line with words and no
    page number at the `top` is kept on the first page that has it (a document's title that heads
    its pages, a table's header repeated on each page it runs over). Returns them, those kept so,
    the heads' first texts, and whether bare page numbers were among them."""
    offset = _page_offset({n: _edge_numbers(lines[n][i]) for n, i in candidates.items()}, len(texts))
    keys: dict[int, str] = {}
    paged: set[int] = set()
    for n, i in candidates.items():
        line = lines[n][i]
        number = None if offset is None else n + 1 + offset
        if number is not None and number in _edge_numbers(line) and (n not in printed or not _LETTER.search(line)):
            paged.add(n)
            keys[n] = _key(line, number)
        else:
            keys[n] = _key(line)
    counts = Counter(keys.values())
    sides = Counter((key, n % 2) for n, key in keys.items())
    side_pages = Counter(n % 2 for n in texts)
    recurring = {
        key
        for key, count in counts.items()
        if _LETTER.search(key)
        and count >= MIN_HEAD_PAGES
        and (2 * count >= len(texts) or any(2 * sides[key, side] >= side_pages[side] for side in (0, 1)))
    }
    chosen: dict[int, int] = {}
    kept: dict[int, int] = {}
    first: set[str] = set()
    heads: list[str] = []
    numbers = False
    for n in sorted(candidates):
        key = keys[n]
        if n not in paged and key not in recurring:
            continue
        if _LETTER.search(key) is None:
            numbers = True
        elif key not in first:
            first.add(key)
            heads.append(shorten_leaders(" ".join(lines[n][candidates[n]].split())))
            if top and n not in paged and "#" not in key:
                kept[n] = candidates[n]  # read once, where it first heads a page
                continue
        chosen[n] = candidates[n]
    return chosen, kept, heads, numbers


def _shortened(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------------
# Leader dots

# Four or more dots, each followed by at most one space or tab: TeX's leaders (". . . .") and a
# word processor's ("...."). Three are an ellipsis and stay.
_LEADER = re.compile(r"[ \t]*\.(?:[ \t]?\.){3,}[ \t]*")


def shorten_leaders(text: str) -> str:
    """`text` with each run of leader dots as " … " (no space at a line's end or start)."""
    if "...." not in text and ". . . ." not in text:
        return text
    return _LEADER.sub(_leader, text)


def _leader(match: re.Match[str]) -> str:
    text, start, end = match.string, match.start(), match.end()
    before = "" if start == 0 or text[start - 1] == "\n" else " "
    after = "" if end == len(text) or text[end] == "\n" else " "
    return f"{before}…{after}"


# ---------------------------------------------------------------------------------------------
# Words hyphenated at a line end

_WORD = re.compile(r"[^\W\d_]+")
_COMPOUND = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)+")
# A word's first part and its hyphen at a line's end (hyphen-minus, U+2010 or a soft hyphen),
# the next line's first run of non-space characters, beginning with a letter, and what follows it
# on that line (spaces, or nothing at the line's end).
_BREAK = re.compile(r"(?<![^\W\d_])([^\W\d_]+)([-\u2010\u00ad])[ \t]*\n[ \t]*([^\W\d_]\S*)[ \t]*")


@dataclass
class Vocabulary:
    """A document's own words and hyphenated compounds (lower case), the line-end breaks left out:
    what decides whether a hyphen at a line's end belongs to its word. Gathered when first asked
    for: a document with no hyphen at a line's end never pays for it."""

    texts: Sequence[str]

    @classmethod
    def of(cls, texts: Iterable[str]) -> Vocabulary:
        return cls(list(texts))

    @cached_property
    def _gathered(self) -> tuple[frozenset[str], frozenset[str]]:
        words: set[str] = set()
        compounds: set[str] = set()
        for text in self.texts:
            whole = _BREAK.sub(" ", text).lower()
            words.update(_WORD.findall(whole))
            for compound in _COMPOUND.findall(whole):
                parts = compound.split("-")
                compounds.update(f"{a}-{b}" for a, b in zip(parts, parts[1:]))
        return frozenset(words), frozenset(compounds)

    @property
    def words(self) -> frozenset[str]:
        return self._gathered[0]

    @property
    def compounds(self) -> frozenset[str]:
        return self._gathered[1]


def keeps_hyphen(first: str, hyphen: str, rest: str, before: str, vocabulary: Vocabulary) -> bool:
    """Whether the hyphen between `first` (the letters before it, at a line's end) and `rest` (the
    next line's first run of non-space characters) belongs to the word. `before` is the character
    before `first` ("" at a line's start). In order:

    1. a soft hyphen (U+00AD) never does;
    2. the compound seen elsewhere in the document ("well-known") keeps it;
    3. the joined word seen elsewhere ("commands") drops it;
    4. a compound that goes on ("up-to-" + "date", "up-" + "to-date") keeps it;
    5. a capital after it ("Addison-" + "Wesley"), or a part of one letter ("e-" + "mail"), keeps it;
    6. two parts of four letters or more that are each a word of the document ("encoding-" +
       "dependent") keep it;
    7. otherwise it is dropped: most hyphens at a line's end are the typesetter's.
    """
    second = _WORD.match(rest)
    tail = rest[second.end() :] if second else rest
    second_word = second.group() if second else rest
    if hyphen == "\u00ad":
        return False
    if f"{first}-{second_word}".lower() in vocabulary.compounds:
        return True
    if f"{first}{second_word}".lower() in vocabulary.words:
        return False
    if before == "-" or (tail[:1] == "-" and _LETTER.match(tail[1:2] or "") is not None):
        return True
    if second_word[:1].isupper() or len(first) == 1 or len(second_word) == 1:
        return True
    return (
        min(len(first), len(second_word)) >= COMPOUND_PART
        and first.lower() in vocabulary.words
        and second_word.lower() in vocabulary.words
    )


def join_hyphens(text: str, vocabulary: Vocabulary) -> tuple[str, int, int]:
    """`text` with each word hyphenated at a line's end made whole on the first line (the rest of
    the next line stays on its own line); and how many were joined without their hyphen and with it."""
    if "-\n" not in text and "\u2010" not in text and "\u00ad" not in text and "- " not in text:
        return text, 0, 0
    joined = kept = 0

    def whole(match: re.Match[str]) -> str:
        nonlocal joined, kept
        first, hyphen, rest = match.groups()
        start, end = match.start(), match.end()
        before = match.string[start - 1] if start > 0 and match.string[start - 1] != "\n" else ""
        keep = keeps_hyphen(first, hyphen, rest, before, vocabulary)
        if keep:
            kept += 1
        else:
            joined += 1
        # a soft hyphen that is kept is still only a mark: the word is written with a hyphen-minus
        mark = ("-" if hyphen == "\u00ad" else hyphen) if keep else ""
        more = end < len(match.string) and match.string[end] != "\n"  # the next line goes on after the word
        return f"{first}{mark}{rest}" + ("\n" if more else "")

    return _BREAK.sub(whole, text), joined, kept
