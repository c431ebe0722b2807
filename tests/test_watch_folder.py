"""`watch`'s folder state and finding, apart from running (runs/folder.py, runs/finding.py): settling
and growing on a fake clock, when to look at everything and when to write, the documents found
at the paths the file system names (real files) against a look at everything, and the complete
chunks of a document still being written (chunking's hold_last, with a real vocabulary)."""

from __future__ import annotations

import os

import pytest

from memagent_cli.core.chunking import IngestStats, iter_chunks, layout
from memagent_cli.core.pipeline import SourceOptions
from memagent_cli.ingest.sources import Segment, Source
from memagent_cli.model.gguf import read_gguf
from memagent_cli.model.tokenizer import load_tokenizer
from memagent_cli.runs.finding import Finder
from memagent_cli.runs.folder import BYTES_PER_TOKEN, LOST_BATCH, Folder, Spacer, Stat, growable, lost_some


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def text(title: str, kind: str = "text", member: tuple[str, ...] = ()) -> Source:
    return Source(path=title, title=title, kind=kind, size=None, member=member)


def see(folder: Folder, source: Source, size: int, mtime: float, place: tuple[str, ...] = ()) -> str | None:
    """The document as found at `mtime` (its version known by size and time)."""
    return folder.found(source, Stat(size, int(mtime * 1e9)), mtime, (0, place or (source.title,)), "/w/" + source.path)


def titles(docs) -> list[str]:
    return [d.source.title for d in docs]


def test_a_document_is_read_once_it_has_settled():
    clock = Clock()
    folder = Folder(settle=2.0, chunk_tokens=64, clock=clock)
    old, new = text("old.txt"), text("new.txt")
    assert see(folder, old, 100, clock.now - 10) == "queued"  # unchanged for longer than settle: settled already
    assert see(folder, new, 100, clock.now - 0.5) == "settling"
    assert titles(folder.due()[0]) == ["old.txt"] and folder.wait() == 0.05  # due now: the least wait
    folder.began(folder.docs["old.txt"], growing=False)
    assert folder.due() == ([], []) and folder.wait() == pytest.approx(1.5)
    clock.now += 1.5
    final, growing = folder.due()
    assert titles(final) == ["new.txt"] and growing == []
    folder.began(final[0], growing=False)
    assert folder.due() == ([], []) and folder.wait() is None  # nothing pending: no timer

    # an edit (the same size, another time) settles again from when it was seen
    assert see(folder, old, 100, clock.now) == "settling"
    assert see(folder, old, 100, clock.now) is None  # the same version seen again says nothing
    clock.now += 1.9
    assert folder.due() == ([], []) and folder.wait() == pytest.approx(0.1)
    clock.now += 0.1
    assert titles(folder.due()[0]) == ["old.txt"]


def test_a_reading_stopped_by_a_change_waits_to_settle_again():
    clock = Clock()
    folder = Folder(settle=2.0, clock=clock)
    see(folder, text("a.txt"), 100, clock.now - 10)
    (doc,), _ = folder.due()
    folder.began(doc, growing=False)
    clock.now += 5
    folder.stopped("a.txt")
    assert folder.due() == ([], []) and folder.wait() == pytest.approx(2.0)
    clock.now += 2
    assert titles(folder.due()[0]) == ["a.txt"]


def test_a_document_seen_growing_is_read_by_its_complete_chunks():
    clock = Clock()
    folder = Folder(settle=2.0, chunk_tokens=64, clock=clock)
    log = text("build.log")
    chunk = 64 * BYTES_PER_TOKEN  # its bytes guessed before any reading counted them
    assert see(folder, log, 100, clock.now) == "settling"  # seen once: a copy may look so, so no reading yet
    assert folder.due() == ([], [])
    clock.now += 0.5
    assert see(folder, log, int(chunk) - 1, clock.now) == "growing"
    assert folder.due() == ([], [])  # grown, but not by a chunk since it was last read (never)
    clock.now += 0.5
    see(folder, log, int(chunk), clock.now)
    final, growing = folder.due()
    assert final == [] and titles(growing) == ["build.log"]
    folder.began(growing[0], growing=True)
    assert folder.due() == ([], []) and folder.docs["build.log"].done is None  # its final rows are still to come
    folder.counted("build.log", 1000, 100)  # 10 bytes a token as that reading counted: 640 a chunk
    clock.now += 0.5
    see(folder, log, int(chunk) + 639, clock.now)
    assert folder.due() == ([], [])
    clock.now += 0.5
    see(folder, log, int(chunk) + 640, clock.now)
    assert titles(folder.due()[1]) == ["build.log"]
    clock.now += 2  # it stopped growing: read to its end, and a copy of the same size is no longer growing
    (doc,), growing = folder.due()
    assert growing == []
    folder.began(doc, growing=False)
    assert not doc.grew and doc.done == doc.stat


def test_a_file_made_empty_then_written_at_once_is_not_growing():
    clock = Clock()
    folder = Folder(settle=2.0, chunk_tokens=64, clock=clock)
    copy = text("copy.txt")
    see(folder, copy, 0, clock.now)  # seen between its making and its one write
    clock.now += 0.5
    assert see(folder, copy, 5000, clock.now) == "settling" and folder.due() == ([], [])


def test_only_plain_text_is_read_as_it_grows():
    assert growable(text("a.log"))
    assert not growable(text("a.pdf", kind="pdf"))  # a PDF half written has no readable start
    assert not growable(text("a.log.gz"))  # nor has a compressed stream
    assert not growable(text("a.zip/b.txt", member=("b.txt",)))
    clock = Clock()
    folder = Folder(settle=2.0, chunk_tokens=None, clock=clock)  # InfMem: never read as it grows
    log = text("a.log")
    see(folder, log, 10, clock.now)
    assert see(folder, log, 100_000, clock.now + 0.5) == "settling" and folder.due() == ([], [])


def test_documents_at_a_path_leave_with_it_and_come_in_their_order():
    folder = Folder(settle=0.0, clock=Clock())
    for title, place in (("docs/b.txt", ("b.txt",)), ("docs/sub/a.txt", ("sub", "a.txt")), ("docs/a.txt", ("a.txt",))):
        see(folder, text(title), 10, 0.0, place)
    assert titles(folder.ordered()) == ["docs/a.txt", "docs/b.txt", "docs/sub/a.txt"]  # as the walk sorts them
    assert folder.at("/w/docs/b.txt") == ["docs/b.txt"]
    assert folder.at("/w/docs/sub") == ["docs/sub/a.txt"]  # a folder gone takes what was in it
    assert sorted(folder.at("/w/docs")) == ["docs/a.txt", "docs/b.txt", "docs/sub/a.txt"]
    assert folder.at("/w/docs/nothing.txt") == [] and folder.at("/w/do") == []
    assert folder.others(["docs/a.txt"]) == ["docs/b.txt", "docs/sub/a.txt"]
    folder.gone("docs/sub/a.txt")
    assert folder.at("/w/docs/sub") == [] and titles(folder.ordered()) == ["docs/a.txt", "docs/b.txt"]


def test_the_whole_folder_is_looked_at_rarely_and_after_a_flood():
    clock = Clock(0.0)
    looks = Spacer(share=0.005, least=60.0, clock=clock)
    assert looks.due()  # the first pass
    looks.done(0.01)
    assert not looks.due() and looks.wait() == pytest.approx(60.0)  # a quick look: every minute
    clock.now = 60.0
    assert looks.due()
    looks.done(2.0)  # a slow one (a big folder): 199 × its time after it, half a percent of the time
    assert looks.wait() == pytest.approx(398.0)
    assert not lost_some(LOST_BATCH - 1) and lost_some(LOST_BATCH)


def test_the_outputs_are_written_at_most_a_share_of_the_time():
    clock = Clock(0.0)
    pacer = Spacer(share=0.1, clock=clock)
    assert pacer.due()
    pacer.done(0.05)  # a write of 50 ms: the next one at least 450 ms later
    assert not pacer.due() and pacer.wait() == pytest.approx(0.45)
    clock.now = 0.45
    assert pacer.due()


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    for name in ("a.txt", "sub/b.txt", "sub/deeper/c.md", ".hidden/d.txt", "build/e.txt", "f.bin", ".g.txt"):
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_bytes(b"\x00\x01" if name.endswith(".bin") else f"text of {name}\n".encode())
    (tmp_path / "named.log").write_text("a log\n", encoding="utf-8")
    (docs / "out.csv").write_text("written by the watch\n", encoding="utf-8")
    notes: list[str] = []
    options = SourceOptions(exclude=("build",), written=frozenset({str(docs / "out.csv")}))
    return tmp_path, Finder(["docs", "named.log"], options, notes.append), notes


def test_paths_named_are_found_as_a_look_at_everything_finds_them(tree):
    root, finder, notes = tree
    everything = finder.everything()
    assert [f.source.title for f in everything] == ["docs/a.txt", "docs/sub/b.txt", "docs/sub/deeper/c.md", "named.log"]
    assert [f.place for f in everything] == sorted(f.place for f in everything)  # places sort as the walk goes
    changed = [str(root / "docs" / p) for p in ("a.txt", "sub", "f.bin", ".g.txt", ".hidden/d.txt", "build/e.txt", "out.csv")]
    at = finder.at([*changed, str(root / "named.log"), str(root / "elsewhere.txt")])
    assert sorted(at, key=lambda f: f.place) == everything  # a subfolder walked whole; the rest left out as the walk leaves it
    said = len(notes)
    finder.at(changed)
    assert len(notes) == said  # each note said once


def test_a_path_gone_or_moved_in_is_found_as_it_is_now(tree):
    root, finder, _ = tree
    finder.everything()
    os.rename(root / "docs" / "sub", root / "docs" / "moved")
    assert finder.at([str(root / "docs" / "sub")]) == []  # gone: nothing there (the keeper drops what was)
    moved = finder.at([str(root / "docs" / "moved")])
    assert [f.source.title for f in moved] == ["docs/moved/b.txt", "docs/moved/deeper/c.md"]
    assert all(f.source.path == f.source.title for f in moved)  # paths as the walk makes them, not absolute
    (root / "docs" / "sub").mkdir()  # an empty folder finds nothing, and is no error
    assert finder.at([str(root / "docs" / "sub")]) == []


@pytest.fixture(scope="module")
def tok(qwen2_vocab):
    return load_tokenizer(read_gguf(qwen2_vocab))


def test_a_document_still_being_written_gives_its_complete_chunks(tok):
    words = " ".join(f"word{k}" for k in range(400))
    source = text("log.txt")

    def chunks(of: str, hold: bool):
        stats = IngestStats()
        read = lambda _source: iter([Segment(0, of, 0)])  # noqa: E731
        return list(iter_chunks(layout([source], read), tok, 50, [source], stats, hold_last=hold)), stats

    whole, _ = chunks(words, hold=False)
    held, stats = chunks(words, hold=True)
    assert [c.digest for c in held] == [c.digest for c in whole[:-1]]  # all but the last
    assert stats.done and stats.document_tokens == sum(c.tokens for c in held) == held[-1].end_token
    assert stats.held_tokens == whole[-1].tokens and stats.source_tokens == [stats.document_tokens]
    exact = tok.decode_bytes([i for c in whole[:3] for i in c.ids]).decode()
    held, stats = chunks(exact, hold=True)  # ending on a chunk's end: that chunk's last word may go on
    assert len(held) == 2 and stats.held_tokens == 50
    grown, _ = chunks(words[: len(words) // 2], hold=True)
    assert [c.digest for c in grown] == [c.digest for c in whole[: len(grown)]]  # its start is the whole text's


def test_poll_finds_a_change_within_the_second(tree):
    """notify's PollWatcher compares modification times to the second; --poll checks the versions itself."""
    root, finder, _ = tree
    found = {f.source.title: f for f in finder.everything()}
    a = found["docs/a.txt"]
    info = os.stat(root / "docs" / "a.txt")
    os.utime(root / "docs" / "a.txt", ns=(info.st_atime_ns, info.st_mtime_ns + 1000))  # a microsecond later
    (root / "named.log").unlink()
    known = [(f.at, f.stat) for f in found.values()]
    assert finder.stale(known) == {a.at, found["named.log"].at}
