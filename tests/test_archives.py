"""Zip archives are read like folders, within bounds that make a zip bomb or a hostile name
harmless: memagent_cli.ingest.sources (collect_sources, read_source)."""

from __future__ import annotations

import io
import os
import zipfile

import pytest

from memagent_cli.errors import MemagentError
from memagent_cli.ingest import archive
from memagent_cli.ingest.sources import collect_sources, read_source


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def make_zip(path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def read_text(source, notes) -> str:
    return "".join(s.text for s in read_source(source, warn=notes.append))


def test_a_named_archive_is_read_like_a_folder_in_sorted_order(in_tmp):
    make_zip(in_tmp / "bundle.zip", {"b/two.txt": b"second", "a.txt": b"first", "b/one.md": b"middle"})
    notes: list[str] = []
    found = collect_sources(["bundle.zip"], warn=notes.append)
    assert [s.title for s in found] == ["bundle.zip/a.txt", "bundle.zip/b/one.md", "bundle.zip/b/two.txt"]
    assert [s.member for s in found] == [("a.txt",), ("b/one.md",), ("b/two.txt",)]
    assert all(s.path == "bundle.zip" and s.kind == "text" for s in found)
    assert [read_text(s, notes) for s in found] == ["first", "middle", "second"]
    assert notes == []


def test_an_archive_inside_a_folder_takes_its_place_in_the_walk(in_tmp):
    (in_tmp / "docs").mkdir()
    (in_tmp / "docs" / "a.txt").write_text("alpha")
    make_zip(in_tmp / "docs" / "m.zip", {"inner.txt": b"inside"})
    (in_tmp / "docs" / "z.txt").write_text("omega")
    found = collect_sources(["docs"], warn=lambda note: None)
    assert [s.title for s in found] == [
        os.path.join("docs", "a.txt"),
        os.path.join("docs", "m.zip") + "/inner.txt",
        os.path.join("docs", "z.txt"),
    ]


def test_include_exclude_hidden_and_binary_rules_apply_inside(in_tmp):
    make_zip(
        in_tmp / "mixed.zip",
        {
            "keep.md": b"kept",
            "skip.log": b"excluded",
            "build/out.md": b"in an excluded folder",
            ".hidden.md": b"hidden",
            "__MACOSX/._keep.md": b"resource fork",
            "prog.bin": b"\x7fELF\x00\x00\x00",
        },
    )
    notes: list[str] = []
    found = collect_sources(["mixed.zip"], include=["*.md", "*.bin"], exclude=["build"], warn=notes.append)
    assert [s.title for s in found] == ["mixed.zip/keep.md"]
    assert "skipped mixed.zip/prog.bin (binary)" in notes
    assert any("hidden" in n and ".hidden.md" in n for n in notes)


def test_documents_inside_keep_their_format(in_tmp):
    from fpdf import FPDF

    pdf = FPDF()
    for words in ("page one words", "page two words"):
        pdf.add_page()
        pdf.set_font("Helvetica", size=12)
        pdf.cell(0, 10, words)
    make_zip(in_tmp / "papers.zip", {"paper.pdf": bytes(pdf.output())})
    (source,) = collect_sources(["papers.zip"], warn=lambda note: None)
    assert source.kind == "pdf" and source.title == "papers.zip/paper.pdf"
    segments = list(read_source(source, warn=lambda note: None))
    assert [s.place.page for s in segments] == [1, 2]
    assert "page two words" in segments[1].text


def test_nested_archives_open_to_a_bounded_depth(in_tmp):
    inner = io.BytesIO()
    make_zip(inner, {"deep.txt": b"deep text"})
    middle = io.BytesIO()
    make_zip(middle, {"inner.zip": inner.getvalue()})
    make_zip(in_tmp / "outer.zip", {"middle.zip": middle.getvalue()})
    (source,) = collect_sources(["outer.zip"], warn=lambda note: None)
    assert source.title == "outer.zip/middle.zip/inner.zip/deep.txt"
    assert source.member == ("middle.zip", "inner.zip", "deep.txt")
    assert read_text(source, []) == "deep text"
    # One level more than ARCHIVE_MAX_DEPTH: skipped with a note, not opened.
    make_zip(in_tmp / "outer2.zip", {"outer.zip": (in_tmp / "outer.zip").read_bytes(), "top.txt": b"top"})
    notes: list[str] = []
    found = collect_sources(["outer2.zip"], warn=notes.append)
    assert [s.title for s in found] == ["outer2.zip/top.txt"]
    assert any("nested more than 3 deep" in n for n in notes)


def test_names_that_climb_out_are_never_read(in_tmp):
    (in_tmp / "secret.txt").write_text("do not read")
    with zipfile.ZipFile(in_tmp / "evil.zip", "w") as archive:
        archive.writestr("../secret.txt", b"climbing")
        archive.writestr("/etc/passwd", b"absolute")
        archive.writestr("ok.txt", b"fine")
    notes: list[str] = []
    found = collect_sources(["evil.zip"], warn=notes.append)
    assert [s.title for s in found] == ["evil.zip/ok.txt"]
    assert any("unsafe name" in n for n in notes)
    assert sorted(os.listdir(in_tmp)) == ["evil.zip", "secret.txt"]  # nothing written anywhere


def test_a_zip_bomb_member_is_skipped_by_its_ratio(in_tmp):
    make_zip(in_tmp / "bomb.zip", {"zeros.txt": b"\0" * (8 << 20), "ok.txt": b"fine"})
    notes: list[str] = []
    found = collect_sources(["bomb.zip"], warn=notes.append)
    assert [s.title for s in found] == ["bomb.zip/ok.txt"]
    assert notes == ["skipped bomb.zip/zeros.txt (compressed over 200:1, a zip bomb?)"]


def test_an_archive_past_the_total_size_is_refused_whole(in_tmp, monkeypatch):
    monkeypatch.setattr(archive, "MAX_BYTES", 1000)
    make_zip(in_tmp / "big.zip", {"a.txt": b"x" * 800, "b.txt": b"y" * 800}, zipfile.ZIP_STORED)
    with pytest.raises(MemagentError, match="over the 0 GiB memagent expands|zip bomb"):
        collect_sources(["big.zip"], warn=lambda note: None)


def test_a_damaged_or_fake_zip_is_one_line(in_tmp):
    (in_tmp / "fake.zip").write_bytes(b"this is not a zip archive at all")
    with pytest.raises(MemagentError, match="not a readable zip archive"):
        collect_sources(["fake.zip"], warn=lambda note: None)
    (in_tmp / "folder").mkdir()
    (in_tmp / "folder" / "fake.zip").write_bytes(b"PK\x03\x04 truncated")
    (in_tmp / "folder" / "a.txt").write_text("a")
    notes: list[str] = []
    found = collect_sources(["folder"], warn=notes.append)
    assert [s.title for s in found] == [os.path.join("folder", "a.txt")]
    assert len(notes) == 1 and "fake.zip" in notes[0] and "not a readable zip archive" in notes[0]


def test_an_encrypted_member_is_skipped(in_tmp):
    make_zip(in_tmp / "locked.zip", {"open.txt": b"open"})
    data = bytearray((in_tmp / "locked.zip").read_bytes())
    # Set the "encrypted" flag bit in the local and central headers, as a password-protected zip has.
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature)
        data[at + offset] |= 0x1
    (in_tmp / "locked.zip").write_bytes(bytes(data))
    notes: list[str] = []
    with pytest.raises(MemagentError, match="No readable files"):
        collect_sources(["locked.zip"], warn=notes.append)
    assert notes == ["skipped locked.zip/open.txt (encrypted)"]


def test_an_empty_archive_says_so(in_tmp):
    make_zip(in_tmp / "empty.zip", {})
    with pytest.raises(MemagentError, match="No readable files in empty.zip"):
        collect_sources(["empty.zip"], warn=lambda note: None)
