"""Manual pages: troff source (man(7) and mdoc(7) macros) as the text a reader of the page sees.

No maintained pure-Python renderer of troff exists on PyPI (doclifter lifts troff to DocBook and
replaces sys.stdin when imported; man2text runs `man` and `groff`), and groff or mandoc are
programs memagent cannot require, so this module renders the page itself, for reading, not for
layout: requests that only lay out (`.sp`, `.in`, `.nr`, `.ft`, fonts, sizes, motions) are
dropped, the macros of man(7) and of BSD's mdoc(7) become what they show (`.Fl c` is "-c",
`.Op` brackets, `.Xr ssh 1` is "ssh(1)": a line's callable mdoc macros are ingest/mdoc.py's;
`.TP` and `.It` tags go on a line of their own with the text under them indented), escapes become
their characters (ingest/troff.py: `\\(em` is "—", `\\-` is "-"), string definitions (`.ds`) are
expanded and conditionals (`.if`, `.ie`/`.el`) evaluated as nroff would. Tables (tbl) keep their
rows, cells apart by " | ". Macros a page defines itself (`.de`) are not run: their arguments are
kept as text. Each `.SH` section is a `Place("section", n, heading)`; the title line (`TMUX(1)`)
comes first, with no place.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from .base import Part, Place, ReadContext
from .mdoc import CALLABLE, Inline
from .troff import MAX_NESTING, STRINGS, arguments, joined, unescape

INDENT = "    "
_MAX_DEPTH = 8  # .RS and list nesting shown, at most


# A string reference in a string's definition, interpolated then (as troff's copy mode does); an
# escaped backslash before it is kept. A string is cut at _STRING_LIMIT characters, so strings built
# of strings cannot grow without bound.
_STRING_REFERENCE = re.compile(r"((?<!\\)(?:\\\\)*)\\\*(\(..|\[[^\]]*\]|[^(\[])")
_STRING_LIMIT = 4096

# Requests and macros that only lay out or set state: nothing of them is shown.
_SILENT = frozenset(
    "ad na hy nh hw hc hla hlm hym hys ft fam ps vs ss cs ll lt in ti po pl pn ne ns rs bp mk rt ta tc lc fc "
    "nr rr rnn af ev ch wh dt it itc em tm tm1 tmc ab ex lf pso mso open opena close write writec writem "
    "cc c2 ec eo eu ce rj ul cu uf fp fspecial fschar ftr char fchar schar rchar rm rn als do return shift "
    "nop cp sy pi pc kern lg warn warnscale color device devicem output fl tr trin trnt tl nm nn mc sizes "
    "bd cf trf hcode shc linetabs vpt break continue while PD DT UC AT PU Dd Os Bk Ek Tg Sm Bf Ef Ud Lb Hf "
    "IX LO".split()
)


def read_man(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """A manual page's text: its title line, then one part per section (`.SH`, `.Sh`)."""
    data = file.read()
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        source = data.decode("latin-1")  # groff's own default input encoding
    del data
    page = _Page()
    page.run(source)
    for heading, text in page.sections():
        yield Part(text, Place("section", heading[0], heading[1]) if heading else Place())


# --------------------------------------------------------------------------------------------
# The page


@dataclass
class _List:
    kind: str  # "tag", "bullet", "dash", "enum", "item", "column"
    number: int = 0


@dataclass
class _Page:
    """The rendering state: output so far and the modes troff keeps."""

    strings: dict[str, str] = field(default_factory=dict)
    title: str = ""
    name: str = ""
    parts: list[tuple[tuple[int, str | None] | None, list[str]]] = field(default_factory=lambda: [(None, [])])
    line: str = ""  # the output line being filled
    glue: bool = False  # the next text joins the line without a space (\c, Ns)
    fill: bool = True
    base: int = 0  # .RS nesting and list depth: indent levels of new paragraphs
    body: int = 0  # indent level of the text now
    pending: str = ""  # what the next text line is: "tag" (.TP), "heading" (.SH alone), "subheading"
    marker: str = ""  # a list item's "- " or "1. ", written before its first line
    lists: list[_List] = field(default_factory=list)
    url: list[str] = field(default_factory=list)
    xo: list[str] | None = None  # an .It tag gathered over lines (Xo … Xc)
    last_if: bool = True
    table: int = 0  # 0 off; 1 reading the format; 2 reading data
    tab: str = "\t"
    cell_block: list[str] | None = None  # a table cell's T{ … T} text
    row: str = ""
    bare_tag: int = -1  # len(out) just after a tag was written: no text has followed it yet
    nesting: int = 0  # conditionals within one line (.if n .if n …)

    def sections(self) -> Iterator[tuple[tuple[int, str | None] | None, str]]:
        self.paragraph()
        for heading, lines in self.parts:
            text = "\n".join(lines).strip("\n")
            if text.strip():
                yield heading, re.sub(r"\n{3,}", "\n\n", text)

    # Output ---------------------------------------------------------------------------------

    @property
    def out(self) -> list[str]:
        return self.parts[-1][1]

    def text(self, words: str) -> None:
        """Shown text: filled onto the current line, or a line of its own outside fill mode."""
        if self.xo is not None:
            if words:
                self.xo.append(words)
            return
        if self.pending in ("heading", "subheading"):
            self.heading(words.strip(), sub=self.pending == "subheading")
            return
        if self.pending == "tag":
            self.pending = ""
            self.tag(words)
            return
        if not self.fill:
            self.flush()
            self.emit(words)
            return
        words = words.strip() if not self.glue else words.rstrip()
        if not words:
            return
        if self.line and not self.glue:
            self.line += " "
        self.line += words
        self.glue = False

    def emit(self, line: str) -> None:
        indent = INDENT * min(self.body, _MAX_DEPTH)
        if self.marker:
            line, self.marker = self.marker + line, ""
        self.out.append(indent + line if line.strip() else "")

    def flush(self) -> None:
        """A line break (.br): the filled line is written."""
        if self.line:
            self.emit(self.line)
        self.line = ""
        self.glue = False

    def paragraph(self) -> None:
        """A paragraph break: the line written and one blank line after it."""
        self.flush()
        if self.out and self.out[-1] != "":
            self.out.append("")

    def tag(self, words: str) -> None:
        """A tagged paragraph's tag on a line of its own; its text follows indented. Tags with no
        text between them (several options described together) stay on consecutive lines."""
        if self.line or len(self.out) != self.bare_tag:
            self.paragraph()
        self.body = self.base
        self.emit(words.strip())
        self.body = self.base + 1
        self.bare_tag = len(self.out)

    def heading(self, words: str, *, sub: bool) -> None:
        self.pending = ""
        self.paragraph()
        self.lists.clear()
        self.base = self.body = 0
        self.fill = True
        if not sub:
            label = " ".join(words.split())[:80] or None
            self.parts.append(((len(self.parts), label), []))
        self.out.append(words)
        self.out.append("")

    # Input ----------------------------------------------------------------------------------

    def run(self, source: str) -> None:
        lines = source.replace("\r\n", "\n").split("\n")
        index = 0
        while index < len(lines):
            line = lines[index]
            index += 1
            while line.endswith("\\") and not line.endswith("\\\\") and index < len(lines):  # an escaped newline
                line = line[:-1] + lines[index]
                index += 1
            index = self.line_in(line, lines, index)

    def line_in(self, line: str, lines: list[str], index: int) -> int:
        """One input line; returns the index of the next (blocks such as .de skip lines)."""
        if self.table:
            return self.table_line(line, index)
        if line[:1] in (".", "'"):
            return self.request(line[1:].lstrip(" \t"), lines, index)
        self.text_line(line)
        return index

    def text_line(self, line: str) -> None:
        if line.strip() == "\\}":
            return
        joined = re.search(r"\\c\s*$", line) is not None
        if not line.strip():
            if self.fill and self.xo is None:
                self.paragraph()
            elif not self.fill:
                self.flush()
                self.emit("")
            return
        if self.fill and line[:1] in " \t" and self.xo is None and not self.pending:
            self.flush()
        self.text(unescape(line, self.strings))
        if joined:
            self.glue = True

    def request(self, line: str, lines: list[str], index: int) -> int:
        if not line or line.startswith(('\\"', "\\#", "\\}")):
            return index
        name, _, rest = line.partition(" ")
        if "\t" in name:
            name, _, more = name.partition("\t")
            rest = more + " " + rest
        if name in ("de", "de1", "am", "am1", "ig", "dei", "ami"):
            end = ".." if name != "ig" or not rest.split() else "." + rest.split()[0]
            while index < len(lines) and lines[index].strip() not in (end, "'" + end[1:]):
                index += 1
            return index + 1
        if name in ("if", "ie", "el"):
            return self.conditional(name, rest, lines, index)
        if name in ("ds", "ds1", "as", "as1"):
            key, _, value = rest.lstrip().partition(" ")
            value = value[1:] if value.startswith('"') else value
            value = _STRING_REFERENCE.sub(lambda m: m.group(1) + self.string(m.group(2)), value.replace("\\}", ""))
            value = (self.strings.get(key, "") if name.startswith("as") else "") + value
            self.strings[key] = value[:_STRING_LIMIT]
            return index
        if name == "TS":
            self.paragraph()
            self.table, self.tab, self.row = 1, "\t", ""
            return index
        args = arguments(rest)
        if name in _MDOC_BLOCK or name in CALLABLE or name in _MDOC_LINE:
            self.mdoc(name, args)
            return index
        self.man(name, args)
        return index

    def string(self, reference: str) -> str:
        """A string's value by its reference's name part: "x", "(xx" or "[name args]"."""
        if reference.startswith("("):
            name = reference[1:3]
        elif reference.startswith("["):
            name = (reference[1:-1].split() or [""])[0]
        else:
            name = reference
        return self.strings.get(name, STRINGS.get(name, ""))

    def conditional(self, name: str, rest: str, lines: list[str], index: int) -> int:
        if name == "el":
            true, body = not self.last_if, rest
        else:
            true, body = self.condition(rest.lstrip())
            if name == "ie":
                self.last_if = true
        body = body.lstrip()
        block = body.startswith("\\{")
        if block:
            body = body[2:].lstrip()
            if body.startswith("\\"):  # \{\ : the rest of the line is empty
                body = body[1:]
        if true:
            body = body.replace("\\}", "")
            if body.strip() and self.nesting < MAX_NESTING:
                self.nesting += 1
                try:
                    return self.line_in(body, lines, index)
                finally:
                    self.nesting -= 1
            return index
        if block:
            depth = 1 + body.count("\\{") - body.count("\\}")
            while depth > 0 and index < len(lines):
                depth += lines[index].count("\\{") - lines[index].count("\\}")
                index += 1
        return index

    def condition(self, text: str) -> tuple[bool, str]:
        """Whether a condition holds for nroff output, and the rest of the line after it."""
        negate = text.startswith("!")
        if negate:
            text = text[1:]
        true = False
        if text[:1] in ("n", "o"):
            true, text = True, text[1:]
        elif text[:1] in ("t", "e", "v"):
            text = text[1:]
        elif text[:1] in ("d", "r", "c", "m", "F", "S"):
            kind = text[0]
            parts = text[1:].lstrip().split(None, 1)
            true = kind == "d" and bool(parts) and parts[0] in self.strings
            text = parts[1] if len(parts) > 1 else ""
        elif text[:1] in ("'", '"'):
            quote = text[0]
            pieces = text[1:].split(quote, 2)
            if len(pieces) == 3:
                true = unescape(pieces[0], self.strings) == unescape(pieces[1], self.strings)
                text = pieces[2]
            else:
                text = ""
        else:
            expression, _, text = text.partition(" ")
            expression = re.sub(r"\\n(?:\(\.g|\[\.g\])", "1", expression)
            expression = re.sub(r"\\n(?:\(..|\[[^\]]*\]|.)", "0", expression)
            number = re.match(r"[+-]?\d+", expression)
            true = number is not None and int(number.group()) > 0 and number.end() == len(expression)
        return true != negate, text

    # man(7) ---------------------------------------------------------------------------------

    def man(self, name: str, args: list[str]) -> None:
        shown = [unescape(arg, self.strings) for arg in args]
        if name == "TH":
            if shown:
                self.title = f"{shown[0]}({shown[1]})" if len(shown) > 1 else shown[0]
                self.out.append(self.title + (f" — {shown[4]}" if len(shown) > 4 and shown[4] else ""))
                self.out.append("")
        elif name in ("SH", "SS"):
            if shown:
                self.heading(" ".join(shown), sub=name == "SS")
            else:
                self.paragraph()
                self.pending = "subheading" if name == "SS" else "heading"
        elif name in ("PP", "LP", "P", "HP", "sp", "ns"):
            self.paragraph()
            self.body = self.base
        elif name == "TP":
            self.paragraph()
            self.pending = "tag"
        elif name == "IP":
            self.paragraph()
            if shown and shown[0].strip():
                self.tag(shown[0])
            else:
                self.body = self.base + 1
        elif name == "RS":
            self.paragraph()
            self.base = self.body = min(self.base + 1, _MAX_DEPTH)
        elif name == "RE":
            self.paragraph()
            self.base = self.body = max(self.base - 1, 0)
        elif name == "br":
            self.flush()
        elif name in ("nf", "EX"):
            self.flush()
            self.fill = False
        elif name in ("fi", "EE"):
            self.flush()
            self.fill = True
        elif name in ("B", "I", "SM", "SB", "R"):
            if shown:
                self.text(" ".join(shown))
        elif name in ("BI", "BR", "IB", "IR", "RB", "RI"):
            self.text("".join(shown))
        elif name in ("UR", "MT"):
            self.url.append(shown[0] if shown else "")
        elif name in ("UE", "ME"):
            url = self.url.pop() if self.url else ""
            if url:
                self.text(f"<{url}>")
            if shown:
                self.glue = True
                self.text(shown[0])
        elif name == "SY":
            self.paragraph()
            self.text(" ".join(shown))
        elif name == "OP":
            self.text("[" + " ".join(shown) + "]")
        elif name == "YS":
            self.paragraph()
        elif name == "so":
            self.text(f"See {shown[0]}." if shown else "")
        elif name in _SILENT or (len(name) <= 3 and name.islower()) or not name:
            return
        elif shown:  # a macro the page defines itself: its arguments are its text
            self.text(" ".join(shown))

    # tbl ------------------------------------------------------------------------------------

    def table_line(self, line: str, index: int) -> int:
        stripped = line.strip()
        if stripped.startswith((".TE", "'TE")):
            self.table = 0
            self.paragraph()
            return index
        if self.table == 1:  # options ("tab(:);") then format lines, the last ending in "."
            found = re.search(r"tab\s*\((.)\)", stripped)
            if found:
                self.tab = found.group(1)
            if stripped.endswith("."):
                self.table = 2
            return index
        if stripped.startswith((".T&", "'T&")):
            self.table = 1
            return index
        if stripped[:1] in (".", "'") and self.cell_block is None:
            return index  # a request inside a table (.sp, .ft): laid out, not shown
        if self.cell_block is not None:
            if stripped.startswith("T}"):
                self.row += " ".join(self.cell_block)
                self.cell_block = None
                line = line.lstrip()[2:]
                if not line.endswith("T{"):
                    self.table_row(self.row + line)
                    return index
                self.row += line[:-2]
                self.cell_block = []
            else:
                text = unescape(line, self.strings).strip()
                if text:
                    self.cell_block.append(text)
            return index
        if stripped in ("_", "=") or not stripped:
            return index
        if line.endswith("T{"):
            self.row = line[:-2]
            self.cell_block = []
            return index
        self.table_row(line)
        return index

    def table_row(self, line: str) -> None:
        cells = [unescape(cell, self.strings).strip() for cell in line.split(self.tab)]
        self.row = ""
        cells = [cell for cell in cells if cell not in ("_", "=")]
        if any(cells):
            self.flush()
            self.emit(" | ".join(cells))

    # mdoc(7) --------------------------------------------------------------------------------

    def mdoc(self, name: str, args: list[str]) -> None:
        if self.xo is not None and name not in ("It",):
            self.xo.append(self.inline([name, *args]))
            if "Xc" in args or name == "Xc":
                words, self.xo = " ".join(self.xo), None
                self.tag(" ".join(words.split()))
            return
        if name == "Dt":
            shown = [unescape(arg, self.strings) for arg in args]
            if shown:
                self.title = f"{shown[0]}({shown[1]})" if len(shown) > 1 else shown[0]
                self.out.append(self.title)
                self.out.append("")
        elif name in ("Sh", "Ss"):
            self.heading(self.inline(args), sub=name == "Ss")
        elif name in ("Pp", "Lp"):
            self.paragraph()
            self.body = self.base + (1 if self.lists and self.lists[-1].kind == "tag" else 0)
        elif name == "Nd":
            self.text("— " + self.inline(args))
        elif name == "Bl":
            self.paragraph()
            kind = next((a[1:] for a in args if a[1:] in _LIST_KINDS), "item")
            self.lists.append(_List(_LIST_KINDS[kind]))
            self.base = min(len(self.lists), _MAX_DEPTH) - 1 + (1 if len(self.lists) > 1 else 0)
            self.body = self.base
        elif name == "El":
            self.paragraph()
            if self.lists:
                self.lists.pop()
            self.base = self.body = max(self.base - 1, 0) if self.lists else 0
        elif name == "It":
            self.item(args)
        elif name == "Bd":
            self.paragraph()
            self.fill = not any(a in ("-literal", "-unfilled") for a in args)
            self.body = self.base + (1 if "-offset" in args else 0)
        elif name == "Ed":
            self.paragraph()
            self.fill = True
            self.body = self.base + (1 if self.lists and self.lists[-1].kind == "tag" else 0)
        elif name in ("D1", "Dl"):
            self.flush()
            self.body += 1
            self.emit(self.inline(args))
            self.body -= 1
        elif name in ("Rs", "Re"):
            self.paragraph()
        elif name == "Ex":
            self.text(f"The {self.name or 'utility'} utility exits 0 on success, and >0 if an error occurs.")
        elif name == "Rv":
            self.text(
                f"The {self.name or 'function'}() function returns the value 0 if successful; otherwise the value -1 "
                "is returned and the global variable errno is set to indicate the error."
            )
        elif name == "In":
            self.text(f"#include <{args[0]}>" if args else "")
        elif name == "Fd":
            self.text(" ".join(unescape(arg, self.strings) for arg in args))
        elif name in ("Bk", "Ek", "Os", "Dd", "Tg", "Sm", "Bf", "Ef"):
            return
        elif name.startswith("%"):
            self.text(self.inline(args) + ",")
        else:
            line = Inline([name, *args], self.strings, self.name)
            pieces = line.pieces()
            self.name = line.name
            if pieces and pieces[0][1]:
                self.glue = True
            self.text(joined(pieces))
            if line.glue_after:  # a line ending in Ns: the next joins it
                self.glue = True

    def item(self, args: list[str]) -> None:
        kind = self.lists[-1] if self.lists else _List("tag")
        if kind.kind == "column":
            self.flush()
            self.body = self.base
            self.emit(self.inline(args).replace(" \t ", "\t"))
            return
        if kind.kind in ("bullet", "dash", "enum", "item"):
            self.paragraph()
            self.body = self.base
            kind.number += 1
            self.marker = {"bullet": "• ", "dash": "- ", "enum": f"{kind.number}. ", "item": ""}[kind.kind]
            return
        if "Xo" in args:
            self.xo = [self.inline(args)]
            return
        self.tag(self.inline(args))

    def inline(self, args: list[str]) -> str:
        """A line of mdoc macros and words as text."""
        line = Inline(args, self.strings, self.name)
        text = joined(line.pieces())
        self.name = line.name  # a first .Nm names the page
        return text


_LIST_KINDS = {"tag": "tag", "hang": "tag", "ohang": "tag", "inset": "tag", "diag": "tag", "bullet": "bullet",
               "dash": "dash", "hyphen": "dash", "enum": "enum", "item": "item", "column": "column"}  # fmt: skip
_MDOC_LINE = frozenset("Nd Dt It %A %B %C %D %I %J %N %O %P %Q %R %T %U %V".split())  # macros that only begin a line
_MDOC_BLOCK = frozenset("Sh Ss Pp Lp Bl El Bd Ed D1 Dl Rs Re Ex Rv In Fd Bk Ek Os Dd Tg Sm Bf Ef".split())
