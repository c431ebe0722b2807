"""E-mail: .eml (the email package builds the messages) and Outlook .msg (extract-msg's own OLE
writer builds them, property by property): headers, bodies, charsets, attachments read as
documents of their own, bounds, and damaged or disguised files."""

from __future__ import annotations

import datetime
import io
import logging
import struct
from email.message import EmailMessage
from pathlib import Path

import pytest
from fpdf import FPDF

from memagent_cli.errors import MemagentError
from memagent_cli.ingest import mail
from memagent_cli.ingest.base import Place, ReadContext
from memagent_cli.ingest.sources import collect_sources, read_source


@pytest.fixture
def notes() -> list[str]:
    return []


def read(path: Path, notes: list[str], **options) -> tuple[str, list[Place]]:
    srcs = collect_sources([str(path)], warn=notes.append)
    segments = list(read_source(srcs[0], warn=notes.append, **options))
    return "".join(s.text for s in segments), [s.place for s in segments]


def pdf_bytes(*pages: str) -> bytes:
    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.cell(text=text)
    return bytes(pdf.output())


def docx_bytes(text: str) -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def base_message(subject: str = "Quarterly report") -> EmailMessage:
    message = EmailMessage()
    message["From"] = "Alice Example <alice@example.com>"
    message["To"] = "bob@example.com, Carol <carol@example.com>"
    message["Cc"] = "dave@example.com"
    message["Date"] = "Mon, 01 Jan 2024 10:00:00 +0000"
    message["Subject"] = subject
    return message


HEAD = (
    "From: Alice Example <alice@example.com>\n"
    "To: bob@example.com, Carol <carol@example.com>\n"
    "Cc: dave@example.com\n"
    "Date: Mon, 01 Jan 2024 10:00:00 +0000\n"
)


# --------------------------------------------------------------------------------------------
# .eml


def test_eml_headers_body_and_attachments_with_their_places(tmp_path, notes):
    message = base_message()
    message.set_content("Hello Bob,\nthe report is attached.\n")
    message.add_alternative("<p>Hello <b>Bob</b> (HTML version)</p>", subtype="html")
    message.add_attachment(
        pdf_bytes("Revenue rose 12 percent", "Costs fell"), maintype="application", subtype="pdf", filename="report.pdf"
    )
    message.add_attachment("plain notes\nline 2\n", filename="notes.txt")
    message.add_attachment(
        docx_bytes("Memo in Word"),
        maintype="application",
        subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
        filename="memo.docx",
    )
    message.add_attachment(b"\x89PNG\r\n\x1a\n" + bytes(64), maintype="image", subtype="png", filename="chart.png")
    inner = EmailMessage()
    inner["From"] = "eve@example.com"
    inner["Subject"] = "Original thread"
    inner.set_content("The forwarded words.\n")
    message.add_attachment(inner)
    path = tmp_path / "mail.eml"
    path.write_bytes(bytes(message))

    text, places = read(path, notes, ocr="never")

    assert text == (
        HEAD + "Subject: Quarterly report\n\nHello Bob,\nthe report is attached.\n"
        "\n\nRevenue rose 12 percent\n\nCosts fell"
        "\n\nplain notes\nline 2\n"
        "\n\nMemo in Word"
        "\n\nFrom: eve@example.com\nSubject: Original thread\n\nThe forwarded words.\n"
    )
    assert places == [
        Place(),
        Place("page", 1, part="report.pdf"),
        Place("page", 2, part="report.pdf"),
        Place(part="notes.txt"),
        Place(part="memo.docx"),
        Place(part="forwarded-1.eml"),
    ]
    assert notes == [f"skipped {path}/chart.png (an image, and OCR is off or not installed)"]


def test_eml_image_attachment_does_not_crash_with_ocr_on(tmp_path, notes):
    message = base_message()
    message.set_content("See the picture.\n")
    message.add_attachment(b"\x89PNG\r\n\x1a\n" + bytes(64), maintype="image", subtype="png", filename="broken.png")
    path = tmp_path / "pic.eml"
    path.write_bytes(bytes(message))
    text, places = read(path, notes)
    assert text == HEAD + "Subject: Quarterly report\n\nSee the picture.\n"
    assert places == [Place()]
    # With OCR installed the damaged image fails to open; without it, it is skipped: a note either way.
    assert len(notes) == 1
    assert notes[0].startswith((f"skipped {path}/broken.png", f"skipped the rest of {path}/broken.png"))


def test_rfc2047_subject_and_sender_are_decoded(tmp_path, notes):
    message = EmailMessage()
    message["From"] = "=?utf-8?q?J=C3=BCrgen_M=C3=BCller?= <jm@example.de>"
    message["To"] = "=?iso-8859-1?q?Ren=E9?= <rene@example.fr>"
    message["Subject"] = "=?utf-8?b?w4ljb2xlIGQnw6l0w6kg?= =?iso-8859-1?q?caf=E9?= (2024)"
    message.set_content("Bonjour.\n")
    path = tmp_path / "encoded.eml"
    path.write_bytes(bytes(message))
    text, _ = read(path, notes)
    assert (
        text == "From: Jürgen Müller <jm@example.de>\nTo: René <rene@example.fr>\nSubject: École d'été café (2024)\n\nBonjour.\n"
    )


def test_terminal_escapes_in_headers_and_body_do_not_survive(tmp_path, notes):
    raw = (
        b"From: Mallory \x1b[31m<m@example.com>\x1b[0m\n"
        b"To: =?utf-8?q?victim=1B]0;owned=07?= <v@example.com>\n"
        b"Subject: alert \x1b[2J\x1b[Hcleared\x07\x08\n"
        b"Content-Type: text/plain; charset=utf-8\n\n"
        b"body \x1b[31mred\x1b[0m text\n"
    )
    path = tmp_path / "escape.eml"
    path.write_bytes(raw)
    text, _ = read(path, notes)
    assert text == 'From: Mallory <m@example.com>\nTo: "victim" <v@example.com>\nSubject: alert cleared\n\nbody red text\n'
    assert "\x1b" not in text and "[31m" not in text


def test_folded_header_is_one_line(tmp_path, notes):
    path = tmp_path / "folded.eml"
    path.write_bytes(b"From: a@example.com\nSubject: a long\n  folded\n\tsubject\n\nbody\n")
    text, _ = read(path, notes)
    assert text == "From: a@example.com\nSubject: a long folded subject\n\nbody\n"


def test_latin1_body_with_declared_charset(tmp_path, notes):
    raw = (
        b"From: a@example.com\nSubject: Gr\xfc\xdfe\nMIME-Version: 1.0\n"
        b"Content-Type: text/plain; charset=iso-8859-1\nContent-Transfer-Encoding: 8bit\n\n"
        b"Gr\xfc\xdfe aus K\xf6ln, \xe0 bient\xf4t.\n"
    )
    path = tmp_path / "latin1.eml"
    path.write_bytes(raw)
    text, _ = read(path, notes)
    assert text.endswith("\n\nGrüße aus Köln, à bientôt.\n")
    assert notes == []


def test_quoted_printable_latin1_from_the_email_package(tmp_path, notes):
    message = base_message()
    message.set_content("Prix: 12 €? Non: 12 £, déjà payé.\n".replace("€", "E"), charset="iso-8859-1", cte="quoted-printable")
    path = tmp_path / "qp.eml"
    path.write_bytes(bytes(message))
    assert b"d=E9j=E0" in path.read_bytes()  # it really is Latin-1, quoted-printable
    text, _ = read(path, notes)
    assert text == HEAD + "Subject: Quarterly report\n\nPrix: 12 E? Non: 12 £, déjà payé.\n"


def test_undeclared_8bit_body_is_detected_and_noted(tmp_path, notes):
    body = "Der Bericht für das dritte Quartal enthält größere Änderungen als erwartet, schöne Grüße.\n"
    raw = b"From: a@example.com\nSubject: no charset\nContent-Transfer-Encoding: 8bit\n\n" + body.encode("cp1252")
    path = tmp_path / "undeclared.eml"
    path.write_bytes(raw)
    text, _ = read(path, notes)
    assert text == "From: a@example.com\nSubject: no charset\n\n" + body
    assert notes == [f"{path}: a part with no declared charset decoded as cp1252 (detected)"]


def test_html_only_body_is_text_without_script_or_style(tmp_path, notes):
    message = base_message("HTML only")
    message.set_content(
        "<html><head><style>p { color: red }</style><title>T</title></head>"
        "<body><p>First paragraph.</p><script>alert('x')</script><p>Second <b>bold</b> one.</p></body></html>",
        subtype="html",
    )
    path = tmp_path / "html.eml"
    path.write_bytes(bytes(message))
    text, places = read(path, notes)
    assert text == HEAD + "Subject: HTML only\n\nFirst paragraph.\n\nSecond bold one."
    assert places == [Place()]


def test_attachment_names_are_bare_names(tmp_path, notes):
    message = base_message()
    message.set_content("Three files.\n")
    message.add_attachment("one\n", filename="../../etc/evil.txt")
    message.add_attachment("two\n", filename="C:\\Users\\x\\\x1b[31mred.txt")
    message.add_attachment(pdf_bytes("Unnamed PDF"), maintype="application", subtype="pdf", disposition="attachment")
    path = tmp_path / "names.eml"
    path.write_bytes(bytes(message))
    text, places = read(path, notes)
    assert [p.part for p in places] == [None, "evil.txt", "red.txt", "attachment-3.pdf"]
    assert text.endswith("\n\none\n\n\ntwo\n\n\nUnnamed PDF")


def test_reader_without_nested_reads_only_the_message(notes):
    message = base_message()
    message.set_content("Body.\n")
    message.add_attachment("attached\n", filename="a.txt")
    context = ReadContext("m.eml", "m.eml", notes.append)
    parts = list(mail.read_eml(io.BytesIO(bytes(message)), context))
    assert [(p.text, p.place) for p in parts] == [(HEAD + "Subject: Quarterly report\n\nBody.\n", Place())]


def test_attachment_bounds(tmp_path, notes, monkeypatch):
    monkeypatch.setattr(mail, "MAX_ATTACHMENTS", 2)
    monkeypatch.setattr(mail, "MAX_ATTACHMENT_BYTES", 1000)
    message = base_message()
    message.set_content("Many files.\n")
    message.add_attachment(b"x" * 3000, maintype="application", subtype="octet-stream", filename="big.bin")
    message.add_attachment("small\n", filename="small.txt")
    message.add_attachment("never read\n", filename="third.txt")
    path = tmp_path / "bounds.eml"
    path.write_bytes(bytes(message))
    text, places = read(path, notes)
    assert [p.part for p in places] == [None, "small.txt"]
    assert "never read" not in text
    assert notes == [
        f"{path}: read only the first 2 of 3 attachments",
        f"skipped {path}/big.bin (0 MB, over the 0 MB read from an attachment)",
    ]


def test_truncated_eml_keeps_what_arrived(tmp_path, notes):
    message = base_message()
    message.set_content("The body arrived whole.\n")
    message.add_attachment(
        docx_bytes("Lost words"),
        maintype="application",
        subtype="vnd.openxmlformats-officedocument.wordprocessingml.document",
        filename="report.docx",
    )
    data = bytes(message)
    path = tmp_path / "truncated.eml"
    path.write_bytes(data[: len(data) * 2 // 3])  # the end of the zip, its directory, is lost
    text, places = read(path, notes)
    assert text == HEAD + "Subject: Quarterly report\n\nThe body arrived whole.\n"
    assert places == [Place()]
    assert notes[0] == f"{path}: the message looks truncated (a MIME part is not closed)"
    assert notes[1].startswith(f"skipped the rest of {path}/report.docx (Cannot read Word file")
    assert len(notes) == 2


def test_binary_junk_named_eml_is_one_line_error(tmp_path, notes):
    path = tmp_path / "junk.eml"
    path.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert str(caught.value) == (
        f"Cannot read e-mail {path}: not an e-mail message (binary data). "
        "Check that it is a complete e-mail message saved as .eml"
    )


def test_text_without_headers_named_eml_is_refused(tmp_path, notes):
    path = tmp_path / "notes.eml"
    path.write_text("just some words\nand more words\n")
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert caught.value.message == f"Cannot read e-mail {path}: not an e-mail message (no mail headers)"


# --------------------------------------------------------------------------------------------
# .msg, built with extract-msg's OLE writer from the properties MS-OXMSG defines


def _u(text: str) -> bytes:
    return text.encode("utf-16-le")


def _fixed(tag: int, kind: int, value: int) -> bytes:
    return struct.pack("<IIQ", (tag << 16) | kind, 6, value)


def _variable(tag: int, kind: int, size: int) -> bytes:
    return struct.pack("<IIII", (tag << 16) | kind, 6, size, 0)


def _filetime(moment: datetime.datetime) -> int:
    return int((moment - datetime.datetime(1601, 1, 1, tzinfo=datetime.timezone.utc)).total_seconds() * 10**7)


def _add_message(
    writer,
    prefix,
    *,
    subject,
    body=None,
    html=None,
    rtf=None,
    date=None,
    headers=None,
    recipients=(),
    attachments=(),
    embedded=False,
):
    import compressed_rtf

    props: list[bytes] = []

    def stream(tag: int, kind: int, data: bytes) -> None:
        writer.addEntry([*prefix, f"__substg1.0_{tag:04X}{kind:04X}"], data)
        props.append(_variable(tag, kind, len(data) + (2 if kind == 0x1F else 0)))

    stream(0x001A, 0x1F, _u("IPM.Note"))
    stream(0x0037, 0x1F, _u(subject))
    stream(0x0C1A, 0x1F, _u("Alice Example"))
    stream(0x5D01, 0x1F, _u("alice@example.com"))
    if headers is not None:  # PidTagTransportMessageHeaders: the headers of the copy received
        stream(0x007D, 0x1F, _u(headers))
    if body is not None:
        stream(0x1000, 0x1F, _u(body))
    if html is not None:
        stream(0x1013, 0x0102, html)
    if rtf is not None:
        stream(0x1009, 0x0102, compressed_rtf.compress(rtf))
    if date is not None:
        props.append(_fixed(0x0039, 0x0040, _filetime(date)))
    counts = struct.pack("<IIII", len(recipients), len(attachments), len(recipients), len(attachments))
    for number, (kind, name, address) in enumerate(recipients):
        where = [*prefix, f"__recip_version1.0_#{number:08X}"]
        writer.addEntry(where, storage=True)
        entries = [_fixed(0x0C15, 0x0003, kind)]
        for tag, value in ((0x3001, name), (0x39FE, address), (0x3003, address)):
            writer.addEntry([*where, f"__substg1.0_{tag:04X}001F"], _u(value))
            entries.append(_variable(tag, 0x1F, len(_u(value)) + 2))
        writer.addEntry([*where, "__properties_version1.0"], bytes(8) + b"".join(entries))
    for number, attachment in enumerate(attachments):
        where = [*prefix, f"__attach_version1.0_#{number:08X}"]
        writer.addEntry(where, storage=True)
        entries = [_fixed(0x0E21, 0x0003, number)]
        if "message" in attachment:  # an Outlook message attached to this one
            entries.append(_fixed(0x3705, 0x0003, 5))
            entries.append(struct.pack("<IIII", (0x3701 << 16) | 0x000D, 6, 0xFFFFFFFF, 0))
            writer.addEntry([*where, "__substg1.0_3701000D"], storage=True)
            _add_message(writer, [*where, "__substg1.0_3701000D"], embedded=True, **attachment["message"])
        else:
            entries.append(_fixed(0x3705, 0x0003, 1))
            writer.addEntry([*where, "__substg1.0_37010102"], attachment["data"])
            entries.append(_variable(0x3701, 0x0102, len(attachment["data"])))
            writer.addEntry([*where, "__substg1.0_3707001F"], _u(attachment["name"]))
            entries.append(_variable(0x3707, 0x1F, len(_u(attachment["name"])) + 2))
        writer.addEntry([*where, "__properties_version1.0"], bytes(8) + b"".join(entries))
    header = bytes(8) + counts + (b"" if embedded else bytes(8))
    writer.addEntry([*prefix, "__properties_version1.0"], header + b"".join(props))


def make_msg(**message) -> bytes:
    from extract_msg.ole_writer import OleWriter

    writer = OleWriter()
    writer.addEntry(["__nameid_version1.0"], storage=True)
    for name in ("__substg1.0_00020102", "__substg1.0_00030102", "__substg1.0_00040102"):
        writer.addEntry(["__nameid_version1.0", name], b"")
    _add_message(writer, [], **message)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_ole(stream: str) -> bytes:
    from extract_msg.ole_writer import OleWriter

    writer = OleWriter()
    writer.addEntry([stream], b"x" * 5000)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


FULL_MSG = dict(
    subject="Budget \x1b[31mplan",
    body="Hi Bob,\r\nthe numbers are attached.\r\n",
    date=datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
    recipients=[(1, "Bob", "bob@example.com"), (2, "Carol", "carol@example.com")],
    attachments=[
        {"name": "budget.pdf", "data": pdf_bytes("Budget page one", "Budget page two")},
        {"name": "../notes.txt", "data": b"attached notes\n"},
        {"message": {"subject": "Earlier mail", "body": "The earlier words."}},
    ],
)


def test_msg_headers_body_and_attachments_with_their_places(tmp_path, notes, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "budget.msg"
    path.write_bytes(make_msg(**FULL_MSG))
    text, places = read(path, notes)
    assert text == (
        "From: Alice Example <alice@example.com>\nTo: Bob <bob@example.com>\nCc: Carol <carol@example.com>\n"
        "Date: Tue, 02 Jan 2024 03:04:05 +0000\nSubject: Budget plan\n\nHi Bob,\nthe numbers are attached.\n"
        "\n\nBudget page one\n\nBudget page two"
        "\n\nattached notes\n"
        "\n\nFrom: Alice Example <alice@example.com>\nSubject: Earlier mail\n\nThe earlier words."
    )
    assert places == [
        Place(),
        Place("page", 1, part="budget.pdf"),
        Place("page", 2, part="budget.pdf"),
        Place(part="notes.txt"),
        Place(part="forwarded-1.msg"),
    ]
    assert notes == []
    assert capfd.readouterr().err == ""
    assert [r for r in caplog.records if r.name.startswith(("extract_msg", "RTFDE", "olefile"))] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budget.msg"]  # no attachment saved anywhere


def test_msg_html_body_is_text(tmp_path, notes):
    html = b"<html><head><style>p{}</style></head><body><p>Hello <b>HTML</b> body</p><script>evil()</script></body></html>"
    path = tmp_path / "html.msg"
    path.write_bytes(make_msg(subject="H", html=html))
    text, _ = read(path, notes)
    assert text == "From: Alice Example <alice@example.com>\nSubject: H\n\nHello HTML body"


def test_msg_rtf_body_is_text(tmp_path, notes):
    rtf = rb"{\rtf1\ansi{\fonttbl\f0\fswiss Helvetica;}\f0\pard Hello RTF world\par}"
    path = tmp_path / "rtf.msg"
    path.write_bytes(make_msg(subject="R", rtf=rtf))
    text, _ = read(path, notes)
    assert text == "From: Alice Example <alice@example.com>\nSubject: R\n\nHello RTF world\n"


def test_msg_junk_bytes_are_one_line_error(tmp_path, notes):
    path = tmp_path / "junk.msg"
    path.write_bytes(b"\x00\x01 not an OLE file" * 100)
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert str(caught.value) == (
        f"Cannot read Outlook message {path}: not an Outlook message (not an OLE compound file). "
        "Check that it is a complete Outlook message saved as .msg"
    )


def test_msg_ole_file_that_is_not_a_message(tmp_path, notes, capfd):
    path = tmp_path / "word.msg"
    path.write_bytes(make_ole("WordDocument"))
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert caught.value.message == f"Cannot read Outlook message {path}: an OLE file that is not an Outlook message"
    assert capfd.readouterr().err == ""


def test_msg_encrypted_ole_is_called_password_protected(tmp_path, notes):
    path = tmp_path / "locked.msg"
    path.write_bytes(make_ole("EncryptedPackage"))
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert caught.value.message == f"{path} is password-protected"


@pytest.mark.parametrize("keep", [1500, 3000, 6000])
def test_truncated_msg_is_one_line_error(tmp_path, notes, keep):
    data = make_msg(**FULL_MSG)
    path = tmp_path / "cut.msg"
    path.write_bytes(data[:keep])
    with pytest.raises(MemagentError) as caught:
        read(path, notes)
    assert caught.value.message.startswith(f"Cannot read Outlook message {path}: ")
    assert "\n" not in str(caught.value)


# --------------------------------------------------------------------------------------------
# .msg recipients: the recipient table, as Outlook shows it, not the transport headers

SAMPLES = Path(__file__).parent / "data" / "samples"


def test_real_msg_to_is_its_recipient_table_not_its_transport_header(notes):
    # A real delivery-failure notice kept as an Outlook message (msg_parser's test file, tests/data/README.md):
    # its transport header says "To: <yosipnps@model.com>", its recipient table holds the address,
    # and its attached original (a message in the message) is read the same way.
    text, places = read(SAMPLES / "delivery-failure.msg", notes)
    head, _, rest = text.partition("\n\n")
    assert head.splitlines() == [
        "From: Mail Delivery Subsystem <mailer-daemon@tjdpf.org.cn>",
        "To: yosipnps@model.com",
        "Date: Mon, 27 Nov 2017 09:44:30 +0000",
        "Subject: 投递状态通知 (Failure Notice)",
    ]
    assert rest.startswith("Hi. This is an automatically generated Delivery Status Notification at\n")
    assert places[:2] == [Place(), Place(part="forwarded-1.msg")]  # then the original's PDF, 4 pages
    assert "\n\nFrom: Meredith chen <yosipnps@model.com>\nTo: hp_lsz@tjdpf.org.cn\nDate: " in text
    assert "<>" not in text and "Cc:" not in text
    assert notes == []


def test_msg_recipient_table_wins_over_transport_headers(tmp_path, notes):
    path = tmp_path / "table.msg"
    headers = "To: Someone Else <else@example.com>\r\nCc: <>\r\nSubject: Table\r\n"
    table = [
        (1, "Bob", "bob@example.com"),
        (1, "Bob", "BOB@example.com"),  # listed twice: shown once
        (2, "", ""),  # an empty recipient: dropped
        (2, "carol@example.com", "carol@example.com"),  # a name that is the address: shown once
        (2, "Dave", "/o=ExchangeLabs/ou=Exchange Administrative Group/cn=Recipients/cn=dave"),
        (3, "", "erin@example.com"),
    ]
    path.write_bytes(make_msg(subject="Table", body="Words.", headers=headers, recipients=table))
    text, _ = read(path, notes)
    assert text == (
        "From: Alice Example <alice@example.com>\nTo: Bob <bob@example.com>\nCc: carol@example.com; Dave\n"
        "Bcc: erin@example.com\nSubject: Table\n\nWords."
    )


def test_msg_with_only_empty_cc_recipients_has_no_cc_line(tmp_path, notes):
    path = tmp_path / "nocc.msg"
    headers = "To: Bob <bob@example.com>\r\nCc: <>\r\n"
    path.write_bytes(make_msg(subject="S", headers=headers, recipients=[(1, "Bob", "bob@example.com"), (2, "", "")]))
    text, _ = read(path, notes)
    assert text == "From: Alice Example <alice@example.com>\nTo: Bob <bob@example.com>\nSubject: S\n\n"


def test_msg_without_recipient_table_falls_back_to_transport_headers(tmp_path, notes):
    path = tmp_path / "headers.msg"
    headers = 'To: "Doe, Jane" <jane@example.com>, <>\r\nCc: <>\r\nBcc: \r\n'
    path.write_bytes(make_msg(subject="H", body="Body.", headers=headers))
    text, _ = read(path, notes)
    assert text == "From: Alice Example <alice@example.com>\nTo: Doe, Jane <jane@example.com>\nSubject: H\n\nBody."
