"""Outside text as a person is shown it: `visible()` is the one function every file name, document
text, model output, server message and trace content goes through before a terminal or a Markdown
export shows it; `clip()` shortens it to one line; JSON text gets the escapes JSON leaves out."""

from __future__ import annotations

# Model and document text is shown, never obeyed: control characters (escape sequences could
# move the cursor, retitle the window or write the clipboard; they also make SVG invalid)
# become their visible Unicode "control pictures", ␛ for ESC. Tab and newline stay.
_VISIBLE = {c: 0x2400 + c for c in range(32) if c not in (9, 10)}
_VISIBLE.update({0x7F: 0x2421, **{c: 0xFFFD for c in range(0x80, 0xA0)}})
# Lone surrogates (from file names that are not UTF-8) cannot be written to a terminal at all.
_VISIBLE.update({c: 0xFFFD for c in range(0xD800, 0xE000)})


def visible(text: str) -> str:
    return text.translate(_VISIBLE)


def clip(text: str | None, limit: int) -> str:
    """Outside text on one line of at most `limit` characters: white space runs become one space,
    a longer text ends in "…", and it is visible()."""
    text = " ".join((text or "").split())
    return visible(text if len(text) <= limit else text[: limit - 1] + "…")


SCHEMA = 1  # the version of every JSON shape memagent prints or exports (docs/JSON.md); a rename bumps it

# json.dumps escapes C0 controls but writes DEL and the C1 range (U+0080-U+009F, where U+009B is a
# CSI to many terminals) as they are; they can only stand inside strings, where \\u escapes are valid.
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0))}


def json_controls_escaped(text: str) -> str:
    """JSON text (from json.dumps) with DEL and C1 controls escaped too, so it is safe on a terminal."""
    return text.translate(_JSON_ESCAPES)
