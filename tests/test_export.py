"""export: JSONL round trip, Markdown that cannot be broken out of, one safe self-contained HTML page."""

from __future__ import annotations

import copy
import json
import os
import re
import zipfile
from html.parser import HTMLParser

import pytest
from helpers import run_memagent, words

from memagent_cli.core.memagent import INITIAL_MEMORY
from memagent_cli.traces.export import FORMATS, export, export_html, export_jsonl, export_markdown
from memagent_cli.traces.sharing import Sharing, model_name, shared_path, shared_time

M1 = "Alice bought the boat in 1990."
M2 = "Alice bought the boat in 1990.\nThe harbour is Kiel."
M3 = "The harbour is Kiel.\n  Nothing else so far: ünï ✓."  # drops step 1's fact


def make_run(**changes) -> dict:
    """A complete three-step run over a PDF and a text file; step 3 drops what step 1 added."""
    run = {
        "id": "3f9a1c2b7d4e",
        "started_at": "2026-11-21T13:56:48+00:00",
        "ended_at": "2026-11-21T14:01:02+00:00",
        "status": "complete",
        "error": None,
        "question": "Where is the boat kept?",
        "answer": "Kiel",
        "raw_answer": "The boat is in \\boxed{Kiel}.",
        "sources": [
            {"path": "report.pdf", "kind": "pdf", "size": 12345, "sha256": "ab" * 32, "pages": 300, "tokens": 150000},
            {"path": "notes.txt", "kind": "text", "size": 900, "sha256": "cd" * 32, "pages": None, "tokens": 210},
        ],
        "model": {"path": "/m/x.gguf", "name": "x", "size": 123},
        "settings": {"chunk_tokens": 5000, "memory_tokens": 1024, "temperature": 0.7},
        "document_tokens": 150210,
        "steps_total": 3,
        "step_count": 3,
        "steps": [
            {
                "index": 1,
                "spans": [{"source": 0, "path": "report.pdf", "pages": [1, 11], "start": 0, "end": 20100}],
                "tokens": 5000,
                "memory": M1,
                "memory_tokens": 9,
                "prompt_tokens": 5530,
                "generated_tokens": 10,
                "seconds": 3.2,
                "finish_reason": "stop",
            },
            {
                "index": 2,
                "spans": [{"source": 0, "path": "report.pdf", "pages": [12, 12], "start": 20100, "end": 40000}],
                "tokens": 5000,
                "memory": M2,
                "memory_tokens": 15,
                "prompt_tokens": 5540,
                "generated_tokens": 16,
                "seconds": 3.4,
                "finish_reason": "stop",
            },
            {
                "index": 3,
                "spans": [
                    {"source": 0, "path": "report.pdf", "pages": [13, 300], "start": 40000, "end": 600000},
                    {"source": 1, "path": "notes.txt", "pages": None, "start": 0, "end": 900},
                ],
                "tokens": 210,
                "memory": M3,
                "memory_tokens": 14,
                "prompt_tokens": 760,
                "generated_tokens": 15,
                "seconds": 1.1,
                "finish_reason": "length",
            },
        ],
    }
    run.update(changes)
    return run


def with_memories(run: dict, *memories: str) -> dict:
    run = copy.deepcopy(run)
    for step, memory in zip(run["steps"], memories):
        step["memory"] = memory
    return run


def test_export_dispatches_and_rejects_unknown_formats():
    run = make_run()
    assert FORMATS == ("jsonl", "markdown", "html")
    assert export(run, "jsonl") == export_jsonl(run)
    assert export(run, "markdown") == export_markdown(run)
    assert export(run, "html") == export_html(run)
    with pytest.raises(ValueError, match="pdf"):
        export(run, "pdf")


# --- JSONL --------------------------------------------------------------------------------------


def test_jsonl_round_trips_the_run():
    run = with_memories(make_run(), M1, M2 + "\u2028odd line separator", M3)
    text = export_jsonl(run)
    assert text.endswith("\n") and not text.endswith("\n\n")
    lines = text.split("\n")[:-1]
    assert len(lines) == 1 + len(run["steps"])
    head, *steps = [json.loads(line) for line in lines]
    assert head.pop("type") == "run" and head.pop("schema") == 1
    assert head == {k: v for k, v in run.items() if k != "steps"}
    assert [s.pop("type") for s in steps] == ["step"] * 3
    assert steps == run["steps"]
    assert "ünï ✓" in text, "non-ASCII text is written as is (ensure_ascii=False)"
    assert len(text.splitlines()) == len(lines), "U+2028 is escaped, so splitlines() agrees"


def test_jsonl_of_a_run_without_steps():
    run = make_run(status="running", steps=[], step_count=0, steps_total=None, answer=None, raw_answer=None)
    lines = export_jsonl(run).splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["status"] == "running"


# --- Markdown -----------------------------------------------------------------------------------


def split_fences(markdown: str) -> tuple[list[str], list[str]]:
    """(the contents of the fenced code blocks, the lines outside them), read as CommonMark does:
    a block closes at the first line of only backticks at least as long as its opening fence."""
    blocks, outside, lines, i = [], [], markdown.split("\n"), 0
    while i < len(lines):
        opening = re.match(r"(`{3,})[^`]*$", lines[i])
        if not opening:
            outside.append(lines[i])
            i += 1
            continue
        fence, body, i = opening.group(1), [], i + 1
        while i < len(lines) and not re.fullmatch(f"{fence}`*", lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append("\n".join(body))
        i += 1
    return blocks, outside


def fenced_blocks(markdown: str) -> list[str]:
    return split_fences(markdown)[0]


def test_markdown_has_every_step_memory_and_provenance():
    run = make_run()
    md = export_markdown(run)
    assert md.splitlines()[0] == "# Where is the boat kept?"
    for needle in (
        "3f9a1c2b7d4e",
        "complete",
        "x",
        "report.pdf (pdf, 300 pages, 150,000 tokens)",
        "notes.txt (text, 210 tokens)",
        "chunk\\_tokens=5000",
        "report.pdf pp. 1–11",
        "report.pdf p. 12",
        "report.pdf pp. 13–300; notes.txt chars 0–900",
        "5,000 tokens read · memory 9 tokens · prompt 5,530 · generated 10 · 3.2 s",
        "cut at the memory budget",
    ):
        assert needle in md, needle
    blocks = fenced_blocks(md)
    assert blocks[0] == "Kiel"  # the answer
    for step in run["steps"]:
        assert f"## Step {step['index']}" in md
        assert step["memory"] in blocks


def test_markdown_lists_added_and_dropped_runs():
    md = export_markdown(make_run())
    step2 = md.split("## Step 2")[1].split("## Step 3")[0]
    assert "**Added:**\n\n- The harbour is Kiel." in step2 and "**Dropped:** nothing" in step2
    step3 = md.split("## Step 3")[1]
    assert "- Alice bought the boat in 1990." in step3.split("**Dropped:**")[1]


def test_markdown_marks_evidence_steps():
    md = export_markdown(make_run())
    headings = [line for line in md.splitlines() if line.startswith("## Step")]
    assert headings == ["## Step 1", "## Step 2 ★ evidence", "## Step 3 ★ evidence"]


def test_markdown_fences_hold_memories_with_backticks():
    tricky = "before\n```\n# not a heading\n````\n<script>alert(1)</script>\nafter ``"
    run = with_memories(make_run(), M1, tricky, M3)
    md = export_markdown(run)
    assert tricky in fenced_blocks(md)
    assert "`````text\n" + tricky + "\n`````" in md  # one backtick longer than the longest run (4)
    # Nothing of the memory leaked out of its block: the headings outside blocks are ours alone.
    outside = split_fences(md)[1]
    assert [line for line in outside if line.startswith("#")] == [
        "# Where is the boat kept?",
        "## Answer",
        "## Step 1",
        "## Step 2",
        "## Step 3 ★ evidence",
    ]


def test_markdown_escapes_inline_fields():
    run = make_run(question="Is <script>alert(1)</script> *bold* [x](y)?")
    title = export_markdown(run).splitlines()[0]
    assert "<script>" not in title
    assert title == r"# Is \<script\>alert(1)\</script\> \*bold\* \[x\](y)?"


def test_markdown_notes_an_interrupted_run():
    run = make_run(status="interrupted", ended_at=None, answer=None, raw_answer=None, steps_total=30)
    md = export_markdown(run)
    assert "> **Note:** This run was interrupted after 3 of 30 steps" in md
    assert "(no answer)" in md
    assert "**Note:**" not in export_markdown(make_run())


# --- HTML ---------------------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(HTMLParser):
    """Parses the page strictly: every non-void element closed in order; records tags, attributes,
    the text of each step's memory (with what was inside <ins> and <del>), and all text."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.errors: list[str] = []
        self.memories: list[list[tuple[str, str]]] = []  # per <pre class=memory>: (kind, text)
        self.text: list[str] = []
        self.feed(page)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed {self.stack}")

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "pre" and dict(attrs).get("class") == "memory":
            self.memories.append([])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)
        if self.stack[-1:] == ["pre"] and self.memories:
            self.memories[-1].append(("equal", data))
        elif self.stack[-2:] in (["pre", "ins"], ["pre", "del"]) and self.memories:
            self.memories[-1].append(("insert" if self.stack[-1] == "ins" else "delete", data))

    def steps(self) -> list[dict]:
        return [attrs for tag, attrs in self.tags if tag == "li" and "step" in attrs.get("class", "").split()]


def parse(page: str) -> Page:
    parsed = Page(page)
    assert parsed.errors == []
    return parsed


def test_html_is_one_well_formed_page():
    page = export_html(make_run())
    parsed = parse(page)
    assert page.startswith("<!DOCTYPE html>")
    assert ("meta", {"charset": "utf-8"}) in parsed.tags
    assert [tag for tag, _ in parsed.tags].count("style") == 1
    assert "white-space: pre-wrap" in page
    assert [s["id"] for s in parsed.steps()] == ["step-1", "step-2", "step-3"]
    text = "".join(parsed.text)
    for needle in (
        "Where is the boat kept?",
        "Kiel",
        "complete",
        "report.pdf (pdf, 300 pages, 150,000 tokens)",
        "chunk_tokens",
        "1024",
        "report.pdf pp. 1–11",
        "report.pdf p. 12",
        "report.pdf pp. 13–300; notes.txt chars 0–900",
        "cut at the memory budget",
    ):
        assert needle in text, needle


def test_html_is_self_contained():
    page = export_html(make_run())
    assert "http://" not in page and "https://" not in page
    parsed = parse(page)
    assert not [t for t in parsed.tags if t[0] in ("script", "link", "img", "iframe", "object", "embed")]
    assert not [t for t in parsed.tags if {"src", "href", "srcset", "action"} & set(t[1])]
    assert "url(" not in page and "@import" not in page


def test_html_loads_nothing_even_when_a_memory_holds_urls():
    memory = 'See https://example.com/a.png and <img src="http://evil.example/x.png">.'
    parsed = parse(export_html(with_memories(make_run(), M1, M2, memory)))
    assert not [t for t in parsed.tags if t[0] == "img" or {"src", "href"} & set(t[1])]
    assert memory in "".join(parsed.text)


def test_html_escapes_user_and_document_text():
    hostile = 'a" onmouseover="x'
    run = make_run(
        question="<script>alert(1)</script>",
        answer="<b>bold</b> & co",
        error="<i>oops</i>",
        model={"path": hostile, "name": hostile, "size": 1},
        settings={"chunk_tokens": 5000, "note": "<svg onload=alert(2)>"},
    )
    run["sources"][0]["path"] = hostile
    for step in run["steps"]:
        step["spans"][0]["path"] = hostile
    run = with_memories(run, M1, "</pre><img src=x onerror=alert(3)>", M3)
    page = export_html(run)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.lower()
    assert "a&quot; onmouseover=&quot;x" in page
    parsed = parse(page)
    assert not [t for t in parsed.tags if any(name.startswith("on") for name in t[1])]
    assert {tag for tag, _ in parsed.tags} <= {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "header",
        "h1",
        "h2",
        "div",
        "details",
        "summary",
        "pre",
        "dl",
        "dt",
        "dd",
        "ul",
        "li",
        "span",
        "code",
        "strong",
        "main",
        "input",
        "label",
        "p",
        "ol",
        "ins",
        "del",
        "footer",
    }
    text = "".join(parsed.text)
    for shown in (
        "<script>alert(1)</script>",
        "<b>bold</b> & co",
        "<svg onload=alert(2)>",
        hostile,
        "</pre><img src=x onerror=alert(3)>",
    ):
        assert shown in text, shown


def test_html_shows_each_memory_diffed_against_the_previous_one():
    run = make_run()
    parsed = parse(export_html(run))
    assert len(parsed.memories) == 3
    previous = INITIAL_MEMORY
    for step, pieces in zip(run["steps"], parsed.memories):
        # White space survives (pre-wrap, no reflow): the new memory is exactly the text outside
        # <del>, the old one exactly the text outside <ins>.
        assert "".join(t for kind, t in pieces if kind != "delete") == step["memory"]
        assert "".join(t for kind, t in pieces if kind != "insert") == previous
        previous = step["memory"]
    assert ("insert", "\nThe harbour is Kiel.") in parsed.memories[1]
    assert any(kind == "delete" and "Alice bought the boat in 1990." in t for kind, t in parsed.memories[2])


def test_html_highlights_evidence_steps():
    parsed = parse(export_html(make_run()))
    classes = [s["class"].split() for s in parsed.steps()]
    assert ["evidence" in c for c in classes] == [False, True, True]
    page = export_html(make_run())
    assert page.count("★ evidence</span>") == 3  # the legend and two steps


def test_html_notes_a_run_that_did_not_complete():
    def notes(run):
        parsed = parse(export_html(run))
        return [attrs for tag, attrs in parsed.tags if tag == "div" and attrs.get("class") == "note"], parsed

    assert notes(make_run())[0] == []
    found, parsed = notes(make_run(status="interrupted", ended_at=None, answer=None, raw_answer=None, steps_total=30))
    assert len(found) == 1
    assert "This run was interrupted after 3 of 30 steps" in "".join(parsed.text)
    found, parsed = notes(make_run(status="failed", error="out of <memory>", answer=None, raw_answer=None))
    assert len(found) == 1 and "This run failed after 3 of 3 steps: out of <memory>" in "".join(parsed.text)


def test_html_of_a_run_without_steps():
    run = make_run(status="running", steps=[], step_count=0, steps_total=None, answer=None, raw_answer=None)
    parsed = parse(export_html(run))
    assert parsed.steps() == []
    assert "still running" in "".join(parsed.text)


# --- pages to share: nothing of the machine -------------------------------------------------------

MICROSECONDS = re.compile(r"\d\d:\d\d:\d\d[.,]\d")


def test_shared_paths_times_and_model_names():
    assert shared_path("/home/ann/work/docs/a.txt", "/home/ann/work") == "docs/a.txt"
    assert shared_path("/home/ann/other/b.txt", "/home/ann/work") == "b.txt"  # outside: its name alone
    assert shared_path("docs/a.txt", "/home/ann/work") == "docs/a.txt"  # as named, from where the run started
    assert shared_path("../other/b.txt", "/home/ann/work") == "b.txt"
    assert shared_path("/home/ann/b.txt", None) == "b.txt" and shared_path("-", "/x") == "-"
    assert shared_time("2026-11-27T04:15:32.123456+00:00") == "2026-11-27 04:15:32 UTC"
    assert shared_time("2026-11-27T05:15:32.5+01:00") == "2026-11-27 04:15:32 UTC"
    assert model_name({"name": "memagent-7b", "path": "/home/ann/.memagent/models/m7.gguf"}) == "memagent-7b (m7.gguf)"
    assert model_name({"name": None, "path": "/home/ann/x.gguf"}) == "x.gguf"
    assert model_name({"name": "qwen", "path": None, "servers": ["http://gpu:8080"]}) == "qwen"
    # A document inside an archive keeps the part inside it; the archive outside is named alone.
    archive = {"path": "/srv/z.zip", "title": "/srv/z.zip/inner/c.txt", "abspath": "/srv/z.zip", "member": ["inner/c.txt"]}
    sharing = Sharing("/home/ann/work", [archive])
    assert sharing.name("/srv/z.zip/inner/c.txt") == "z.zip/inner/c.txt"
    assert sharing.name("/srv/z.zip/inner/c.txt/part 2") == "z.zip/inner/c.txt/part 2"
    assert sharing.text("Cannot read /home/ann/work/docs/a.txt or /srv/z.zip/inner/c.txt") == (
        "Cannot read docs/a.txt or z.zip/inner/c.txt"
    )
    shown = sharing.settings({"seed": None, "cwd": "/home/ann/work", "instructions": "", "chat_template": {"path": "/t/x.jinja"}})
    assert shown == {"seed": "random", "chat_template": "path=x.jinja"}


def test_pages_to_share_hold_no_path_of_the_machine_no_none_and_whole_seconds(tmp_path, models):
    """A real run over a file named relatively, one outside the run's directory and a document in
    an archive named by its absolute path: the HTML page and the Markdown name each from where the
    run started (or by its name alone), the model by name, times to the second; the trace itself
    keeps the absolute paths that resuming needs."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "docs").mkdir(parents=True)
    outside.mkdir()
    (work / "docs" / "a.txt").write_text(words(40), encoding="utf-8")
    (outside / "b.txt").write_text(words(40, seed=1), encoding="utf-8")
    with zipfile.ZipFile(work / "docs" / "z.zip", "w") as z:
        z.writestr("inner/c.txt", words(40, seed=2))
    small = ["--chunk-tokens", "200", "--memory-tokens", "24", "--answer-tokens", "8", "--temperature", "0"]
    named = ["docs/a.txt", outside / "b.txt", work / "docs" / "z.zip"]
    done = run_memagent("ask", *named, "Where?", "-m", models["random"], *small, "--json", cwd=work)
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)["trace"]
    stored = json.loads(run_memagent("traces", "show", trace, "--json", cwd=work).stdout)
    assert stored["settings"]["cwd"] == str(work) and stored["model"]["path"] == str(models["random"])

    machine = {str(tmp_path), os.path.realpath(tmp_path), str(models["random"].parent), os.path.realpath(models["random"].parent)}
    for fmt in ("html", "markdown"):
        page = run_memagent("traces", "export", trace, "--format", fmt, cwd=tmp_path).stdout
        assert page and not [m for m in machine if m in page], fmt
        assert "None" not in page and not MICROSECONDS.search(page), fmt
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page), fmt
        plain = page.replace("\\", "")  # Markdown escapes the underscore of a setting's name
        for name in ("docs/a.txt", "b.txt", "docs/z.zip/inner/c.txt", "tiny-qwen2-test (random.gguf)", "seed=random"):
            assert name in plain or name.replace("=", "</code> = <code>") in plain, (fmt, name)


SETTINGS = {
    "chunk_tokens": 5000,
    "temperature": 0.7,
    "seed": None,
    "final": "boxed",
    "protocol": "memagent",
    "instructions": "",
    "answer_schema": "",
    "answer_schema_multi": False,
    "early_stop": 3,
}


@pytest.mark.parametrize(
    "settings, shown, hidden",
    [
        (SETTINGS, ["chunk_tokens", "final"], ["early_stop", "answer_schema_multi", "answer_schema", "instructions"]),
        ({**SETTINGS, "protocol": "infmem", "seed": 7}, ["early_stop", "seed"], ["final", "answer_schema_multi"]),
        ({**SETTINGS, "protocol": "qwenlong"}, ["chunk_tokens"], ["early_stop", "final"]),
        (
            {**SETTINGS, "answer_schema": '{"type": "object"}', "answer_schema_multi": True},
            ["answer_schema", "answer_schema_multi"],
            [],
        ),
        ({**SETTINGS, "answer_schema_multi": True}, ["chunk_tokens"], ["answer_schema_multi", "answer_schema"]),
    ],
)
def test_a_page_shows_the_settings_the_run_used_and_json_keeps_all(settings, shown, hidden):
    """An exported MemAgent run listed early_stop = 3 and answer_schema_multi = False, which it never
    used: the Markdown and HTML pages show what the run's protocol and options use, JSONL keeps all."""
    run = make_run(settings=settings)
    markdown = export_markdown(run)
    line = next(x for x in markdown.splitlines() if x.startswith("- **Settings:**")).replace("\\_", "_")
    page = export_html(run)
    for name in shown:
        assert f"{name}=" in line and f"<code>{name}</code>" in page
    for name in hidden:
        assert f"{name}=" not in line and f"<code>{name}</code>" not in page
    assert json.loads(export_jsonl(run).splitlines()[0])["settings"] == settings


def test_traces_show_lists_the_settings_a_run_used(tmp_path, memagent_home):
    from helpers import CODEWORD_ASK

    (tmp_path / "d.txt").write_text("The code word is amber falcon.\n")
    done = run_memagent("ask", "d.txt", "What is the code word?", *CODEWORD_ASK, "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = run_memagent("traces", "show", "last", env={"COLUMNS": "400"}, cwd=tmp_path)
    line = next(x for x in shown.stdout.splitlines() if x.startswith("settings "))
    assert "chunk_tokens=64" in line and "final=boxed" in line
    assert "early_stop" not in line and "answer_schema" not in line and "cwd=" not in line
    recorded = json.loads(run_memagent("traces", "show", "last", "--json", cwd=tmp_path).stdout)["settings"]
    assert recorded["early_stop"] == 3 and recorded["answer_schema_multi"] is False
