"""Tests for memagent_cli.ingest.sources: finding documents and streaming their text.

Everything runs on real files: text files written into tmp_path, PDFs generated here with fpdf2,
and real-world PDFs from the shared test data (tests/data/shared/fixtures/real-pdfs).
"""

from __future__ import annotations

import codecs
import io
import os
import random
import re
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path

import pytest
from fpdf import FPDF
from helpers import SHARED

from memagent_cli.errors import EXIT_USAGE, MemagentError
from memagent_cli.ingest import text as textmod
from memagent_cli.ingest.base import title_of, without_controls
from memagent_cli.ingest.sources import Segment, Source, collect_sources, read_source

REPO = Path(__file__).resolve().parents[1]
REAL_PDFS = SHARED / "fixtures" / "real-pdfs"


# --------------------------------------------------------------------------------------------
# Helpers


class Notes(list):
    """Collects warn() notes; `about(word)` picks the ones that mention it."""

    def about(self, word: str) -> list[str]:
        return [note for note in self if word in note]


@pytest.fixture
def notes() -> Notes:
    return Notes()


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run the test with tmp_path as the current directory, so titles are short and relative."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def only_source(path, notes, **kwargs) -> Source:
    found = collect_sources([str(path)], warn=notes.append, **kwargs)
    assert len(found) == 1
    return found[0]


def read_all(source: Source, notes, **kwargs) -> tuple[str, list[Segment]]:
    """Read a source whole, checking the offsets invariant on the way."""
    segments = list(read_source(source, warn=notes.append, **kwargs))
    position = 0
    for segment in segments:
        assert segment.offset == position
        position += len(segment.text)
    return "".join(segment.text for segment in segments), segments


def read_file(path: Path, notes, **kwargs) -> str:
    return read_all(only_source(path, notes), notes, **kwargs)[0]


def read_stdin(data: bytes, notes) -> str:
    (source,) = collect_sources([], stdin_is_piped=True, warn=notes.append)
    return read_all(source, notes, stdin=io.BytesIO(data))[0]


def make_pdf(path: Path, pages: list[str], *, owner_password: str | None = None, user_password: str = "") -> Path:
    """Write a PDF with one page per entry; an empty entry makes a page with only a drawing."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.multi_cell(0, 10, text)
        else:
            pdf.rect(20, 20, 50, 50, style="F")
    if owner_password is not None:
        pdf.set_encryption(owner_password=owner_password, user_password=user_password)
    pdf.output(str(path))
    return path


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# --------------------------------------------------------------------------------------------
# Text decoding


def test_utf8_text_is_read_whole_with_source_index(in_tmp, notes):
    text = "héllo wörld ✓ 日本語\nsecond line\n"
    (in_tmp / "a.txt").write_text(text, encoding="utf-8")
    source = only_source(in_tmp / "a.txt", notes)
    assert source == Source(str(in_tmp / "a.txt"), "a.txt", "text", len(text.encode()))
    got, segments = read_all(source, notes, index=3)
    assert got == text
    assert all(s.source == 3 and s.page is None for s in segments)
    assert notes == []


def test_utf8_bom_is_dropped(tmp_path, notes):
    (tmp_path / "bom.txt").write_bytes(codecs.BOM_UTF8 + "Ünïcode\n".encode())
    assert read_file(tmp_path / "bom.txt", notes) == "Ünïcode\n"
    assert notes == []


@pytest.mark.parametrize(
    "bom, codec",
    [
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
        (codecs.BOM_UTF32_LE, "utf-32-le"),
        (codecs.BOM_UTF32_BE, "utf-32-be"),
    ],
)
def test_wide_unicode_with_bom_is_decoded_not_called_binary(tmp_path, notes, monkeypatch, bom, codec):
    text = "wide text: ĉu ✓ 😀\r\nline two\n"
    path = tmp_path / "wide.txt"
    path.write_bytes(bom + text.encode(codec))
    # A tiny block splits code units and the BOM itself across reads.
    monkeypatch.setattr(textmod, "BLOCK_SIZE", 3)
    assert read_file(path, notes) == text.replace("\r\n", "\n")
    assert notes == []


def test_invalid_utf8_is_replaced_with_one_warning(tmp_path, notes, monkeypatch):
    # UTF-8 in the first DETECT_SIZE bytes (so UTF-8 is chosen), damaged after them.
    path = tmp_path / "damaged.txt"
    head = "naïve café\n".encode() * (textmod.DETECT_SIZE // 12 + 1)
    path.write_bytes(head + b"caf\xe9 ok\n" * 50 + b"trailing \xc3")  # Latin-1 é, and a cut-off sequence
    monkeypatch.setattr(textmod, "BLOCK_SIZE", 16)  # damage spread over many blocks
    text = read_file(path, notes)
    assert text.startswith("naïve café\n")
    assert "\ncaf\ufffd ok\ncaf\ufffd ok\n" in text
    assert text.endswith("trailing \ufffd")
    assert len(notes) == 1
    assert "damaged.txt" in notes[0] and "invalid UTF-8" in notes[0] and "51 bytes" in notes[0]


@pytest.mark.parametrize(
    "text, codec, named",
    [
        ("名前,年齢,住所\n山田太郎,30,東京都\n佐藤花子,25,大阪府\n", "cp932", "cp932"),
        ("姓名,年龄,城市\n张伟,30,北京\n王芳,25,上海\n", "gb18030", "gb18030"),
        ("이름,나이,도시\n김철수,30,서울\n이영희,25,부산\n", "euc-kr", "cp949"),
        ("Grüße aus München – „schöne Straße“, café crème\n", "cp1252", "cp1252"),
        ("caf\xe9 \xe0 la cr\xe8me br\xfbl\xe9e, gar\xe7on\n", "latin-1", "cp1252"),
    ],
)
def test_legacy_encodings_are_detected_and_named(tmp_path, notes, monkeypatch, text, codec, named):
    path = tmp_path / "legacy.csv"
    path.write_bytes(b"plain ascii first line\n" + (text * 4).encode(codec))
    for block in (3, textmod.BLOCK_SIZE):  # however the bytes arrive, the same text
        notes.clear()
        monkeypatch.setattr(textmod, "BLOCK_SIZE", block)
        assert read_file(path, notes) == "plain ascii first line\n" + text * 4
        assert notes == [f"{path} is not UTF-8; decoded as {named} (detected)"]


def test_crlf_and_lone_cr_become_lf(tmp_path, notes):
    (tmp_path / "dos.txt").write_bytes(b"one\r\ntwo\rthree\n\r\nfour\r")
    assert read_file(tmp_path / "dos.txt", notes) == "one\ntwo\nthree\n\nfour\n"


def test_crlf_split_across_blocks_is_one_newline(tmp_path, notes, monkeypatch):
    monkeypatch.setattr(textmod, "BLOCK_SIZE", 4)
    # Blocks: b"abc\r" | b"\ndef" | b"\r\r\ngh" ... the \r ends a block, the \n starts the next.
    (tmp_path / "split.txt").write_bytes(b"abc\r\ndefg\r\r\nhij\r")
    text, segments = read_all(only_source(tmp_path / "split.txt", notes), notes)
    assert text == "abc\ndefg\n\nhij\n"
    assert len(segments) > 2  # it really was read in several blocks


def test_multibyte_characters_split_across_blocks(tmp_path, notes, monkeypatch):
    text = "ab日本語é😀x" * 20
    (tmp_path / "mb.txt").write_text(text, encoding="utf-8")
    for size in (1, 2, 3, 5, 7):
        monkeypatch.setattr(textmod, "BLOCK_SIZE", size)
        assert read_file(tmp_path / "mb.txt", notes) == text, size
    assert notes == []


def _reference_decode(data: bytes) -> str:
    """What the whole input should decode to, by one-shot decoding."""
    boms = [
        (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose mark it begins with
        (codecs.BOM_UTF32_BE, "utf-32-be"),
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    ]
    body, codec = data, "utf-8"
    for bom, name in boms:
        if data.startswith(bom):
            body, codec = data[len(bom) :], name
            break
    else:  # no mark: the documented rule on the first DETECT_SIZE bytes
        ascii_prefix = len(data) - len(data.lstrip(bytes(range(128))))
        window = data[: textmod.DETECT_SIZE]
        if ascii_prefix < len(window):
            codec = textmod.choose_encoding(window, ascii_prefix, cut=len(data) > len(window)) or codec
    # control characters but newline and tab never reach the model (base.without_controls)
    return without_controls(body.decode(codec, "replace").replace("\r\n", "\n").replace("\r", "\n"))


def test_any_bytes_decode_the_same_whatever_the_block_size(notes, monkeypatch):
    """Random byte soup (bad bytes, split sequences, CR/LF, BOMs) never crashes and never
    depends on where the blocks fall."""
    pieces = [
        b"a",
        b"\r",
        b"\n",
        b"\r\n",
        "é".encode(),
        "😀".encode(),
        b"\xff",
        b"\xc3",
        b"\xf0\x9f",
        b"\xd8",
        b"\x00",
    ]
    boms = [b"", b"", codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE]
    # The decoder alone: a stream whose first bytes hold a NUL is refused as binary before it is
    # decoded (test_binary_streams_are_refused_at_once), so that check is off here.
    rng = random.Random(1234)
    for _ in range(150):
        monkeypatch.setattr(textmod, "_check_stream_head", lambda head, title, ended: None)
        data = rng.choice(boms) + b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        expected = _reference_decode(data)
        for size in (1, 2, 3, 4, 5, textmod.BLOCK_SIZE):
            monkeypatch.setattr(textmod, "BLOCK_SIZE", size)
            notes.clear()
            assert read_stdin(data, notes) == expected, (data, size)
            assert len([n for n in notes if "replaced" in n]) == ("\ufffd" in expected), (data, size)
        monkeypatch.undo()


def test_text_segments_are_bounded_by_block_size(tmp_path, notes, monkeypatch):
    monkeypatch.setattr(textmod, "BLOCK_SIZE", 1024)
    text = "".join(f"line {i}\n" for i in range(20_000))
    (tmp_path / "big.txt").write_text(text)
    got, segments = read_all(only_source(tmp_path / "big.txt", notes), notes)
    assert got == text
    assert len(segments) >= len(text) // 1024
    assert max(len(s.text) for s in segments) <= 1024


def test_empty_file_is_a_source_with_no_text(tmp_path, notes):
    (tmp_path / "empty.txt").write_bytes(b"")
    source = only_source(tmp_path / "empty.txt", notes)
    assert source.kind == "text" and source.size == 0
    assert read_all(source, notes) == ("", [])
    assert notes == []


# --------------------------------------------------------------------------------------------
# Standard input and streaming


def test_piped_stdin_without_paths(notes):
    (source,) = collect_sources([], stdin_is_piped=True, warn=notes.append)
    assert source == Source("-", "stdin", "stdin", None)
    assert read_all(source, notes, stdin=io.BytesIO(b"from a pipe\r\nok"))[0] == "from a pipe\nok"


def test_dash_reads_stdin_among_files(in_tmp, notes):
    (in_tmp / "a.txt").write_text("file a")
    found = collect_sources(["a.txt", "-"], warn=notes.append)
    assert [(s.title, s.kind) for s in found] == [("a.txt", "text"), ("stdin", "stdin")]
    stdin = io.BytesIO(b"piped")
    segments = [
        segment
        for index, source in enumerate(found)
        for segment in read_source(source, warn=notes.append, stdin=stdin, index=index)
    ]
    assert [(s.source, s.text) for s in segments] == [(0, "file a"), (1, "piped")]


def test_dash_twice_is_refused(notes):
    with pytest.raises(MemagentError, match="more than once") as caught:
        collect_sources(["-", "-"], warn=notes.append)
    assert caught.value.exit_code == EXIT_USAGE


def test_stdin_is_streamed_not_slurped(notes, monkeypatch):
    monkeypatch.setattr(textmod, "BLOCK_SIZE", 64)
    stream = io.BytesIO(b"x" * 100_000)
    segments = read_source(Source("-", "stdin", "stdin", None), warn=notes.append, stdin=stream)
    first = next(segments)
    assert first.text == "x" * 64
    assert stream.tell() <= 2 * 64  # the rest has not been read yet
    assert sum(len(s.text) for s in segments) == 100_000 - 64


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX")
def test_named_pipe_yields_text_before_the_writer_finishes(tmp_path, notes):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    first_seen = threading.Event()
    writer_saw_first = []

    def writer():
        with open(fifo, "wb") as pipe:
            pipe.write(b"first part\n")
            pipe.flush()
            # If the reader waited for the whole input, this times out and the test fails.
            writer_saw_first.append(first_seen.wait(timeout=5))
            pipe.write(b"second part\n")

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        source = only_source(fifo, notes)
        assert source.size is None and source.kind == "text"
        segments = read_source(source, warn=notes.append)
        first = next(segments)
        first_seen.set()
        rest = "".join(s.text for s in segments)
    finally:
        first_seen.set()
        thread.join()
    assert first.text == "first part\n"
    assert rest == "second part\n"
    assert writer_saw_first == [True]


# --------------------------------------------------------------------------------------------
# Naming files


def test_no_paths_and_no_pipe_is_a_usage_error(notes):
    with pytest.raises(MemagentError) as caught:
        collect_sources([], stdin_is_piped=False, warn=notes.append)
    assert "pipe" in caught.value.hint and "file" in caught.value.hint
    assert caught.value.exit_code == EXIT_USAGE


def test_missing_path_is_named(tmp_path, notes):
    missing = tmp_path / "nope.txt"
    with pytest.raises(MemagentError, match="no such file") as caught:
        collect_sources([str(missing)], warn=notes.append)
    assert str(missing) in caught.value.message


def test_permission_denied_is_reported(tmp_path, notes, monkeypatch):
    locked = tmp_path / "locked.txt"
    locked.write_text("secret")
    real_open = open

    def refusing_open(file, *args, **kwargs):
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    # Tests may run as root, where chmod 000 would not keep the file closed.
    monkeypatch.setattr("builtins.open", refusing_open)
    with pytest.raises(MemagentError, match="permission denied") as caught:
        collect_sources([str(locked)], warn=notes.append)
    assert str(locked) in caught.value.message


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions and a non-root user")
def test_unreadable_file_really_refused(tmp_path, notes):
    locked = tmp_path / "locked.txt"
    locked.write_text("secret")
    locked.chmod(0)
    with pytest.raises(MemagentError, match="permission denied"):
        collect_sources([str(locked)], warn=notes.append)


def test_binary_file_named_directly_is_refused(tmp_path, notes):
    blob = tmp_path / "program.bin"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    with pytest.raises(MemagentError, match="looks like a binary file of a kind memagent does not read") as caught:
        collect_sources([str(blob)], warn=notes.append)
    assert "program.bin" in caught.value.message and "docs/FORMATS.md" in str(caught.value)


@pytest.mark.parametrize("name, word", [("old.doc", "Word 97-2003"), ("old.ppt", "PowerPoint 97-2003")])
def test_legacy_office_files_are_named_with_what_to_do(tmp_path, notes, name, word):
    blob = tmp_path / name
    blob.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512))
    with pytest.raises(MemagentError, match=f"{word} format, which memagent cannot read") as caught:
        collect_sources([str(blob)], warn=notes.append)
    assert "Save it as ." in str(caught.value)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / name).write_bytes(blob.read_bytes())
    (tmp_path / "folder" / "a.txt").write_text("text")
    notes.clear()
    collect_sources([str(tmp_path / "folder")], warn=notes.append)
    assert len(notes) == 1 and name in notes[0] and word in notes[0]


def test_title_is_relative_under_cwd_and_absolute_outside(tmp_path, notes, monkeypatch):
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "f.txt").write_text("x")
    (tmp_path / "outside.txt").write_text("y")
    monkeypatch.chdir(tmp_path / "inside")
    found = collect_sources(["f.txt", "../outside.txt"], warn=notes.append)
    assert [s.title for s in found] == ["f.txt", str(tmp_path / "outside.txt")]
    assert [s.path for s in found] == ["f.txt", "../outside.txt"]


def test_same_file_twice_is_read_once(in_tmp, notes):
    (in_tmp / "d").mkdir()
    (in_tmp / "d" / "a.txt").write_text("a")
    found = collect_sources(["d/a.txt", "d", "d/a.txt"], warn=notes.append)
    assert [s.title for s in found] == [os.path.join("d", "a.txt")]
    assert len(notes.about("more than once")) == 1


# --------------------------------------------------------------------------------------------
# Folders


def test_folder_is_walked_in_sorted_order_with_folders_interleaved(in_tmp, notes):
    root = in_tmp / "docs"
    for name in ["c.txt", "a.txt", "B.md", "b/x.txt", "b/a/deep.txt", "d/z.txt"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    found = collect_sources(["docs"], warn=notes.append)
    assert [s.title for s in found] == [
        os.path.join("docs", p) for p in ["B.md", "a.txt", "b/a/deep.txt", "b/x.txt", "c.txt", "d/z.txt"]
    ]
    assert all(s.kind == "text" and s.size == len(s.title) - len("docs/") for s in found)
    assert notes == []


def test_hidden_entries_are_skipped_with_one_note_per_folder(in_tmp, notes):
    root = in_tmp / "notes"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]")
    (root / ".env").write_text("KEY=1")
    (root / "sub").mkdir()
    (root / "sub" / ".x").write_text("hidden")
    (root / "sub" / "seen.txt").write_text("visible")
    found = collect_sources(["notes"], warn=notes.append)
    assert [s.title for s in found] == [os.path.join("notes", "sub", "seen.txt")]
    hidden = notes.about("hidden")
    assert len(hidden) == 2
    assert "2 entries in notes" in hidden[0] and ".env" in hidden[0] and ".git/" in hidden[0]
    assert os.path.join("notes", "sub", ".x") in hidden[1]


def test_hidden_path_named_directly_is_read(in_tmp, notes):
    (in_tmp / ".plan").write_text("named on purpose")
    assert read_file(Path(".plan"), notes) == "named on purpose"
    assert notes == []


def test_binary_files_in_folder_are_skipped_with_note(in_tmp, notes):
    root = in_tmp / "mixed"
    root.mkdir()
    (root / "program.so").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    (root / "notes.txt").write_text("text")
    (root / "wide.txt").write_bytes(codecs.BOM_UTF16_LE + "utf-16 is text".encode("utf-16-le"))
    found = collect_sources(["mixed"], warn=notes.append)
    assert [s.title for s in found] == [os.path.join("mixed", n) for n in ["notes.txt", "wide.txt"]]
    assert notes == [f"skipped {os.path.join('mixed', 'program.so')} (binary)"]


def test_many_skips_collapse_into_one_summary(in_tmp, notes):
    root = in_tmp / "bins"
    root.mkdir()
    for i in range(6):
        (root / f"blob{i}.bin").write_bytes(b"\x00\x01")
    (root / "readme.txt").write_text("hi")
    collect_sources(["bins"], warn=notes.append)
    assert notes == ["skipped 6 entries in bins (binary): blob0.bin, blob1.bin, blob2.bin and 3 more"]


def test_pdf_found_by_suffix_or_magic(in_tmp, notes):
    root = in_tmp / "papers"
    root.mkdir()
    make_pdf(root / "upper.PDF", ["Upper case suffix"])
    make_pdf(root / "no-suffix", ["Found by its magic bytes"])
    found = collect_sources(["papers"], warn=notes.append)
    assert [(s.title, s.kind) for s in found] == [
        (os.path.join("papers", "no-suffix"), "pdf"),
        (os.path.join("papers", "upper.PDF"), "pdf"),
    ]
    assert "magic bytes" in read_all(found[0], notes)[0]


@pytest.fixture
def tree(in_tmp) -> Path:
    root = in_tmp / "proj"
    for name in [
        "README.md",
        "src/main.py",
        "src/util.py",
        "docs/guide.md",
        "docs/drafts/old.md",
        "build/out.md",
    ]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    return root


def titles(found: list[Source]) -> list[str]:
    return [os.path.relpath(s.path, "proj").replace(os.sep, "/") for s in found]


def test_include_matches_bare_names_at_any_depth(tree, notes):
    found = collect_sources(["proj"], include=["*.md"], warn=notes.append)
    assert titles(found) == ["README.md", "build/out.md", "docs/drafts/old.md", "docs/guide.md"]


def test_exclude_wins_and_prunes_folders(tree, notes):
    found = collect_sources(["proj"], include=["*.md"], exclude=["build/", "drafts", "README.md"], warn=notes.append)
    assert titles(found) == ["docs/guide.md"]


def test_patterns_match_relative_paths(tree, notes):
    found = collect_sources(["proj"], include=["src/*"], exclude=["src/util.py"], warn=notes.append)
    assert titles(found) == ["src/main.py"]


def test_patterns_do_not_filter_files_named_directly(tree, notes):
    found = collect_sources(["proj/src/main.py"], include=["*.md"], warn=notes.append)
    assert titles(found) == ["src/main.py"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
@pytest.mark.parametrize("link, target", [("self", "."), ("sub/back", "..")])
def test_symlinked_folders_are_followed_but_loops_are_not(in_tmp, notes, link, target):
    root = in_tmp / "loop"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("a")
    (root / link).symlink_to(target, target_is_directory=True)
    (in_tmp / "elsewhere").mkdir()
    (in_tmp / "elsewhere" / "far.txt").write_text("far")
    (root / "linked").symlink_to(in_tmp / "elsewhere", target_is_directory=True)
    (root / "dangling").symlink_to(in_tmp / "gone")
    found = collect_sources(["loop"], warn=notes.append)
    assert titles_of(found) == ["loop/linked/far.txt", "loop/sub/a.txt"]
    assert len(notes.about("already visited")) == 1
    assert len(notes.about("broken link")) == 1


def titles_of(found: list[Source]) -> list[str]:
    return [s.title.replace(os.sep, "/") for s in found]


def test_empty_folder_is_an_error(in_tmp, notes):
    (in_tmp / "void").mkdir()
    with pytest.raises(MemagentError, match="No readable files in void") as caught:
        collect_sources(["void"], warn=notes.append)
    assert "--include" in caught.value.hint


def test_folder_with_nothing_wanted_is_an_error(tree, notes):
    with pytest.raises(MemagentError, match="No readable files in proj"):
        collect_sources(["proj"], include=["*.rst"], warn=notes.append)


def test_folder_with_only_hidden_and_binary_files_is_an_error(in_tmp, notes):
    (in_tmp / "junk").mkdir()
    (in_tmp / "junk" / ".hidden").write_text("x")
    (in_tmp / "junk" / "blob").write_bytes(b"\x00")
    with pytest.raises(MemagentError, match="No readable files"):
        collect_sources(["junk"], warn=notes.append)
    assert len(notes) == 2  # and the user was told why


# --------------------------------------------------------------------------------------------
# PDFs made here


def test_pdf_pages_become_segments_with_page_numbers(tmp_path, notes):
    path = make_pdf(
        tmp_path / "three.pdf",
        ["Alpha page speaks first.", "Bravo page is in the middle.", "Charlie ends it."],
    )
    source = only_source(path, notes)
    assert source.kind == "pdf" and source.size == path.stat().st_size
    text, segments = read_all(source, notes, index=2)
    assert [s.page for s in segments] == [1, 2, 3]
    assert [s.source for s in segments] == [2, 2, 2]
    assert "Alpha page speaks first." in segments[0].text
    assert "Bravo" in segments[1].text and "Alpha" not in segments[1].text
    assert "Charlie ends it." in segments[2].text
    # The separator belongs to the following page's segment.
    assert not segments[0].text.startswith("\n\n")
    assert segments[1].text.startswith("\n\n") and segments[2].text.startswith("\n\n")
    assert text.index("Alpha") < text.index("Bravo") < text.index("Charlie")
    assert notes == []


def test_pdf_page_without_text_is_left_out(tmp_path, notes):
    path = make_pdf(tmp_path / "gap.pdf", ["Before the drawing.", "", "After the drawing."])
    _, segments = read_all(only_source(path, notes), notes)
    assert [s.page for s in segments] == [1, 3]
    assert notes == []


def test_pdf_with_no_text_at_all_says_so(tmp_path, notes):
    path = make_pdf(tmp_path / "drawing.pdf", ["", ""])
    assert read_all(only_source(path, notes), notes) == ("", [])
    # Pages that draw nothing are not worth OCR: they are said to be empty, whatever --ocr says.
    assert notes == [f"{path} has no extractable text (no text layer and no images)"]


def test_pdf_page_that_fails_is_skipped_with_note(tmp_path, notes, monkeypatch):
    import pypdf

    path = make_pdf(tmp_path / "bad-page.pdf", ["Page one is fine.", "Page two explodes.", "Page three is fine."])
    original = pypdf.PageObject.extract_text

    def exploding(self, *args, **kwargs):
        text = original(self, *args, **kwargs)
        if "explodes" in text:
            raise ValueError("broken content stream")
        return text

    monkeypatch.setattr(pypdf.PageObject, "extract_text", exploding)
    text, segments = read_all(only_source(path, notes), notes)
    assert [s.page for s in segments] == [1, 3]
    assert "explodes" not in text
    assert len(notes) == 1 and "page 2" in notes[0] and "broken content stream" in notes[0]


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "empty"),
        (b"this is not a PDF at all\n", "not a pdf"),
        (b"%PDF-1.4\n\x00\x01 garbage", "bad body"),
    ],
)
def test_unreadable_pdf_is_an_error(tmp_path, notes, content, reason):
    path = tmp_path / "broken.pdf"
    path.write_bytes(content)
    with pytest.raises(MemagentError, match="Cannot read PDF") as caught:
        read_all(only_source(path, notes), notes)
    assert "broken.pdf" in caught.value.message and caught.value.hint


def test_encrypted_pdf_made_here(tmp_path, notes):
    path = make_pdf(tmp_path / "locked.pdf", ["Behind a password."], owner_password="owner", user_password="user")
    source = only_source(path, notes)
    with pytest.raises(MemagentError, match="is encrypted") as caught:
        read_all(source, notes)
    assert "--password" in caught.value.hint
    with pytest.raises(MemagentError, match="Wrong password for"):
        read_all(source, notes, password="guess")
    assert "Behind a password." in read_all(source, notes, password="user")[0]


def test_pdf_with_only_an_owner_password_opens_without_one(tmp_path, notes):
    # Such files restrict printing or copying, not reading: every viewer opens them.
    path = make_pdf(tmp_path / "restricted.pdf", ["Anyone may read this."], owner_password="owner")
    assert "Anyone may read this." in read_file(path, notes)
    assert "Anyone may read this." in read_file(path, notes, password="meant for another file")


# --------------------------------------------------------------------------------------------
# Real-world PDFs (pypdf's test resources)


def test_crazyones_matches_its_text(notes):
    """pypdf's reference text, with the ligatures it holds ("misﬁts") written out as NFKC has them."""
    text = read_file(REAL_PDFS / "crazyones.pdf", notes)
    reference = (REAL_PDFS / "crazyones.txt").read_text(encoding="utf-8")
    expected = re.sub("[\ufb00-\ufb06]", lambda m: unicodedata.normalize("NFKC", m.group()), reference)
    assert expected != reference and squash(text) == squash(expected)


def test_multilang_keeps_every_script(notes):
    text = read_file(REAL_PDFS / "multilang.pdf", notes)
    for phrase in ["Hello World", "مرحبا بالعالم", "Привет, мир", "你好世界", "こんにちは世界"]:
        assert phrase in text


def test_broken_xref_is_read_leniently(notes):
    assert "test example" in read_file(REAL_PDFS / "issue-297.pdf", notes)


def test_image_only_pdf_says_no_text(notes, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a file outside the current directory is named by its absolute path
    assert read_file(REAL_PDFS / "imagemagick-lzw.pdf", notes, ocr="never") == ""
    assert notes == [f"{REAL_PDFS / 'imagemagick-lzw.pdf'} has no extractable text (it may be scanned; OCR is off: --ocr never)"]


@pytest.mark.parametrize(
    "name, expected_pages, expected_chars",
    # GeoBase: 22,700 characters as pypdf gives them, less its running head and foot on 17 pages and
    # its contents' leader dots (test_geobase_report_without_its_running_heads)
    [("Seige_of_Vicksburg_Sample_OCR.pdf", 6, 12_600), ("GeoBase_NHNC1_Data_Model_UML_EN.pdf", 19, 20_200)],
)
def test_multi_page_real_pdfs(notes, name, expected_pages, expected_chars):
    text, segments = read_all(only_source(REAL_PDFS / name, notes), notes)
    assert [s.page for s in segments] == list(range(1, expected_pages + 1))
    assert abs(len(text) - expected_chars) < expected_chars * 0.05


def test_geobase_report_without_its_running_heads(notes):
    """A Word-made report (not TeX): its head "National Hydro Network, Data Model – Edition 1.0
    2004-06" (read once, on page 3, where it first heads a page) and its foot "GeoBase® iii", "GeoBase® 6"
    (roman numbers in the front matter) on 17 of 19 pages are left out, named in one note; its
    contents' leaders are one "…"; its revision history, a Word table with borders, is rows."""
    path = REAL_PDFS / "GeoBase_NHNC1_Data_Model_UML_EN.pdf"
    text, _ = read_all(only_source(path, notes), notes)
    assert notes == [
        f"{title_of(str(path))}: left out the running heads and feet of 17 of 19 pages: "
        "'National Hydro Network, Data Model – Edition 1.0 2004-06'; 'GeoBase® iii'"
    ]
    assert text.count("Data Model – Edition 1.0 2004-06") == 1
    assert not re.search(r"GeoBase® \S", text) and "GeoBase® \n" in text  # the copyright page's line stays
    assert "\n1 OVERVIEW … 6 \n2 LRS … 6 \n2.1 LRS MODEL … 7 \n" in text
    assert "...." not in text
    # its revision history, a table with borders, as rows (docs/FORMATS.md, "PDF tables")
    assert "\nDate | Version | Description\nSeptember 2002 | Draft 01 | First draft for discussion with Nova Scotia\n" in text
    assert "\nJuly 2003 | Draft 02 | Draft version after discussion and decisions made concerning the detailed NHNC1 " in text


@pytest.mark.parametrize(
    "name, password, phrase",
    [
        ("r2-user-password.pdf", "asdfzxcv", "pdf encryption test"),
        ("libreoffice-writer-password.pdf", "openpassword", "Lorem ipsum"),
        ("r6-user-password.pdf", "asdfzxcv", "pdf encryption test"),
        ("crazyones-encrypted-256.pdf", "password", "The Crazy Ones"),
    ],
)
def test_encrypted_real_pdfs(notes, name, password, phrase):
    source = only_source(REAL_PDFS / name, notes)
    with pytest.raises(MemagentError, match="is encrypted") as caught:
        read_all(source, notes)
    assert caught.value.hint == "Pass --password PASSWORD"
    with pytest.raises(MemagentError, match="Wrong password"):
        read_all(source, notes, password="not-it")
    assert phrase in read_all(source, notes, password=password)[0]


def test_aes_without_cryptography_asks_for_the_crypto_extra():
    # A fresh interpreter where neither AES backend pypdf knows can be imported.
    script = (
        "import sys\n"
        "sys.modules['cryptography'] = None\n"
        "sys.modules['Crypto'] = None\n"
        "from memagent_cli.errors import MemagentError\n"
        "from memagent_cli.ingest.sources import collect_sources, read_source\n"
        f"(s,) = collect_sources([{str(REAL_PDFS / 'r6-user-password.pdf')!r}], warn=print)\n"
        "try:\n"
        "    list(read_source(s, password='asdfzxcv', warn=print))\n"
        "except MemagentError as e:\n"
        "    print('ERROR', e.message, '|', e.hint)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert "ERROR" in result.stdout, result.stdout + result.stderr
    assert "cryptography" in result.stdout and "pypdf[crypto]" in result.stdout


# --- inputs that are not regular files ------------------------------------------------------------


def _unix_socket(path: Path):
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    return sock


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_devices_and_sockets_named_directly_are_refused_in_one_line(tmp_path, notes):
    sock = _unix_socket(tmp_path / "sock")
    try:
        for path, kind in (("/dev/zero", "character device"), (str(tmp_path / "sock"), "socket")):
            with pytest.raises(MemagentError) as caught:
                collect_sources([path], warn=notes.append)
            assert f"{path} is a {kind}, not a file" in str(caught.value)
            assert caught.value.exit_code == EXIT_USAGE and "head -c 1M" in caught.value.hint
    finally:
        sock.close()
    assert notes == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX")
def test_special_files_in_a_folder_are_skipped_with_a_note_naming_what_they_are(in_tmp, notes):
    folder = in_tmp / "mixed"
    folder.mkdir()
    (folder / "a.txt").write_text("text\n")
    os.symlink("/dev/null", folder / "null")  # a character device, reached through a link
    os.mkfifo(folder / "pipe")  # opening it would wait for a writer that never comes
    sock = _unix_socket(folder / "sock")
    try:
        found = collect_sources(["mixed"], warn=notes.append)
    finally:
        sock.close()
    assert [s.title for s in found] == [os.path.join("mixed", "a.txt")]
    assert sorted(notes) == [
        f"skipped {os.path.join('mixed', 'null')} (character device)",
        f"skipped {os.path.join('mixed', 'pipe')} (named pipe)",
        f"skipped {os.path.join('mixed', 'sock')} (socket)",
    ]


class _Endless(io.RawIOBase):
    """A stream that never ends, like /dev/zero or /dev/urandom behind a pipe; counts its reads."""

    def __init__(self, fill: bytes):
        self.fill, self.reads = fill, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.reads += 1
        if self.reads > 100:  # without the check, reading would go on for ever
            raise AssertionError("an endless stream was read on and on")
        n = min(len(buffer), 4096)
        buffer[:n] = (self.fill * n)[:n]
        return n


@pytest.mark.parametrize("fill", [b"\0", bytes(range(256))], ids=["zeros", "every byte"])
def test_an_endless_binary_stream_is_refused_at_once(notes, fill):
    stream = _Endless(fill)
    (source,) = collect_sources([], stdin_is_piped=True, warn=notes.append)
    with pytest.raises(MemagentError, match="stdin looks like binary data"):
        read_all(source, notes, stdin=stream)
    assert stream.reads <= 3  # SNIFF_SIZE bytes, in reads of 4 KB: refused before anything is used


def test_a_pdf_piped_in_is_refused_with_what_to_do(notes):
    (source,) = collect_sources([], stdin_is_piped=True, warn=notes.append)
    with pytest.raises(MemagentError, match="is a PDF arriving as a stream") as caught:
        read_all(source, notes, stdin=io.BytesIO(b"%PDF-1.7\n" + b"x" * 100))
    assert "Save it to a file" in caught.value.hint


@pytest.mark.parametrize("bom", [codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE], ids=["16le", "16be", "32be"])
def test_wide_unicode_streams_are_text_even_in_one_byte_reads(notes, monkeypatch, bom):
    codec = {codecs.BOM_UTF16_LE: "utf-16-le", codecs.BOM_UTF16_BE: "utf-16-be", codecs.BOM_UTF32_BE: "utf-32-be"}[bom]
    monkeypatch.setattr(textmod, "BLOCK_SIZE", 1)  # the byte-order mark arrives a byte at a time
    assert read_stdin(bom + "wide text".encode(codec), notes) == "wide text"
