"""`memagent watch` as a user runs it: a real process over a real folder, watched by the file system's
events (inotify here) or by polling, with the trained code-word model (tests/data/codeword.gguf). A
file written as a log is read as it grows, then has the answer to its whole text once it settled; an
edit changes its row, a deletion takes it away; a reader polling the CSV all along never sees part of
a file; SIGINT exits 130 with whole outputs; a restart reads nothing already answered; a log being
written has its answer so far while it is written. Waits are for what the process says, with
deadlines wide enough for a machine busy with other work; pollers sleep between looks, and stop when
their test ends."""

from __future__ import annotations

import csv
import io
import itertools
import json
import signal
import sqlite3
import threading
import time

import pytest
from helpers import CODEWORD_ASK, run_memagent, spawn_memagent, whole_fact

from testkit.codeword import QUESTION

RUN = [*CODEWORD_ASK, "--temperature", "0", "--threads", "1"]
DEADLINE = 120  # seconds a step of a test may take on a busy machine


class Watching:
    """A `memagent watch` process, its stderr lines collected as they come."""

    def __init__(self, spawned, cwd, *args: str):
        self.proc = spawn_memagent("watch", *args, *RUN, cwd=cwd)
        spawned.append(self.proc)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def said(self, text: str) -> int:
        """How many of its lines so far hold `text`."""
        return sum(text in line for line in self.lines)

    def wait_for(self, text: str, count: int = 1) -> None:
        deadline = time.monotonic() + DEADLINE
        while self.said(text) < count:
            assert self.proc.poll() is None, "\n".join(self.lines)
            assert time.monotonic() < deadline, f"waited for {text!r}:\n" + "\n".join(self.lines)
            time.sleep(0.05)

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=DEADLINE)
        self.reader.join(timeout=10)  # stderr is this reader's: read to its end
        assert self.proc.stdout is not None
        return self.proc.returncode, self.proc.stdout.read()


def table(path) -> dict[str, dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    return {r["document"]: r for r in rows}


READ_EVERY = 0.005  # often, to catch a table written in place; a look costs about 0.2 ms (4% of one core)


class TableReader:
    """A spreadsheet's view of a CSV file, all along: a thread reads it every READ_EVERY seconds
    (waiting on an event between looks, never spinning) and keeps each text that is not a whole
    table of `columns` columns. It reads until stopped, or for 10 × DEADLINE at most."""

    def __init__(self, path, columns: int):
        self.path, self.columns = path, columns
        self.partial: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        deadline = time.monotonic() + 10 * DEADLINE
        while not self.stopping.wait(READ_EVERY) and time.monotonic() < deadline:
            try:
                text = self.path.read_text(encoding="utf-8-sig")
            except FileNotFoundError:
                continue
            rows = list(csv.reader(io.StringIO(text)))
            whole = rows and rows[0][:2] == ["document", "question"] and all(len(r) == self.columns for r in rows)
            if not text.endswith("\n") or not whole:
                self.partial.append(text)

    def stop(self) -> list[str]:
        """Stops reading; the texts seen that were not a whole table."""
        self.stopping.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        return self.partial


@pytest.fixture
def table_reader():
    """Starts a TableReader on a path; each is stopped when the test ends, failed or not (left
    going, it would read for the rest of the worker's tests)."""
    readers: list[TableReader] = []

    def start(path, columns: int) -> TableReader:
        readers.append(TableReader(path, columns))
        return readers[-1]

    yield start
    for reader in readers:
        reader.stop()


def write_as_a_log(path, text: str, watching: Watching, tail: int = 48) -> None:
    """Writes `text` to `path` as a log is written, until `watching` has read it as it grows: all but
    its last `tail` characters, then one every half second, so that a look sees it longer than at the
    one before, until the watch says its answer so far (from its complete chunks); then the rest at
    once. The tail is less than a chunk (a 64-token chunk is 64 bytes at the least), so what is
    written after that reading began is not read as it grows again: one reading as it grows, whatever
    the machine's speed, then the last once it settles."""
    title = f"{path.parent.name}/{path.name}"
    written = len(text) - tail
    path.write_text(text[:written], encoding="utf-8")
    while not watching.said(f"{title}: so far, from") and written < len(text) - 1:
        assert watching.proc.poll() is None, "\n".join(watching.lines)
        time.sleep(0.5)
        with open(path, "a", encoding="utf-8") as f:
            f.write(text[written])
        written += 1
    watching.wait_for(f"{title}: so far, from")
    with open(path, "a", encoding="utf-8") as f:
        f.write(text[written:])


def runs_of(home, name: str) -> int:
    with sqlite3.connect(home / "traces.db") as db:
        return int(db.execute("SELECT count(*) FROM runs WHERE sources LIKE ?", (f'%"{name}"%',)).fetchone()[0])


@pytest.fixture
def folder(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    a = whole_fact(300, 1)
    (docs / "a.txt").write_text(a.text, encoding="utf-8")
    return tmp_path, a


def test_watch_keeps_the_table_current(folder, spawned, memagent_home, table_reader):
    cwd, a = folder
    out = cwd / "out.csv"
    reader = table_reader(out, 9)
    watching = Watching(spawned, cwd, "docs", "-q", QUESTION, "--csv", "out.csv", "--json")
    watching.wait_for("docs/a.txt: answered in")
    assert table(out)["docs/a.txt"]["answer"] == a.value

    # written as a log: read as it grows (its complete chunks), then, once it has settled, its row
    # answers its whole text (its last reading goes on from the one before): two runs
    b = whole_fact(300, 40)
    write_as_a_log(cwd / "docs" / "b.txt", b.text, watching)
    watching.wait_for("docs/b.txt: answered in")
    row = table(out)["docs/b.txt"]
    assert row["answer"] == b.value and row["growing"] == "" and runs_of(memagent_home, "docs/b.txt") == 2

    # an edit: another code word; its row follows
    edited = whole_fact(300, 80)
    (cwd / "docs" / "b.txt").write_text(edited.text, encoding="utf-8")
    watching.wait_for("docs/b.txt: answered in", count=2)
    assert table(out)["docs/b.txt"]["answer"] == edited.value

    # a deletion: its row leaves
    (cwd / "docs" / "a.txt").unlink()
    watching.wait_for("docs/a.txt: gone")
    assert list(table(out)) == ["docs/b.txt"]

    code, stdout = watching.stop()
    seen_partial = reader.stop()
    assert code == 130 and any("interrupted" in line for line in watching.lines)
    assert not seen_partial, seen_partial[:1]
    assert list(table(out)) == ["docs/b.txt"]  # the outputs whole after Ctrl-C
    printed = [json.loads(line) for line in stdout.splitlines()]  # --json: a line per answer, as it came
    assert [(r["document"], r["answer"]) for r in printed if not r["growing"]] == [
        ("docs/a.txt", a.value),
        ("docs/b.txt", b.value),
        ("docs/b.txt", edited.value),
    ]
    assert [r["document"] for r in printed if r["growing"]] == ["docs/b.txt"]  # its answer so far, once

    # a restart reads nothing it has answered
    before = runs_of(memagent_home, "docs/b.txt")
    again = Watching(spawned, cwd, "docs", "-q", QUESTION, "--csv", "out.csv")
    again.wait_for("docs/b.txt: answered before")
    code, _ = again.stop()
    assert code == 130 and runs_of(memagent_home, "docs/b.txt") == before
    assert not any("answered in" in line for line in again.lines)


def test_watch_by_polling_and_a_grown_file_continued(folder, spawned):
    cwd, a = folder
    log = cwd / "docs" / "a.txt"
    watching = Watching(spawned, cwd, "docs", "-q", QUESTION, "--jsonl", "out.jsonl", "--poll", "0.3", "--settle", "0.5")
    watching.wait_for("docs/a.txt: answered in")
    with open(log, "a", encoding="utf-8") as f:
        f.write("\nThe night guard waits near the old well.")
    watching.wait_for("docs/a.txt: answered in", count=2)
    code, _ = watching.stop()
    assert code == 130
    (row,) = [json.loads(line) for line in (cwd / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert row["answer"] == a.value and row["continued_from"] is not None  # only its last chunk was read again


@pytest.mark.parametrize(
    "args, said",
    [
        (["nowhere", "-q", QUESTION], "nowhere: no such file or folder."),
        (["-", "-q", QUESTION], "standard input cannot be watched"),
        (["docs"], "No question given."),
        (["docs", "-q", QUESTION, "--csv", "-"], "--csv takes a file name"),
    ],
)
def test_watch_refuses_what_it_cannot_watch(tmp_path, args, said):
    (tmp_path / "docs").mkdir()
    done = run_memagent("watch", *args, *RUN, cwd=tmp_path)
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_file_changed_while_it_is_read_is_read_again_once_settled(tmp_path, spawned, memagent_home):
    """The run over it stops (recorded interrupted, resumable), and the file is read again once it
    has settled: its row is the answer to its last version."""
    docs = tmp_path / "docs"
    docs.mkdir()
    long = whole_fact(30_000, 3)  # ~500 steps: long enough to change it mid-way
    (docs / "long.txt").write_text(long.text, encoding="utf-8")
    watching = Watching(spawned, tmp_path, "docs", "-q", QUESTION, "--csv", "out.csv", "--settle", "0.5")
    deadline = time.monotonic() + DEADLINE
    while True:  # until its run has recorded some steps
        assert time.monotonic() < deadline and watching.proc.poll() is None, "\n".join(watching.lines)
        try:
            with sqlite3.connect(memagent_home / "traces.db") as db:
                if db.execute("SELECT count(*) FROM steps").fetchone()[0] >= 5:
                    break
        except sqlite3.Error:  # not made yet
            pass
        time.sleep(0.05)
    short = whole_fact(300, 41)
    (docs / "long.txt").write_text(short.text, encoding="utf-8")
    watching.wait_for("docs/long.txt: changed while it was read")
    watching.wait_for("docs/long.txt: answered in")
    code, _ = watching.stop()
    assert code == 130 and table(tmp_path / "out.csv")["docs/long.txt"]["answer"] == short.value
    with sqlite3.connect(memagent_home / "traces.db") as db:
        statuses = [row[0] for row in db.execute("SELECT status FROM runs ORDER BY started_at")]
    assert statuses == ["interrupted", "complete"]


def test_a_log_being_written_is_answered_as_it_grows(tmp_path, spawned, memagent_home):
    """A log appended every 0.5 s for 20 s (and on, until its row comes, on a machine slower than
    that) has a row with the code word while it is still written, marked growing: its complete
    chunks were read, its last one waiting. Once it settles, its row is the answer to its whole text,
    read on from the chunks read before."""
    docs = tmp_path / "docs"
    docs.mkdir()
    fact = whole_fact(900, 11, where=0.1)  # the fact in its first chunks
    pieces = [fact.text[k * len(fact.text) // 40 : (k + 1) * len(fact.text) // 40] for k in range(40)]
    seen_growing = threading.Event()
    writing_stopped = threading.Event()
    watching = Watching(spawned, tmp_path, "docs", "-q", QUESTION, "--csv", "out.csv")

    def write() -> None:
        deadline = time.monotonic() + DEADLINE
        for k in itertools.count():
            with open(docs / "build.log", "a", encoding="utf-8") as f:
                f.write(pieces[k] if k < len(pieces) else "\nThe night guard waits near the old well.")
            if (k >= len(pieces) and seen_growing.is_set()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        writing_stopped.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    deadline = time.monotonic() + DEADLINE
    while True:  # until a row has the code word (the first may be written before its chunk is read)
        watching.wait_for("docs/build.log: so far, from")
        row = table(tmp_path / "out.csv").get("docs/build.log", {})
        if row.get("answer") == fact.value or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    still_writing = not writing_stopped.is_set()
    seen_growing.set()
    assert row.get("answer") == fact.value and row["growing"] == "yes", "\n".join(watching.lines)
    assert still_writing, "the writes stopped before the log had a row"
    writer.join(timeout=DEADLINE)
    watching.wait_for("docs/build.log: answered in")
    code, _ = watching.stop()
    row = table(tmp_path / "out.csv")["docs/build.log"]
    assert code == 130 and row["answer"] == fact.value and row["growing"] == ""
    with sqlite3.connect(memagent_home / "traces.db") as db:
        query = "SELECT continued_from FROM runs WHERE status = 'complete' ORDER BY ended_at DESC LIMIT 1"
        (continued,) = db.execute(query).fetchone()
    assert continued is not None  # the last reading went on from the ones before


def test_a_running_watch_shows_on_the_page(folder, spawned, memagent_home):
    """`memagent serve` on the watch's store shows the watch and its table as it changes, then ended."""
    import re

    import httpx2

    from testkit.pages import serving

    cwd, a = folder
    watching = Watching(spawned, cwd, "docs", "-q", QUESTION)
    watching.wait_for("docs/a.txt: answered in")
    with serving(memagent_home, cwd / "docs") as url:
        listed = httpx2.get(url + "/watches", timeout=60).text
        (watch,) = set(re.findall(r"/watches/([0-9a-f]{12})", listed))
        assert "watching" in listed and "docs" in listed
        page = httpx2.get(f"{url}/watches/{watch}", timeout=60).text
        assert "docs/a.txt" in page and a.value in page and f'data-live="/watches/{watch}/live"' in page
        b = whole_fact(300, 40)
        (cwd / "docs" / "b.txt").write_text(b.text, encoding="utf-8")
        watching.wait_for("docs/b.txt: answered in")
        deadline = time.monotonic() + DEADLINE
        while b.value not in httpx2.get(f"{url}/watches/{watch}?fragment=1", timeout=60).text:
            assert time.monotonic() < deadline, "the page never showed b.txt's answer"
            time.sleep(0.2)
        code, _ = watching.stop()
        assert code == 130
        ended = httpx2.get(f"{url}/watches/{watch}", timeout=60).text
        assert ">ended<" in ended and "data-live" not in ended and b.value in ended
