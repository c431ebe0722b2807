"""troff's text layer, shared by man(7) and mdoc(7) pages (ingest/man.py renders the pages):
escapes (`\\(em`, `\\[u2014]`, `\\*(lq`, accents) as the characters they show, the strings both macro
sets predefine, and how a request's arguments are split and its pieces joined."""

from __future__ import annotations

import re

MAX_NESTING = 32  # conditionals on one line, and mdoc enclosures (.Op Op …) in one, followed at most

# Special characters (\(xx, \[name]) a manual page uses, as groff -Tutf8 shows them.
_GLYPHS = {
    "em": "—", "en": "–", "hy": "-", "mi": "-", "-": "-", "aq": "'", "dq": '"', "lq": "“", "rq": "”",
    "oq": "‘", "cq": "’", "Bq": "„", "bq": "‚", "Fo": "«", "Fc": "»", "fo": "‹", "fc": "›",
    "bu": "•", "pc": "·", "ci": "○", "sq": "□", "co": "©", "rg": "®", "tm": "™", "de": "°",
    "mu": "×", "di": "÷", "+-": "±", "<=": "≤", ">=": "≥", "!=": "≠", "==": "≡", "~=": "≅",
    "~~": "≈", "ap": "~", "ti": "~", "a~": "~", "ha": "^", "a^": "^", "rs": "\\", "sl": "/",
    "ba": "|", "or": "|", "br": "│", "ul": "_", "ru": "_", "rn": "‾", "->": "→", "<-": "←",
    "<>": "↔", "ua": "↑", "da": "↓", "rA": "⇒", "lA": "⇐", "hA": "⇔", "sc": "§", "ps": "¶",
    "dg": "†", "dd": "‡", "Do": "$", "Eu": "€", "eu": "€", "Po": "£", "Ye": "¥", "ct": "¢",
    "fm": "′", "sd": "″", "aa": "´", "ga": "`", "at": "@", "sh": "#", "pl": "+", "eq": "=",
    "**": "∗", "no": "¬", "if": "∞", "12": "½", "14": "¼", "34": "¾", "S1": "¹", "S2": "²",
    "S3": "³", "ss": "ß", "ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ", "o/": "ø", "O/": "Ø",
    "ff": "ff", "fi": "fi", "fl": "fl", "Fi": "ffi", "Fl": "ffl", "OK": "✓", "lh": "☜", "rh": "☞",
    "la": "⟨", "ra": "⟩", "lB": "[", "rB": "]", "lC": "{", "rC": "}", "st": "∋", "*m": "μ",
    "*a": "α", "*b": "β", "*g": "γ", "*d": "δ", "*e": "ε", "*p": "π", "*l": "λ", "*s": "σ",
    "es": "∅", "mo": "∈", "pd": "∂", "gr": "∇", "sr": "√", "is": "∫", "tf": "∴", "3d": "∴",
    "c*": "⊗", "c+": "⊕", "nm": "∉", "sb": "⊂", "sp": "⊃", "ca": "∩", "cu": "∪", "IN": "∞",
}  # fmt: skip
_ACCENTS = {"`": 0x300, "'": 0x301, "^": 0x302, "~": 0x303, ":": 0x308, ",": 0x327, "o": 0x30A, "v": 0x30C}

# Strings man(7) and mdoc(7) predefine (\*(lq, \*R…).
STRINGS = {"lq": "“", "rq": "”", "R": "®", "Tm": "™", "Lq": "“", "Rq": "”", "HF": "", "S": "", "Am": "&", "Ba": "|",
            "Ge": "≥", "Le": "≤", "Gt": ">", "Lt": "<", "Pi": "π", "Ne": "≠", "Pm": "±", "If": "∞", "Na": "NaN",
            "q": '"', "Aq": "'"}  # fmt: skip


_ESCAPE = re.compile(
    r"""\\(?:
        (?P<comment>["\#].*)
      | \((?P<glyph2>..)
      | \[(?P<glyph>[^\]]*)\]
      | C(?P<cq>.)(?P<cname>.*?)(?P=cq)
      | \*(?:\((?P<str2>..)|\[(?P<strn>[^\]\s]*)[^\]]*\]|(?P<str1>.))
      | [fFmMgkYV](?:\(..|\[[^\]]*\]|.)
      | n[+-]?(?:\(..|\[[^\]]*\]|.)
      | \$(?:\(..|\[[^\]]*\]|.)
      | s(?:[+-]?\d|\([+-]?\d\d|[+-]?\(\d\d|\[[^\]]*\]|'[^']*')
      | (?P<zero>[hvwlLDXZoxbSHRNAB])(?P<q>.)(?P<quoted>.*?)(?P=q)
      | (?P<single>.)
    )""",
    re.VERBOSE,
)
_SIMPLE = {"\\": "\\", "e": "\\", "E": "\\", "-": "-", " ": " ", "~": " ", "0": " ", "t": "\t", "'": "´", "`": "`",
           ".": ".", "&": "", "|": "", "^": "", ")": "", "%": "", ":": "", "/": "", ",": "", "c": "", "{": "", "}": "",
           "p": "", "r": "", "u": "", "d": "", "a": "", "z": "", "!": "", "?": "", "j": ""}  # fmt: skip


def glyph(name: str) -> str:
    """A special character by its groff name: "em", "u00E9", "char233", "'e"; "" if unknown."""
    if name in _GLYPHS:
        return _GLYPHS[name]
    if name.startswith("u") and len(name) >= 5:
        try:
            return "".join(chr(int(code, 16)) for code in name[1:].split("_"))
        except (ValueError, OverflowError):
            return ""
    if name.startswith("char") and name[4:].isdigit():
        code = int(name[4:])
        return chr(code) if 32 <= code < 0x110000 else ""
    if len(name) == 2 and name[0] in _ACCENTS and name[1].isalpha():  # \('e, \(:u
        import unicodedata

        return unicodedata.normalize("NFC", name[1] + chr(_ACCENTS[name[0]]))
    return ""


def unescape(text: str, strings: dict[str, str], depth: int = 0) -> str:
    """`text` with its escapes as the characters they show; what only lays out is dropped."""
    if "\\" not in text:
        return text

    def one(match: re.Match[str]) -> str:
        groups = match.groupdict()
        if groups["comment"] is not None:
            return ""
        if groups["glyph2"] is not None:
            return glyph(groups["glyph2"])
        if groups["glyph"] is not None:
            return glyph(groups["glyph"])
        if groups["cname"] is not None:
            return glyph(groups["cname"])
        name = groups["str2"] or groups["strn"] or groups["str1"]
        if name is not None:  # a string's own references were interpolated when it was defined
            value = strings.get(name, STRINGS.get(name, ""))
            return unescape(value, strings, depth + 1) if depth < 1 else ""
        if groups["zero"] is not None:
            if groups["zero"] == "o":  # overstrike: the last character stands for the rest
                shown = unescape(groups["quoted"], strings, depth + 1)
                return shown[-1:] if shown else ""
            return ""
        single = groups["single"]
        if single is not None:
            return _SIMPLE.get(single, single)
        return ""

    return _ESCAPE.sub(one, text)


def joined(pieces: list[tuple[str, bool]]) -> str:
    out = ""
    for text, glue in pieces:
        if not text:
            continue
        if out and not glue and not out.endswith("\t"):
            out += " "
        out += text
    return out


def arguments(rest: str) -> list[str]:
    """A request's arguments: split at spaces, a double-quoted one kept whole ("" is a quote);
    an escape (such as the escaped space "\\ ") never splits one."""
    args: list[str] = []
    index = 0
    length = len(rest)
    while index < length:
        while index < length and rest[index] in " \t":
            index += 1
        if index >= length:
            break
        if rest.startswith('\\"', index):  # a comment ends the arguments
            break
        word = []
        if rest[index] == '"':
            index += 1
            while index < length:
                char = rest[index]
                if char == '"':
                    if rest.startswith('""', index):
                        word.append('"')
                        index += 2
                        continue
                    index += 1
                    break
                if char == "\\" and index + 1 < length:
                    word.append(rest[index : index + 2])
                    index += 2
                    continue
                word.append(char)
                index += 1
        else:
            while index < length and rest[index] not in " \t":
                if rest[index] == "\\" and index + 1 < length:
                    if rest[index + 1] == '"':
                        index = length
                        break
                    word.append(rest[index : index + 2])
                    index += 2
                    continue
                word.append(rest[index])
                index += 1
        args.append("".join(word))
    return args
