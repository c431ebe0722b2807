"""Text that leaves memagent for a terminal or a stream: shown safely, encodable always."""

from __future__ import annotations

import json

# Model and document text is shown, never obeyed: control characters (escape sequences could
# move the cursor, retitle the window or write the clipboard; they also make SVG invalid)
# become their visible Unicode "control pictures", ␛ for ESC. Tab and newline stay.
_VISIBLE = {c: 0x2400 + c for c in range(32) if c not in (9, 10)}
_VISIBLE.update({0x7F: 0x2421, **{c: 0xFFFD for c in range(0x80, 0xA0)}})
# Lone surrogates (from file names that are not UTF-8) cannot be written to a terminal at all.
_VISIBLE.update({c: 0xFFFD for c in range(0xD800, 0xE000)})


def visible(text: str) -> str:
    return text.translate(_VISIBLE)


def json_text(value, indent: int | None = 2) -> str:
    """JSON for stdout. A path from a file name that is not UTF-8 holds lone surrogates, which
    no stream can encode; as \\udcXX escapes they are valid JSON and name the file exactly."""
    return json.dumps(value, ensure_ascii=False, indent=indent).encode("utf-8", "backslashreplace").decode("utf-8")
