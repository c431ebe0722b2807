"""E-mail: .eml files (the standard library's email package) and Outlook .msg files (extract-msg).

A message reads as one unit: its header lines (From, To, Cc, Date, Subject, decoded, one line
each), a blank line and its body (the text/plain part, else the text/html part as text; an
Outlook message's plain body, else its HTML body, else its RTF body). An Outlook message's To,
Cc and Bcc are its recipient table, as Outlook shows them, not the transport headers it may
carry (those of the copy that reached one mailbox); a line with no recipient is left out. Each
attachment that memagent reads (a PDF, a Word file, a text file…) follows as a document of its
own, placed `within` its file name ("mail.eml/report.pdf p. 2"), through `context.nested`, which
picks the reader and skips what memagent does not read with a note. A forwarded message
(message/rfc822, or an Outlook message attached to another) is read the same way, named
"forwarded-1.eml" or "forwarded-1.msg". Nothing an attachment names or links to is fetched, and
nothing is written to disk.
"""

from __future__ import annotations

import codecs
import io
import logging
import mimetypes
import re
from collections.abc import Iterator
from email.message import Message
from typing import Any, BinaryIO, TypeVar

from ..errors import MemagentError
from .base import Part, ReadContext, short_reason, strip_controls, unreadable

# Bounds on what one message expands to: an attachment past MAX_ATTACHMENT_BYTES (decoded) is
# skipped with a note, and attachments past the first MAX_ATTACHMENTS are not read.
MAX_ATTACHMENT_BYTES = 100 << 20
MAX_ATTACHMENTS = 200
_Attachment = TypeVar("_Attachment")  # an .eml part or an extract-msg attachment

_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"

# Terminal escape sequences (CSI such as "\x1b[31m", OSC such as a window title, and the
# two-character ones) and the other control characters: a header or body holding them could
# repaint the user's terminal when the text is shown, so they are dropped whole.
_SPACES = re.compile(r"\s+")

_EML_HINT = "Check that it is a complete e-mail message saved as .eml"
_MSG_HINT = "Check that it is a complete Outlook message saved as .msg"


# --------------------------------------------------------------------------------------------
# .eml


def read_eml(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    from email import policy
    from email.parser import BytesParser

    head = file.read(64 * 1024)
    file.seek(0)
    # The parser takes anything: binary data becomes a "message" with no headers and a body of
    # junk. A real message has headers, and no NUL byte before its first blank line.
    header_block = re.split(rb"\r?\n\r?\n", head, maxsplit=1)[0]
    if b"\0" in header_block:
        raise unreadable(context.title, "e-mail", "not an e-mail message (binary data)", _EML_HINT)
    try:
        message = BytesParser(policy=policy.default).parse(file)
    except Exception as exc:  # the parser is lenient; this is a safety net, not a known path
        raise unreadable(context.title, "e-mail", short_reason(exc), _EML_HINT) from exc
    if not message.keys():
        raise unreadable(context.title, "e-mail", "not an e-mail message (no mail headers)", _EML_HINT)

    body_part = _find_body(message)
    texts, attachments, truncated = _layout(message, body_part)
    if truncated:
        context.warn(f"{context.title}: the message looks truncated (a MIME part is not closed)")

    lines = [f"{label}: {value}" for label, value in _eml_headers(message) if value]
    body = [_part_text(part, context) for part in ([body_part] if body_part is not None else []) + texts]
    yield Part("\n".join(lines) + "\n\n" + "\n\n".join(t for t in body if t.strip()))

    yield from _eml_attachments(attachments, context)


def _eml_headers(message: Message) -> list[tuple[str, str]]:
    return [
        ("From", _header(message, "From", every=False)),
        ("To", _header(message, "To", every=True)),
        ("Cc", _header(message, "Cc", every=True)),
        ("Date", _header(message, "Date", every=False)),
        ("Subject", _header(message, "Subject", every=False)),
    ]


def _header(message: Message, name: str, *, every: bool) -> str:
    """A header's decoded value on one line (RFC 2047 words decoded, controls dropped); all its
    occurrences joined with ", " when `every`, else the first."""
    values: list[str] = []
    for key, raw in message.raw_items():
        if key.lower() != name.lower():
            continue
        # Controls are dropped before parsing too: an escape sequence inside an address makes the
        # parser lose the address.
        values.append(clean_line(_decode_header(message, key, strip_controls(str(raw)))))
        if not every:
            break
    return ", ".join(v for v in values if v)


def _decode_header(message: Message, name: str, raw: str) -> str:
    try:
        return str(message.policy.header_fetch_parse(name, raw))
    except Exception:  # a header the modern parser chokes on: decode its encoded words only
        from email.header import decode_header, make_header

        try:
            return str(make_header(decode_header(raw)))
        except Exception:
            return raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def clean_line(text: str) -> str:
    """`text` on one line: escape sequences and control characters dropped, white space collapsed."""
    return _SPACES.sub(" ", strip_controls(text)).strip()


def _find_body(message: Message) -> Message | None:
    try:
        found = message.get_body(preferencelist=("plain", "html"))  # type: ignore[attr-defined]
    except Exception:  # RecursionError on absurd nesting, or a malformed structure
        return None
    return found if isinstance(found, Message) else None


def _layout(message: Message, body: Message | None) -> tuple[list[Message], list[Message], bool]:
    """The message's inline text parts besides the body (a list footer), its attachments and
    forwarded messages, in order, and whether a MIME part is left unclosed (a truncated file)."""
    from email import errors

    texts: list[Message] = []
    attachments: list[Message] = []
    truncated = False
    # (part, inside multipart/alternative); walked with a stack, not recursion, so that a
    # message nested thousands deep costs no RecursionError.
    stack: list[tuple[Message, bool]] = [(message, False)]
    while stack:
        part, alternative = stack.pop()
        truncated = truncated or any(isinstance(d, errors.CloseBoundaryNotFoundDefect) for d in part.defects)
        if part is body:
            continue
        kind = part.get_content_type()
        if kind in ("message/rfc822", "message/global"):
            attachments.append(part)
        elif part.is_multipart():
            inside = alternative or kind == "multipart/alternative"
            payload = part.get_payload()
            if isinstance(payload, list):
                stack.extend((sub, inside) for sub in reversed(payload) if isinstance(sub, Message))
        elif _is_attachment(part):
            attachments.append(part)
        elif alternative:
            continue  # another rendering of the body
        elif kind in ("text/plain", "text/html"):
            texts.append(part)
        elif part.get_content_maintype() == "text":
            attachments.append(part)  # a calendar invitation, a CSV: read as a document
    return texts, attachments, truncated


def _is_attachment(part: Message) -> bool:
    disposition = part.get_content_disposition()
    return disposition == "attachment" or bool(part.get_param("filename", header="content-disposition") or part.get_param("name"))


def _part_text(part: Message, context: ReadContext) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    text = decode_bytes(payload, part.get_content_charset(), context)
    if part.get_content_type() == "text/html":
        text = html_text(text)
    return strip_controls(text)


def decode_bytes(data: bytes, charset: str | None, context: ReadContext) -> str:
    """`data` decoded with its declared `charset`; undeclared (or wrongly declared) 8-bit text
    as UTF-8 if it is, else in the encoding charset-normalizer detects."""
    declared = _codec(charset)
    if declared is not None:
        try:
            return data.decode(declared)
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    from .text import detect_encoding

    found = detect_encoding(data[: 64 * 1024])
    if found is not None and declared is None:
        context.warn(f"{context.title}: a part with no declared charset decoded as {found} (detected)")
    return data.decode(declared or found or "utf-8", errors="replace")


def _codec(charset: str | None) -> str | None:
    if not charset:
        return None
    try:
        return codecs.lookup(charset).name
    except (LookupError, ValueError):  # "unknown-8bit", "x-user-defined" and the like
        return None


def _first_attachments(attachments: list[_Attachment], context: ReadContext) -> list[_Attachment]:
    """The attachments that are read: the first MAX_ATTACHMENTS, with a warning when there are more."""
    if len(attachments) > MAX_ATTACHMENTS:
        context.warn(f"{context.title}: read only the first {MAX_ATTACHMENTS} of {len(attachments)} attachments")
    return attachments[:MAX_ATTACHMENTS]


def _eml_attachments(parts: list[Message], context: ReadContext) -> Iterator[Part]:
    if context.nested is None:
        return
    forwarded = 0
    for number, part in enumerate(_first_attachments(parts, context), 1):
        kind = part.get_content_type()
        if kind in ("message/rfc822", "message/global"):
            forwarded += 1
            data = _forwarded_bytes(part)
            name = _forward_name(part, forwarded, ".eml")
            if data is None:
                context.warn(f"skipped {context.title}/{name} (a forwarded message that cannot be read back)")
                continue
        else:
            name = safe_filename(part.get_filename(), number, kind)
            size = _decoded_size(part)
            if size > MAX_ATTACHMENT_BYTES:
                _too_big(context, name, size)
                continue
            payload = part.get_payload(decode=True)
            data = payload if isinstance(payload, bytes) else b""
        yield from context.nested(io.BytesIO(data), name, context)


def _forwarded_bytes(part: Message) -> bytes | None:
    payload = part.get_payload()
    inner = payload[0] if isinstance(payload, list) and payload else None
    if not isinstance(inner, Message):
        return None
    try:
        return inner.as_bytes()
    except Exception:  # a header the generator cannot write back
        return None


def _forward_name(part: Message, number: int, ending: str) -> str:
    own = part.get_filename()
    if own:
        name = safe_filename(own, number, None)
        if name.lower().endswith(ending):
            return name
    return f"forwarded-{number}{ending}"


def _decoded_size(part: Message) -> int:
    """About how many bytes `part` decodes to, known before decoding it."""
    raw = part.get_payload()
    size = len(raw) if isinstance(raw, (str, bytes)) else 0
    if str(part.get("content-transfer-encoding", "")).strip().lower() == "base64":
        return size * 3 // 4
    return size


def _too_big(context: ReadContext, name: str, size: int) -> None:
    limit = MAX_ATTACHMENT_BYTES >> 20
    context.warn(f"skipped {context.title}/{name} ({size / (1 << 20):.0f} MB, over the {limit} MB read from an attachment)")


def safe_filename(name: str | None, number: int, content_type: str | None) -> str:
    """An attachment's name as a bare file name: no folders, no control characters, at most
    ~120 characters with its ending kept; "attachment-N" (with an ending the content type
    suggests) when nothing usable is left."""
    cleaned = clean_line(str(name or "")).replace("\\", "/").rsplit("/", 1)[-1].strip()
    cleaned = cleaned.lstrip(".").strip()  # no hidden-file names, no "." or ".."
    if not cleaned:
        ending = (mimetypes.guess_extension(content_type) or "") if content_type else ""
        return f"attachment-{number}{ending}"
    if len(cleaned) > 120:
        stem, dot, ending = cleaned.rpartition(".")
        keep = f".{ending}" if dot and stem and len(ending) <= 10 else ""
        cleaned = cleaned[: 120 - len(keep)].rstrip() + keep
    return cleaned


# --------------------------------------------------------------------------------------------
# HTML bodies


def html_text(html: str) -> str:
    """The visible text of an HTML body (decoded): no scripts, styles or markup."""
    from .web import html_to_text

    # lxml refuses a str that carries an encoding declaration: an XHTML body would read as empty.
    return html_to_text(_XML_DECLARATION.sub("", html))


_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")


# --------------------------------------------------------------------------------------------
# .msg


def read_msg(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    _quiet_extract_msg()
    head = file.read(len(_OLE))
    file.seek(0)
    if head != _OLE:
        raise unreadable(context.title, "Outlook message", "not an Outlook message (not an OLE compound file)", _MSG_HINT)
    message = _open_msg(file, context.title)
    try:
        recipients = _msg_recipients(message)
        lines = [
            f"{label}: {clean_line(value)}"
            for label, value in (
                ("From", _msg_value(message, "sender")),
                *recipients,
                ("Date", _msg_date(message)),
                ("Subject", _msg_value(message, "subject")),
            )
            if value and clean_line(value)
        ]
        yield Part("\n".join(lines) + "\n\n" + strip_controls(_msg_body(message, context)))
        yield from _msg_attachments(message, context)
    finally:
        message.close()


def _quiet_extract_msg() -> None:
    # extract-msg and RTFDE log at every level, up to "critical" for files they only half read;
    # memagent says what it lost in its own notes, and nothing else may reach stderr.
    for name in ("extract_msg", "RTFDE", "olefile"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _open_msg(file: BinaryIO, title: str) -> Any:
    import extract_msg
    from extract_msg.exceptions import InvalidFileFormatError

    if _encrypted_ole(file):
        raise MemagentError(
            f"{title} is password-protected",
            hint="memagent cannot open encrypted Office files; save an unprotected copy and name that",
        )
    file.seek(0)
    try:
        # The open file, never bytes: olefile takes bytes shorter than a sector (a truncated
        # file) for a path to open. strict=False: a message class extract-msg does not know (a
        # custom form) still opens, as a plain MSGFile, and what it has of a subject and body is read.
        message = extract_msg.openMsg(file, strict=False, delayAttachments=True, errorBehavior=_tolerated())
    except InvalidFileFormatError as exc:
        raise unreadable(title, "Outlook message", short_reason(exc), _MSG_HINT) from exc
    except Exception as exc:  # olefile and extract-msg raise many types on damaged files
        raise unreadable(title, "Outlook message", short_reason(exc), _MSG_HINT) from exc
    try:
        known = bool(message.classType)
    except Exception:
        known = False
    if not known:
        message.close()
        raise unreadable(title, "Outlook message", "an OLE file that is not an Outlook message", _MSG_HINT)
    return message


def _tolerated() -> Any:
    from extract_msg.enums import ErrorBehavior

    # Damage inside an attachment or the RTF body costs that piece, not the message.
    return (
        ErrorBehavior.ATTACH_SUPPRESS_ALL
        | ErrorBehavior.RTFDE
        | ErrorBehavior.STANDARDS_VIOLATION
        | ErrorBehavior.NAMED_NAME_STREAM
    )


def _encrypted_ole(file: BinaryIO) -> bool:
    import olefile  # type: ignore[import-untyped]

    try:
        with olefile.OleFileIO(file) as ole:
            return bool(ole.exists("EncryptedPackage"))
    except Exception:
        return False


def _msg_property(message: Any, name: str) -> Any:
    """The property `name` of a message (or of a recipient), None where extract-msg cannot read it:
    a property stored wrong leaves out what it holds, not the message."""
    try:
        return getattr(message, name, None)
    except Exception:
        return None


def _msg_value(message: Any, name: str) -> str:
    value = _msg_property(message, name)
    return value if isinstance(value, str) else ""


# The recipient table's types (PidTagRecipientType, MS-OXOMSG 2.2.3.1; higher bits are flags).
_RECIPIENT_LINES = (("To", 1), ("Cc", 2), ("Bcc", 3))


def _msg_recipients(message: Any) -> list[tuple[str, str]]:
    """The To, Cc and Bcc lines as Outlook shows them: each recipient once, "Name <address>" (or
    whichever of the two it has), empty ones dropped, "; " between them."""
    found: dict[int, list[str]] = {kind: [] for _, kind in _RECIPIENT_LINES}
    # None where extract-msg refuses the whole table for one recipient of an unknown type.
    for recipient in _msg_property(message, "recipients") or []:
        try:
            kind = int(recipient.typeFlags) & 0xF
        except Exception:
            continue
        shown = _recipient_text(_msg_value(recipient, "name"), _msg_value(recipient, "email"))
        if kind in found and shown:
            found[kind].append(shown)
    if not any(found.values()):
        # No usable table: the transport headers are all there is. extract-msg joins a header's
        # addresses with ";" and turns its commas into ";" (quoted names included).
        from email.utils import getaddresses

        for label, kind in _RECIPIENT_LINES:
            header = _msg_value(message, label.lower()).replace(";", ",")
            found[kind] = [_recipient_text(name, address) for name, address in getaddresses([header])]
    return [(label, "; ".join(_unique(found[kind]))) for label, kind in _RECIPIENT_LINES]


def _recipient_text(name: str, address: str) -> str:
    name, address = clean_line(name), clean_line(address)
    if address.startswith("/"):
        # An Exchange (X.500) address, "/o=.../cn=...": Outlook shows the name alone.
        address = ""
    if name and address and name.casefold() != address.casefold():
        return f"{name} <{address}>"
    return name or address


def _unique(texts: list[str]) -> list[str]:
    seen: set[str] = set()
    kept: list[str] = []
    for text in texts:
        if text and text.casefold() not in seen:
            seen.add(text.casefold())
            kept.append(text)
    return kept


def _msg_date(message: Any) -> str:
    from email.utils import format_datetime

    value = _msg_property(message, "date")
    try:
        return format_datetime(value) if value is not None else ""
    except Exception:  # not a date after all
        return ""


def _msg_body(message: Any, context: ReadContext) -> str:
    body = _msg_value(message, "body")
    if body.strip():
        return body
    html = _msg_property(message, "htmlBody")
    if isinstance(html, bytes) and html.strip():
        from .web import decode_html

        text = html_text(decode_html(html, context.title, context.warn))
        if text.strip():
            return text
    rtf = _msg_property(message, "rtfBody")
    if isinstance(rtf, bytes) and rtf.strip():
        from striprtf import striprtf

        rtf_to_text: Any = striprtf.rtf_to_text  # untyped
        try:
            return str(rtf_to_text(rtf.decode("latin-1"), errors="ignore"))
        except Exception:
            return ""
    return ""


def _msg_attachments(message: Any, context: ReadContext) -> Iterator[Part]:
    from extract_msg.enums import AttachmentType

    try:
        attachments = list(getattr(message, "attachments", None) or [])
    except Exception as exc:
        context.warn(f"{context.title}: attachments skipped ({short_reason(exc)})")
        return
    if context.nested is None:
        return
    forwarded = 0
    for number, attachment in enumerate(_first_attachments(attachments, context), 1):
        try:
            kind = attachment.type
            data = attachment.data
        except Exception as exc:
            context.warn(f"skipped {context.title}/attachment-{number} ({short_reason(exc)})")
            continue
        if isinstance(data, bytes):
            name = safe_filename(_attachment_name(attachment), number, _msg_value(attachment, "mimetype") or None)
        elif hasattr(data, "exportBytes"):  # an Outlook message attached to this one
            forwarded += 1
            name = f"forwarded-{forwarded}.msg"
            try:
                data = data.exportBytes()
            except Exception as exc:
                context.warn(f"skipped {context.title}/{name} ({short_reason(exc)})")
                continue
        else:
            why = "a link, not fetched" if kind == AttachmentType.WEB else "an attachment of a kind memagent does not read"
            context.warn(f"skipped {context.title}/{safe_filename(_attachment_name(attachment), number, None)} ({why})")
            continue
        if len(data) > MAX_ATTACHMENT_BYTES:
            _too_big(context, name, len(data))
            continue
        yield from context.nested(io.BytesIO(data), name, context)


def _attachment_name(attachment: Any) -> str:
    for field in ("longFilename", "shortFilename", "displayName"):
        value = _msg_value(attachment, field)
        if value.strip():
            return value
    return ""
