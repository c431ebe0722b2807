"""One self-contained HTML page for a per-document job (`memagent ask --each --html FILE`).

This module owns that page and nothing else: it reads the rows the job gives (one per document and
question) and the stored runs (as TraceStore.get_run returns them), never the store itself, and
returns the page's text for the caller to save.

The page is made to be shared as one file: a results table (document, question, answer, where
the evidence was read, status) whose rows link to one section per run, and in each section the
answer, its evidence with locations and, folded in a <details>, the run's memory timeline as
`traces export --format html` draws it (export.timeline_html). It loads nothing and runs no
script (the same Content-Security-Policy as the export), reads fully without JavaScript, and every
text from outside is escaped; control characters become visible symbols (display.visible), so
none survives into the file. Like the export it shows nothing of the machine (sharing.py):
documents named from where the job ran, a file outside it by its name, the model by name.
"""

from __future__ import annotations

import html
import os
from typing import Any, Mapping, Sequence

from ..core.memagent import INITIAL_MEMORY
from ..core.memdiff import split_changes, word_diff
from ..core.provenance import describe_span, describe_spans
from ..display import clip, visible
from .export import PAGE_CSS, answer_html, note_html, page_head, quotes_html, run_meta_html, status_note, timeline_html
from .sharing import Sharing

Row = Mapping[str, Any]
Run = Mapping[str, Any]

ANSWER_CLIP = 300  # characters of an answer or error in the table; the run's section has it all
LOCATIONS_SHOWN = 4  # evidence locations in a table cell before "+N more"
ADDED_CLIP = 400  # characters of what an evidence step added, in its section

# Additions to the export's stylesheet. No url(), @import or web fonts: the page loads nothing.
REPORT_CSS = """
body.report header, body.report main { max-width: 80rem; }
p.summary { font-size: 1.05rem; margin: 0 0 1rem; }
div.results { overflow-x: auto; }
table.results { width: 100%; border-collapse: collapse; background: var(--card); border: 1px solid var(--line); }
table.results th, table.results td { border-top: 1px solid var(--line); padding: .45rem .6rem; text-align: left;
                                     vertical-align: top; overflow-wrap: break-word; }
table.results th { background: #eef0f3; font-weight: 600; white-space: nowrap; }
table.results td.n, table.results td.st { color: var(--muted); white-space: nowrap; }
table.results td.loc { font-size: .9rem; min-width: 11rem; }
table.results .error { color: var(--del-fg); }
table.results .more, .muted { color: var(--muted); }
a { color: #1a56a8; }
.status.answered { background: var(--ins); color: var(--ins-fg); }
section.run { border-top: 2px solid var(--line); margin: 2rem 0 0; padding-top: .5rem; }
section.run h2 { overflow-wrap: anywhere; }
section.run h2 .n { color: var(--muted); }
section.run .question { white-space: pre-wrap; overflow-wrap: anywhere; margin: .25rem 0 .5rem; }
section.run h3 { font-size: 1rem; margin: 1rem 0 .35rem; }
ul.evidence { margin: 0; padding-left: 1.2rem; }
ul.evidence li { margin: 0 0 .35rem; overflow-wrap: anywhere; }
ul.evidence .added { color: var(--muted); font-size: .9rem; white-space: pre-wrap; }
details.trace { margin: 1rem 0 0; background: #eceef2; border-radius: 6px; padding: .5rem .75rem; }
details.trace > summary { cursor: pointer; font-weight: 600; }
[id$="-hide-del"]:checked ~ ol del { display: none; }
p.top { font-size: .85rem; margin: .75rem 0 0; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _anchor(n: int) -> str:
    return f"run-{n}"


def row_status(row: Row, run: Run | None) -> str:
    """What became of one row's run: "answered", "interrupted", "running", "failed" or "no answer"."""
    if row.get("answer") is not None:
        return "answered"
    if run is not None and run.get("status") in ("interrupted", "running"):
        return str(run["status"])
    if row.get("error") or (run is not None and run.get("status") == "failed"):
        return "failed"
    return "no answer"


def evidence_locations(evidence: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every place the evidence was read ("report.pdf p. 3", "deck.pptx slide 12"), each once, in
    the order of the steps."""
    places = [describe_span(span) for record in evidence for span in record.get("spans") or []]
    return list(dict.fromkeys(places))


def summary_line(rows: Sequence[Row], statuses: Sequence[str]) -> str:
    """The page's summary: "4 runs (2 documents × 2 questions): 3 answered, 1 failed." """
    n = len(rows)
    documents = len({str(r.get("document")) for r in rows})
    questions = len({str(r.get("question")) for r in rows})
    shape = f" ({_plural(documents, 'document')} × {_plural(questions, 'question')})" if n else ""
    counts = [f"{statuses.count('answered')} answered", f"{statuses.count('failed')} failed"]
    for other, words in (("interrupted", "interrupted"), ("running", "still running"), ("no answer", "without an answer")):
        if statuses.count(other):
            counts.append(f"{statuses.count(other)} {words}")
    return f"{_plural(n, 'run')}{shape}: {', '.join(counts)}."


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def each_report_html(rows: Sequence[Row], runs: Mapping[str, Run], *, title: str = "memagent", cwd: str | None = None) -> str:
    """The page for `rows` (one per document and question, in display order; see the module
    docstring), with the timeline of each row whose `trace` is a key of `runs`. Paths are shown
    relative to `cwd`, where the job ran: by default the runs' own, else the current directory."""
    if cwd is None:
        recorded = [r.get("settings", {}).get("cwd") for r in runs.values()]
        cwd = next((c for c in recorded if isinstance(c, str)), os.getcwd())
    sharing = Sharing(
        cwd, [s for r in runs.values() for s in r.get("sources") or []], [r.get("model") or {} for r in runs.values()]
    )
    runs = {key: sharing.run(run) for key, run in runs.items()}
    rows = [_shared_row(row, sharing) for row in rows]
    found = [_run_of(row, runs) for row in rows]
    statuses = [row_status(row, run) for row, run in zip(rows, found)]
    out = [
        *page_head(clip(title, 120), PAGE_CSS + REPORT_CSS, "report"),
        "<header>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="summary">{_e(summary_line(rows, statuses))}</p>',
        "</header>",
        "<main>",
        _table(rows, statuses),
    ]
    for n, (row, run, status) in enumerate(zip(rows, found, statuses), 1):
        out.append(_section(n, row, run, status, sharing))
    out += ["</main>", "<footer>Written by memagent: one run per document and question.</footer>", "</body>", "</html>"]
    # The one pass that keeps control characters out of the file: every outside text is in `out`
    # by now, and none of the page's own markup holds one. Lone surrogates (from undecodable file
    # names) also go, so the page can be written as UTF-8.
    return visible("\n".join(out) + "\n")


def _shared_row(row: Row, sharing: Sharing) -> dict[str, Any]:
    """`row` with its document, evidence places and error as sharing shows them."""
    shared = dict(row)
    if row.get("document"):
        shared["document"] = sharing.name(row["document"])
    if row.get("error"):
        shared["error"] = sharing.text(row["error"])
    shared["evidence"] = [
        {**record, "spans": [{**span, "path": sharing.name(span.get("path"))} for span in record.get("spans") or []]}
        for record in row.get("evidence") or []
    ]
    return shared


def _run_of(row: Row, runs: Mapping[str, Run]) -> Run | None:
    trace = row.get("trace")
    return runs.get(trace) if isinstance(trace, str) else None


def _table(rows: Sequence[Row], statuses: Sequence[str]) -> str:
    out = [
        # Wide content (a long unbroken file name) scrolls inside the box instead of widening the page.
        '<div class="results">',
        '<table class="results" id="results">',
        "<thead><tr><th>#</th><th>Document</th><th>Question</th><th>Answer</th><th>Evidence</th><th>Status</th></tr></thead>",
        "<tbody>",
    ]
    for n, (row, status) in enumerate(zip(rows, statuses), 1):
        link = f'href="#{_anchor(n)}"'
        answer = row.get("answer")
        if answer is not None:
            answer_cell = _e(clip(str(answer), ANSWER_CLIP)) if str(answer).strip() else '<span class="more">(empty)</span>'
        elif row.get("error"):
            answer_cell = f'<span class="error">{_e(clip(str(row["error"]), ANSWER_CLIP))}</span>'
        else:
            answer_cell = '<span class="more">no answer</span>'
        places = evidence_locations(row.get("evidence") or [])
        shown = "<br>".join(_e(p) for p in places[:LOCATIONS_SHOWN]) or '<span class="more">-</span>'
        if len(places) > LOCATIONS_SHOWN:
            shown += f'<br><span class="more">+{len(places) - LOCATIONS_SHOWN} more</span>'
        out.append(
            f'<tr><td class="n"><a {link}>{n}</a></td>'
            f"<td><a {link}>{_e(row.get('document') or '?')}</a></td>"
            f"<td>{_e(clip(str(row.get('question') or ''), ANSWER_CLIP))}</td>"
            f"<td>{answer_cell}</td>"
            f'<td class="loc">{shown}</td>'
            f'<td class="st"><span class="status {_e(_status_class(status))}">{_e(status)}</span></td></tr>'
        )
    out += ["</tbody>", "</table>", "</div>"]
    if not rows:
        out.append('<p class="muted">No runs.</p>')
    return "\n".join(out)


def _status_class(status: str) -> str:
    return status.replace(" ", "-")


def _section(n: int, row: Row, run: Run | None, status: str, sharing: Sharing) -> str:
    anchor = _anchor(n)
    out = [
        f'<section class="run" id="{anchor}">',
        f'<h2><span class="n">{n}.</span> {_e(row.get("document") or "?")} '
        f'<span class="status {_e(_status_class(status))}">{_e(status)}</span></h2>',
        f'<p class="question"><strong>Question:</strong> {_e(row.get("question") or "")}</p>',
        answer_html(row.get("answer")),
    ]
    if row.get("error"):
        out.append(note_html("Error", str(row["error"])))
    quoted = quotes_html(row.get("quotes") or [], sharing, level=3)
    if quoted:
        out.append(quoted)
    out += ["<h3>Evidence</h3>", _evidence_list(anchor, row.get("evidence") or [], run)]
    steps = row.get("steps")
    facts = [_plural(steps, "step") if isinstance(steps, int) else None, f"trace {row['trace']}" if row.get("trace") else None]
    if run is not None:
        note = status_note(run)
        out += [
            '<details class="trace">',
            f"<summary>Memory timeline ({_e(', '.join(f for f in facts if f))})</summary>",
            run_meta_html(run),
            note_html("Note", note) if note else "",
            timeline_html(run, id_prefix=f"{anchor}-"),
            "</details>",
        ]
    elif row.get("trace"):
        out.append(f'<p class="muted">Trace {_e(row["trace"])} is not in the trace store, so its timeline is not shown.</p>')
    else:
        out.append('<p class="muted">No trace was recorded for this run.</p>')
    out += ['<p class="top"><a href="#results">↑ results</a></p>', "</section>"]
    return "\n".join(line for line in out if line)


def _evidence_list(anchor: str, evidence: Sequence[Mapping[str, Any]], run: Run | None) -> str:
    """One item per evidence step: where it read and, from the trace, what it added to the memory."""
    if not evidence:
        return '<p class="muted">No evidence: no step added words that are still in the final memory.</p>'
    added = _additions(run) if run is not None else {}
    recorded = {s.get("index") for s in (run.get("steps") or [])} if run is not None else set()
    items = []
    for record in evidence:
        step = record.get("step")
        places = describe_spans(record.get("spans") or [])
        label = f"step {_e(step)}"
        if step in recorded:  # the timeline has an element with that id to go to
            label = f'<a href="#{anchor}-step-{step}">{label}</a>'
        item = f"<li>{label}: {_e(places)}"
        text = added.get(step) if isinstance(step, int) else None
        if text is None and isinstance(record.get("memory"), str):
            text = f"memory after the step: {record['memory']}"
        if text:
            item += f'<div class="added">{_e(clip(text, ADDED_CLIP))}</div>'
        items.append(item + "</li>")
    return '<ul class="evidence">' + "".join(items) + "</ul>"


def _additions(run: Run) -> dict[int, str]:
    """Step index -> the words that step added to the memory, as "added: …"."""
    result: dict[int, str] = {}
    before = INITIAL_MEMORY
    for step in run.get("steps") or []:
        memory = step.get("memory") or ""
        added, _ = split_changes(word_diff(before, memory))
        if isinstance(step.get("index"), int) and added:
            result[step["index"]] = "added: " + " … ".join(added)
        before = memory
    return result
