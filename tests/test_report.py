"""report: the one self-contained page of a per-document job (`ask --each --html`), built from runs
recorded in a real trace store; well-formed, loading nothing, escaping everything, and drawn by a
real headless Chromium where one is installed."""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser

import pytest
from helpers import png_pixels, run_memagent, screenshot, words

from memagent_cli.core.memdiff import evidence_record, evidence_steps
from memagent_cli.traces.export import timeline_html
from memagent_cli.traces.report import each_report_html, evidence_locations, row_status, summary_line
from memagent_cli.traces.store import TraceStore

MODEL = {"path": "/models/memagent-7b.gguf", "name": "memagent-7b", "size": 4_680_000_000}
SETTINGS = {"chunk_tokens": 5000, "memory_tokens": 1024, "temperature": 0.7}
DOCS = {
    "report.pdf": {"kind": "pdf", "unit": "page", "units": 40},
    "deck.pptx": {"kind": "pptx", "unit": "slide", "units": 20},
}
HOSTILE_Q = 'Who signed <script>alert(1)</script> "onload=alert(2) x?'
HOSTILE_ANSWER = 'Bob \x1b[31mred\x1b[0m "onload=alert(3) <img src=x onerror=alert(4)>'
HOSTILE_ERROR = "model server went away: <b>boom</b> \x1b[31m\x9b2J"
QUESTIONS = ["Where is the boat kept?", HOSTILE_Q]
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def span(doc: str, first: int, last: int) -> dict:
    unit = DOCS[doc]["unit"]
    return {
        "source": 0,
        "path": doc,
        "unit": unit,
        "units": [first, last],
        "labels": [None, None],
        "pages": [first, last] if unit == "page" else None,
        "ocr": False,
        "start": first * 1000,
        "end": last * 1000 + 999,
    }


def record(store: TraceStore, doc: str, q: int, *, fail: bool = False) -> tuple[dict, dict]:
    """Records one run of question `q` over `doc` (failing after its first step when `fail`) and
    returns (the row the job gives the page, the stored run as get_run returns it)."""
    source = {"path": doc, "title": doc, "kind": DOCS[doc]["kind"], "size": 1000, "sha256": "ab" * 32, **DOCS[doc]}
    run_id = store.create_run(question=QUESTIONS[q], sources=[source], model=MODEL, settings=SETTINGS)
    tag = f"{doc.split('.')[0]}-q{q}"
    memories = [f"{tag} first fact.", f"{tag} first fact.\n{tag} second fact.", f"{tag} second fact. {tag} third fact."]
    if q == 1:  # a hostile memory, as a model could write one
        memories[1] += " </pre><script>alert(5)</script> \x1b]52;c;bad\x07"
    places = [(1, 3), (4, 12), (13, 20)]
    for index, (memory, (first, last)) in enumerate(zip(memories, places), 1):
        if fail and index > 1:
            break
        store.add_step(
            run_id,
            {"index": index, "spans": [span(doc, first, last)], "tokens": 5000, "memory": memory, "memory_tokens": 9},
        )
    if fail:
        store.finish_run(run_id, "failed", error=HOSTILE_ERROR)
    else:
        store.finish_run(run_id, "complete", answer=f"{tag} answer" if q == 0 else HOSTILE_ANSWER)
    run = store.get_run(run_id)
    chosen = set(evidence_steps(run["steps"]))
    row = {
        "document": doc,
        "question": QUESTIONS[q],
        "answer": run["answer"],
        # What `ask --json` prints: none for a failed run, which has no final memory.
        "evidence": [] if fail else [evidence_record(s) for s in run["steps"] if s["index"] in chosen],
        "error": run["error"],
        "trace": run_id,
        "steps": len(run["steps"]),
    }
    return row, run


@pytest.fixture
def job(tmp_path):
    """Two documents x two questions, the last run failed: (rows, runs) as the job hands them over."""
    with TraceStore(tmp_path / "traces.db") as store:
        made = [record(store, doc, q, fail=(doc, q) == ("deck.pptx", 1)) for doc in DOCS for q in range(2)]
    return [row for row, _ in made], {run["id"]: run for _, run in made}


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(HTMLParser):
    """Parses strictly (every non-void element closed, in order) and records every tag with its
    attributes, all text, and the text inside each <section> and each table row of the body."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.sections: dict[str, list[str]] = {}
        self.kept: dict[str, list[str]] = {}  # a section's text without what <del> holds
        self.rows: list[list[str]] = []
        self.row_links: list[list[str]] = []
        self._section: str | None = None
        self.feed(page)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed {self.stack}")

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "section":
            self._section = attrs.get("id")
            self.sections[self._section] = []
            self.kept[self._section] = []
        if tag == "tr" and "tbody" in self.stack:
            self.rows.append([])
            self.row_links.append([])
        if tag == "a" and "tbody" in self.stack:
            self.row_links[-1].append(attrs.get("href"))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag == "section":
            self._section = None

    def handle_data(self, data):
        self.text.append(data)
        if self._section is not None:
            self.sections[self._section].append(data)
            if "del" not in self.stack:
                self.kept[self._section].append(data)
        if "tbody" in self.stack and "tr" in self.stack:
            self.rows[-1].append(data)

    def count(self, tag: str) -> int:
        return sum(1 for t, _ in self.tags if t == tag)


def parse(page: str) -> Page:
    parsed = Page(page)
    assert parsed.errors == []
    return parsed


def shown(text: str) -> str:
    """Outside text as the page shows it: control characters as their visible symbols."""
    return text.replace("\x1b", "␛").replace("\x07", "␇").replace("\x9b", "\ufffd")


def test_the_table_has_every_run_and_links_it_to_its_section(job):
    rows, runs = job
    parsed = parse(each_report_html(rows, runs, title="Boats and decks"))
    text = "".join(parsed.text)
    assert "Boats and decks" in text
    assert "4 runs (2 documents × 2 questions): 3 answered, 1 failed." in text
    assert len(parsed.rows) == 4
    for n, (row, cells, links) in enumerate(zip(rows, parsed.rows, parsed.row_links), 1):
        cell_text = "".join(cells)
        assert row["document"] in cell_text and shown(row["question"]) in cell_text
        assert shown(row["answer"] if row["answer"] is not None else row["error"]) in cell_text
        assert cell_text.endswith("failed" if row["error"] else "answered")
        assert links and set(links) == {f"#run-{n}"}
        assert f"run-{n}" in parsed.sections
    # Evidence locations, in the words people see everywhere else (core.provenance).
    assert "report.pdf pp. 4–12" in "".join(parsed.rows[0]) and "report.pdf pp. 13–20" in "".join(parsed.rows[0])
    assert "deck.pptx slides 13–20" in "".join(parsed.rows[2])
    assert "slide" not in "".join(parsed.rows[3]), "a failed run has no evidence"


def test_each_section_holds_its_answer_evidence_and_timeline(job):
    rows, runs = job
    parsed = parse(each_report_html(rows, runs))
    assert parsed.count("section") == parsed.count("details") == 4
    for n, row in enumerate(rows, 1):
        section = "".join(parsed.sections[f"run-{n}"])
        run = runs[row["trace"]]
        assert row["document"] in section and shown(row["question"]) in section
        kept = "".join(parsed.kept[f"run-{n}"])
        for step in run["steps"]:  # the timeline, as the export draws it: every memory in full
            assert shown(step["memory"]) in kept
        for other in rows[: n - 1] + rows[n:]:  # and no other run's
            assert other["trace"] not in section
        for evidence in row["evidence"]:
            assert f"step {evidence['step']}" in section
    first = "".join(parsed.sections["run-1"])
    assert "Memory timeline (3 steps, trace " in first
    assert "step 2: report.pdf pp. 4–12" in first and "added: report-q0 second fact." in first
    failed = "".join(parsed.sections["run-4"])
    assert shown(HOSTILE_ERROR) in failed and "No answer." in failed
    assert "This run failed after 1 steps (total not known yet): model server went away" in failed
    assert "No evidence: no step added words that are still in the final memory." in failed


def test_ids_are_unique_and_every_link_lands_on_one(job):
    rows, runs = job
    page = each_report_html(rows, runs)
    parsed = parse(page)
    ids = [attrs["id"] for _, attrs in parsed.tags if "id" in attrs]
    assert len(ids) == len(set(ids)), "four timelines on one page keep their ids apart"
    hrefs = [attrs["href"] for tag, attrs in parsed.tags if tag == "a"]
    assert hrefs and all(h.startswith("#") and h[1:] in ids for h in hrefs)
    assert "#run-1-step-2" in hrefs  # an evidence step links to that step in its run's timeline
    labels = [attrs["for"] for tag, attrs in parsed.tags if tag == "label"]
    assert sorted(labels) == [f"run-{n}-hide-del" for n in range(1, 5)]
    assert '[id$="-hide-del"]:checked ~ ol del' in page  # so each run's switch still works


def test_the_timeline_is_the_exports(job):
    rows, runs = job
    page = each_report_html(rows, runs)
    run = runs[rows[0]["trace"]]
    assert timeline_html(run, id_prefix="run-1-") in page


def test_the_page_loads_nothing(job):
    rows, runs = job
    page = each_report_html(rows, runs)
    assert page.startswith("<!DOCTYPE html>")
    for bad in ('src="http', "src='http", 'href="http', "href='http", "@import", "url(", "//cdn", "<link"):
        assert bad not in page.lower(), bad
    parsed = parse(page)
    assert not [t for t in parsed.tags if t[0] in ("script", "link", "img", "iframe", "object", "embed", "base")]
    assert not [t for t in parsed.tags if {"src", "srcset", "action", "style"} & set(t[1])]
    csp = [a["content"] for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0] and "script-src" not in csp[0]
    assert parsed.count("style") == 1


def test_outside_text_is_escaped_and_loses_its_control_characters(job):
    rows, runs = job
    rows = [dict(r) for r in rows]
    rows[0]["document"] = '<script>alert(6)</script>"onload=x.pdf'
    page = each_report_html(rows, runs, title='<script>alert(7)</script> "onload=')
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '"onload=' not in page and "&quot;onload=" in page
    assert not CONTROLS.search(page), "no control character survives into the file"
    parsed = parse(page)
    assert not [t for t in parsed.tags if any(name.startswith("on") for name in t[1])]
    text = "".join(parsed.text)
    for outside in (HOSTILE_Q, HOSTILE_ANSWER, HOSTILE_ERROR, rows[0]["document"], "</pre><script>alert(5)</script>"):
        assert shown(outside) in text, outside
    assert "\u241b[31mred" in text  # ESC shown as ␛, the rest of the sequence as text


def test_rows_without_a_timeline(job):
    rows, runs = job
    rows = [dict(rows[0]), dict(rows[1])]
    rows[1]["trace"] = None
    parsed = parse(each_report_html(rows, {}))
    assert parsed.count("details") == 0
    assert f"Trace {rows[0]['trace']} is not in the trace store" in "".join(parsed.sections["run-1"])
    assert "No trace was recorded for this run." in "".join(parsed.sections["run-2"])
    assert "step 2: report.pdf pp. 4–12" in "".join(parsed.sections["run-1"])
    assert not [a for t, a in parsed.tags if t == "a" and "step" in a.get("href", "")]  # nothing to link to


def test_an_empty_job_is_still_a_page():
    parsed = parse(each_report_html([], {}))
    assert "0 runs: 0 answered, 0 failed." in "".join(parsed.text) and "No runs." in "".join(parsed.text)


def test_statuses_summary_and_locations():
    assert row_status({"answer": ""}, None) == "answered"
    assert row_status({"answer": None, "error": "x"}, None) == "failed"
    assert row_status({"answer": None, "error": "stopped"}, {"status": "interrupted"}) == "interrupted"
    assert row_status({"answer": None}, None) == "no answer"
    rows = [{"document": "a", "question": "q"}, {"document": "a", "question": "r"}]
    assert (
        summary_line(rows, ["answered", "interrupted"])
        == "2 runs (1 document × 2 questions): 1 answered, 0 failed, 1 interrupted."
    )
    evidence = [
        {"step": 1, "spans": [span("deck.pptx", 12, 12)]},
        {"step": 2, "spans": [span("deck.pptx", 12, 12), {"source": 1, "path": "book.epub", "unit": "chapter", "units": [4, 4]}]},
    ]
    assert evidence_locations(evidence) == ["deck.pptx slide 12", "book.epub ch. 4"]
    assert evidence_locations([{"step": 3, "spans": [span("report.pdf", 3, 3)]}]) == ["report.pdf p. 3"]


# --- a real browser ------------------------------------------------------------------------------


def test_a_headless_chromium_draws_the_page(job, tmp_path):
    rows, runs = job
    page = tmp_path / "report.html"
    page.write_text(each_report_html(rows, runs, title="Boats and decks"), encoding="utf-8")
    shot = screenshot(page, tmp_path / "shot.png")
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1200, 1600)
    colours = {px for row in pixels for px in row}
    assert len(colours) > 50, "text, table and status colours were drawn, not a blank page"
    # The page's background (#f4f5f7) fills the margins, and its text is dark: both were drawn.
    assert b"\xf4\xf5\xf7" in colours
    assert any(max(px) < 0x60 for px in colours)
    # The results table's header row (#eef0f3) is near the top of the first screen.
    assert any(px == b"\xee\xf0\xf3" for row in pixels[:800] for px in row)


def test_a_real_jobs_page_holds_no_path_of_the_machine(tmp_path, models):
    """`ask --each --html` over a folder named relatively and a file outside the directory the job
    ran in, named by its absolute path: documents shown from the job's directory (the outside one
    by its name), the model by name, no "None", times to the second."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "docs").mkdir(parents=True)
    outside.mkdir()
    (work / "docs" / "a.txt").write_text(words(40), encoding="utf-8")
    (outside / "b.txt").write_text(words(40, seed=1), encoding="utf-8")
    small = ["--chunk-tokens", "200", "--memory-tokens", "24", "--answer-tokens", "8", "--temperature", "0"]
    each = ["--each", "-q", "Where?", "--html", "page.html"]
    done = run_memagent("ask", "docs", outside / "b.txt", *each, "-m", models["random"], *small, cwd=work)
    assert done.returncode == 0, done.stderr
    page = (work / "page.html").read_text(encoding="utf-8")
    machine = {str(tmp_path), os.path.realpath(tmp_path), str(models["random"].parent), os.path.realpath(models["random"].parent)}
    assert not [m for m in machine if m in page]
    assert "None" not in page and not re.search(r"\d\d:\d\d:\d\d[.,]\d", page)
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page)
    documents = [cells[1] for cells in parse(page).rows]
    assert documents == ["docs/a.txt", "b.txt"]
    assert "tiny-qwen2-test (random.gguf)" in page and "<code>seed</code> = <code>random</code>" in page
