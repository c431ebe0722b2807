"""mdoc(7)'s callable macros: one line of BSD manual-page macros and words (`.Op Fl c Ar file`) as
the words a reader sees ("[-c file]"), each macro applied to its arguments and the delimiters glued
to their neighbours. ingest/man.py renders the page around these lines; troff.py unescapes words."""

from __future__ import annotations

from .troff import MAX_NESTING, joined, unescape

# mdoc macros that other macros' arguments may call, and the delimiters that cling to a neighbour.
CALLABLE = frozenset(
    "Ac Ad An Ao Ap Aq Ar At Bc Bo Bq Brc Bro Brq Bsx Bx Cd Cm Dc Do Dq Dv Dx Ec Em En Eo Er Es Ev Fa Fc Fl Fn Fr "
    "Ft Fx Ic Li Lk Ms Mt Nm No Ns Nx Oc Oo Op Ox Pa Pc Pf Po Pq Qc Ql Qo Qq Sc So Sq St Sx Sy Ta Tn Ux Va Vt Xc "
    "Xo Xr".split()
)
_CLOSE = frozenset(". , : ; ) ] ? !".split())
_OPEN = frozenset("( [".split())
_ENCLOSE = {"Op": ("[", "]"), "Pq": ("(", ")"), "Bq": ("[", "]"), "Brq": ("{", "}"), "Aq": ("⟨", "⟩"),
            "Dq": ("“", "”"), "Qq": ('"', '"'), "Sq": ("‘", "’"), "Ql": ("‘", "’")}  # fmt: skip
_OPENERS = {"Oo": "[", "Po": "(", "Bo": "[", "Bro": "{", "Ao": "⟨", "Do": "“", "Qo": '"', "So": "‘"}
_CLOSERS = {"Oc": "]", "Pc": ")", "Bc": "]", "Brc": "}", "Ac": "⟩", "Dc": "”", "Qc": '"', "Sc": "’"}
_SYSTEMS = {"Bx": "BSD", "Ox": "OpenBSD", "Nx": "NetBSD", "Fx": "FreeBSD", "Dx": "DragonFly", "Bsx": "BSD/OS",
            "At": "AT&T UNIX", "Ux": "UNIX"}  # fmt: skip


class Inline:
    """The words of one mdoc line, its callable macros applied: (text, glued to what precedes)."""

    def __init__(self, args: list[str], strings: dict[str, str], name: str) -> None:
        """`strings`: the page's string definitions; `name`: the page's name so far (a first `.Nm`
        with words sets it, and the page takes it back from `name`)."""
        self.args = args
        self.strings = strings
        self.name = name
        self.glue_after = False  # the line ends wanting the next text glued to it (Ns, Pf)

    def pieces(self, start: int = 0, end: int | None = None, depth: int = 0) -> list[tuple[str, bool]]:
        args = self.args
        end = len(args) if end is None else end
        if depth > MAX_NESTING:  # enclosures nested past reason: the rest as words
            return [(unescape(arg, self.strings), False) for arg in args[start:end]]
        out: list[tuple[str, bool]] = []
        glue_next = False
        index = start
        while index < end:
            token = args[index]
            index += 1
            if token not in CALLABLE:
                word = unescape(token, self.strings)
                out.append((word, glue_next or token in _CLOSE))
                glue_next = token in _OPEN
                continue
            taken, pieces, glue_after = self.macro(token, index, end, depth)
            if pieces:
                first, glued = pieces[0]
                pieces[0] = (first, glued or glue_next)
            glue_next = glue_after
            out.extend(pieces)
            index = taken
        self.glue_after = glue_next
        return out

    def words(self, index: int, end: int) -> int:
        """Where the plain words after a macro end: at the next callable macro or delimiter."""
        while index < end and self.args[index] not in CALLABLE and self.args[index] not in _CLOSE:
            index += 1
        return index

    def macro(self, name: str, index: int, end: int, depth: int) -> tuple[int, list[tuple[str, bool]], bool]:
        """Apply macro `name` to its arguments from `index`: (index after them, pieces, glue next)."""
        args = self.args
        if name in _ENCLOSE:
            opener, closer = _ENCLOSE[name]
            stop = end
            while stop > index and args[stop - 1] in _CLOSE:
                stop -= 1
            inner = self.pieces(index, stop, depth + 1)
            text = opener + joined(inner) + closer
            return stop, [(text, False)], False
        if name in _OPENERS:
            return index, [(_OPENERS[name], False)], True
        if name in _CLOSERS:
            return index, [(_CLOSERS[name], True)], False
        if name == "Ns":
            return index, [], True
        if name == "Ap":
            return index, [("'", True)], True
        if name == "Pf":
            if index < end:
                return index + 1, [(unescape(args[index], self.strings), False)], True
            return index, [], False
        if name == "Ta":
            return index, [("\t", True)], True
        if name in ("Xo", "Xc"):
            return index, [], False
        stop = self.words(index, end)
        words = [unescape(arg, self.strings) for arg in args[index:stop]]
        if name == "Fl":
            return stop, [("-" + word, False) for word in words] or [("-", False)], not words
        if name == "Nm":
            if words and not self.name:
                self.name = words[0]
            return stop, [(" ".join(words) or self.name, False)], False
        if name == "Ar":
            return stop, [(" ".join(words) or "file ...", False)], False
        if name == "Xr":
            if len(words) >= 2:
                return stop, [(f"{words[0]}({words[1]})", False)] + [(w, False) for w in words[2:]], False
            return stop, [(" ".join(words), False)], False
        if name in _SYSTEMS:
            return stop, [(" ".join([_SYSTEMS[name], *words]), False)], False
        if name == "St":
            return stop, [(" ".join(w.lstrip("-") for w in words), False)], False
        if name == "Fn":
            if words:
                return stop, [(f"{words[0]}({', '.join(words[1:])})", False)], False
            return stop, [], False
        if name == "Lk":
            if len(words) > 1:
                return stop, [(f"{' '.join(words[1:])} <{words[0]}>", False)], False
            return stop, [(" ".join(words), False)], False
        return stop, [(" ".join(words), False)] if words else [], False
