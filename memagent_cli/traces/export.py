"""Exporting one recorded run (a trace dict from the store) as JSONL, Markdown or HTML.

This module owns the three export formats and nothing else: it reads the plain dict the store
gives, never the store itself, and writes text for the caller to save or print.

- JSONL is for machines: the run's fields on the first line, one line per step, nothing derived.
- Markdown is for reading and pasting: metadata, then every step's provenance, stats, memory and
  what the step added and dropped.
- HTML is one self-contained page (inline CSS, no script, no URL of any kind) with the memory
  timeline diffed step against step. Everything that came from a document, a model or a user is
  escaped; a Content-Security-Policy that forbids scripts and loads is a second line of defence.
  Its parts are public (PAGE_CSS, PAGE_CSP, status_note, run_meta_html, timeline_html, step_view,
  answer_html, note_html, escape, md_inline) so that report.py, conversation_export.py and the page
  (webapp/) draw the same timeline, steps, answer and notes.

Markdown and HTML are made to be passed on, so they show a run as sharing.py shares it: sources
named from where the run started, the model by name, times to the second, no absolute path of
this machine. JSONL keeps the record whole.

"Evidence" steps are those whose added words are still in the final memory
(memdiff.evidence_steps): the answer is written from that memory alone, so those are the
steps whose reading the answer can rest on.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any, Callable, Mapping, Sequence

from ..core.config import shown_settings
from ..core.events import Decision
from ..core.memagent import INITIAL_MEMORY
from ..core.memdiff import DELETE, EQUAL, INSERT, evidence_steps, split_changes, word_diff
from ..core.provenance import describe_extent, describe_spans
from ..core.qwenlong import parts as qwenlong_parts
from ..display import SCHEMA, json_controls_escaped, visible
from .sharing import Sharing, for_run, model_name

FORMATS = ("jsonl", "markdown", "html")

Record = Mapping[str, Any]  # a run, a step or a source, as the store gives it

EVIDENCE_MARK = "★ evidence"
EVIDENCE_MEANING = "the step added words that are still in the final memory"


def export(run: Record, fmt: str, quotes: Sequence[Record] = ()) -> str:
    """`run` in format `fmt`, one of FORMATS; `quotes` (traces.quoting.stored_quotes, with their
    paragraph) are shown in HTML and Markdown."""
    writers: dict[str, Callable[[Record, Sequence[Record]], str]] = {
        "jsonl": lambda run, _: export_jsonl(run),
        "markdown": export_markdown,
        "html": export_html,
    }
    if fmt not in writers:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    text = writers[fmt](run, quotes)
    # Markdown is read in terminals (cat, less): control characters become visible symbols there.
    # JSONL escapes them as JSON does; HTML escapes what it must and browsers show no controls.
    return visible(text) if fmt == "markdown" else text


# --- JSONL ------------------------------------------------------------------------------------


def export_jsonl(run: Record) -> str:
    """A "run" line with every field but the steps, then one "step" line per step."""
    lines = [_json_line({"type": "run", "schema": SCHEMA, **{k: v for k, v in run.items() if k != "steps"}})]
    lines += [_json_line({"type": "step", **step}) for step in _steps(run)]
    return "\n".join(lines) + "\n"


def _json_line(obj: Record) -> str:
    text = json.dumps(obj, ensure_ascii=False)
    # U+2028/2029 are legal inside JSON strings, but str.splitlines() and some JSONL readers cut
    # lines there; escaped they are the same JSON value. They can only occur inside strings.
    return json_controls_escaped(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


# --- shared views ------------------------------------------------------------------------------


def _steps(run: Record) -> list[Record]:
    return list(run.get("steps") or [])


def _memories(run: Record) -> list[str]:
    """The memory before step 1, then after every step."""
    return [INITIAL_MEMORY] + [step.get("memory") or "" for step in _steps(run)]


def _evidence(run: Record) -> set[int]:
    return set(evidence_steps(_steps(run)))


def _num(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _provenance(step: Record) -> str:
    return describe_spans(step.get("spans") or [])


CUT_NOTE = "cut at the memory budget"  # a memory update that ran out of tokens (finish_reason "length")


def _stats(step: Record) -> str:
    items = [
        f"{_num(step.get('tokens'))} tokens read",
        f"memory {_num(step.get('memory_tokens'))} tokens",
        f"prompt {_num(step.get('prompt_tokens'))}",
        f"generated {_num(step.get('generated_tokens'))}",
    ]
    if step.get("drafted_tokens"):
        items.append(f"drafted {_num(step.get('drafted_tokens'))}, {_num(step.get('accepted_tokens'))} taken")
    if step.get("seconds") is not None:
        items.append(f"{_num(float(step['seconds']))} s")
    return " · ".join(items)


def _model(run: Record) -> str:
    return model_name(run.get("model") or {})


def _source_line(source: Record) -> str:
    bits = [str(source.get("kind") or "")]
    extent = describe_extent(source)
    if extent:
        bits.append(extent)
    if source.get("tokens") is not None:
        bits.append(f"{_num(source['tokens'])} tokens")
    detail = ", ".join(b for b in bits if b)
    return f"{source.get('path', '?')} ({detail})" if detail else str(source.get("path", "?"))


def _settings(run: Record) -> str:
    return ", ".join(f"{k}={v}" for k, v in shown_settings(run.get("settings") or {}).items()) or "(none recorded)"


def _progress(run: Record) -> str:
    done = run.get("step_count", len(_steps(run)))
    total = run.get("steps_total")
    return f"{_num(done)} of {_num(total)} steps" if total is not None else f"{_num(done)} steps (total not known yet)"


def status_note(run: Record) -> str | None:
    """A sentence for a run that did not complete, None for one that did."""
    status = run.get("status")
    if status == "complete":
        return None
    progress = _progress(run)
    if status == "running":
        return f"This run was still running when it was exported: {progress} recorded, no answer yet."
    if status == "interrupted":
        return (
            f"This run was interrupted after {progress}; it has no answer, and the memory shown last "
            "is not the final one. Evidence marks are relative to the last recorded memory."
        )
    if status == "failed":
        error = run.get("error") or "no error recorded"
        return f"This run failed after {progress}: {error}"
    return f"This run's status is {status!r} ({progress})."


# --- Markdown ----------------------------------------------------------------------------------

_MD_ESCAPES = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~&#"})


def md_inline(text: Any) -> str:
    """One line of text that Markdown shows as is: white space collapsed, punctuation escaped.

    Backslash escapes (CommonMark allows one before any ASCII punctuation) keep "<script>" in a
    question from becoming HTML in a renderer, while the raw file stays readable.
    """
    return " ".join(str(text).split()).translate(_MD_ESCAPES)


def _md_fence(text: str, info: str = "text") -> str:
    """A fenced code block holding `text` verbatim: the fence is longer than any backtick run in
    it, so no line of the text can close the block early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def export_markdown(run: Record, quotes: Sequence[Record] = ()) -> str:
    sharing = for_run(run)
    run = sharing.run(run)  # for pasting elsewhere: nothing of this machine (sharing.py)
    steps = _steps(run)
    memories = _memories(run)
    evidence = _evidence(run)
    out = [f"# {md_inline(run.get('question') or '(no question)')}", ""]
    note = status_note(run)
    if note:
        out += [f"> **Note:** {md_inline(note)}", ""]
    out += [
        f"- **Run:** {md_inline(run.get('id', '?'))}",
        f"- **Status:** {md_inline(run.get('status', '?'))} ({md_inline(_progress(run))})",
        f"- **Started:** {md_inline(run.get('started_at') or '?')}; **ended:** {md_inline(run.get('ended_at') or '-')}",
        f"- **Model:** {md_inline(_model(run))}",
        "- **Sources:**",
    ]
    out += [f"  - {md_inline(_source_line(s))}" for s in run.get("sources") or []] or ["  - (none recorded)"]
    out += [f"- **Document:** {_num(run.get('document_tokens'))} tokens", f"- **Settings:** {md_inline(_settings(run))}"]
    if evidence:
        listed = ", ".join(str(k) for k in sorted(evidence))
        out.append(f"- **{EVIDENCE_MARK}** ({EVIDENCE_MEANING}): steps {listed}")
    out += ["", "## Answer", ""]
    answer = run.get("answer")
    out.append(_md_fence(answer) if answer is not None else "(no answer)")
    raw = run.get("raw_answer")
    if raw is not None and raw != answer:
        out += ["", "Raw answer:", "", _md_fence(raw)]
    if quotes:
        out += ["", "## Quotes"]
    for n, quote in enumerate(quotes, 1):
        before, after = quote.get("before") or "", quote.get("after") or ""
        # spaces around the bold: CommonMark closes "**" after a full stop only before a space
        text = f"{'…' + md_inline(before) + ' ' if before else ''}**{md_inline(quote.get('text') or '')}**"
        text += f" {md_inline(after)}" if after else ""
        out += ["", f"**[{n}] {md_inline(sharing.text(quote.get('location') or ''))}**", "", f"> {text}{'…' if after else ''}"]
    for n, step in enumerate(steps, 1):
        index = step.get("index", n)
        mark = f" {EVIDENCE_MARK}" if index in evidence else ""
        added, dropped = split_changes(word_diff(memories[n - 1], memories[n]))
        out += [
            "",
            f"## Step {index}{mark}",
            "",
            f"*{md_inline(_provenance(step))}*",
            "",
            md_inline(_stats(step)) + (f" · **{CUT_NOTE}**" if step.get("finish_reason") == "length" else ""),
            "",
            _md_fence(memories[n]),
            "",
        ]
        for label, runs in (("Added", added), ("Dropped", dropped)):
            if runs:
                out += [f"**{label}:**", ""] + [f"- {md_inline(r)}" for r in runs] + [""]
            else:
                out += [f"**{label}:** nothing", ""]
        out.pop()  # the blank line after the last list
    return "\n".join(out) + "\n"


# --- HTML --------------------------------------------------------------------------------------


def escape(value: Any) -> str:
    return html.escape(str(value), quote=True)


# No url(), @import or web fonts: the page must load nothing.
PAGE_CSS = """
:root { --fg: #1d1f23; --muted: #5f6670; --line: #d9dce1; --card: #fff; --bg: #f4f5f7;
        --ins: #d7f5dd; --ins-fg: #0b5d1e; --del: #fbdcdc; --del-fg: #8a1c1c; --star: #b8860b; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header, main { max-width: 60rem; margin: 0 auto; padding: 1rem 1.25rem; }
h1 { font-size: 1.4rem; margin: .5rem 0 1rem; white-space: pre-wrap; overflow-wrap: anywhere; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
.quotes h3, .quotes h4 { font-size: .95rem; margin: .9rem 0 .2rem; }
.quote { margin: 0; padding: .4rem .8rem; border-left: 3px solid var(--star); background: var(--card); }
mark { background: #ffeb3b; color: inherit; padding: 0 .1rem; }
.answer { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: .75rem 1rem;
          white-space: pre-wrap; overflow-wrap: anywhere; font-weight: 600; }
.answer.none { font-weight: normal; color: var(--muted); font-style: italic; }
details.raw { margin-top: .5rem; color: var(--muted); }
details.raw pre { white-space: pre-wrap; overflow-wrap: anywhere; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; margin: 1rem 0; }
dl.meta dt { color: var(--muted); }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
dl.meta ul { margin: 0; padding-left: 1.1rem; }
code { font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.note { background: #fff4d6; border: 1px solid #e8c96b; border-radius: 6px; padding: .6rem 1rem; margin: 1rem 0;
        white-space: pre-wrap; overflow-wrap: anywhere; }
.status { display: inline-block; padding: 0 .5rem; border-radius: 999px; background: var(--line); }
.status.complete { background: var(--ins); color: var(--ins-fg); }
.status.failed, .status.interrupted { background: var(--del); color: var(--del-fg); }
.legend { color: var(--muted); font-size: .9rem; }
.legend ins, .legend del { padding: 0 .25rem; }
#hide-del:checked ~ ol del { display: none; }
ol.timeline { list-style: none; padding: 0; margin: 1rem 0; }
.step { background: var(--card); border: 1px solid var(--line); border-left: 4px solid var(--line);
        border-radius: 6px; padding: .75rem 1rem; margin: 0 0 .75rem; }
.step.evidence { border-left-color: var(--star); box-shadow: 0 0 0 1px #f0dca0; }
.step .head { display: flex; flex-wrap: wrap; gap: .25rem .75rem; align-items: baseline; }
.step .idx { font-weight: 700; }
.step .badge { color: var(--star); font-weight: 600; }
.step .prov { overflow-wrap: anywhere; }
.step .stats { color: var(--muted); font-size: .85rem; }
.step .cut { color: var(--del-fg); }
pre.memory { white-space: pre-wrap; overflow-wrap: anywhere; margin: .5rem 0 0; padding: .5rem .75rem;
             background: #fafbfc; border: 1px solid var(--line); border-radius: 4px;
             font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
ins { background: var(--ins); color: var(--ins-fg); text-decoration: none; }
del { background: var(--del); color: var(--del-fg); }
.step .changes { font-size: .85rem; color: var(--muted); margin-top: .35rem; }
footer { max-width: 60rem; margin: 0 auto; padding: 1rem 1.25rem 2rem; color: var(--muted); font-size: .85rem; }
"""

# Defence in depth: should a value ever slip through unescaped, the browser still runs no script
# and fetches nothing. Only the inline <style> is allowed.
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _words(runs: list[str]) -> str:
    n = sum(len(r.split()) for r in runs)
    return f"{n:,} word" + ("" if n == 1 else "s")


def _diff_html(before: str, after: str) -> tuple[str, tuple[list[str], list[str]]]:
    """The new memory with the old one's dropped text inline: <ins> added, <del> dropped."""
    ops = word_diff(before, after)
    tags = {EQUAL: "{}", INSERT: "<ins>{}</ins>", DELETE: "<del>{}</del>"}
    return "".join(tags[kind].format(escape(text)) for kind, text in ops), split_changes(ops)


def run_meta_html(run: Record) -> str:
    """The run's facts (status, id, times, model, sources, settings, error) as one <dl>; `run` as
    sharing.py shares it (the callers pass it so)."""
    status = str(run.get("status") or "?")
    sources = "".join(
        f"<li>{escape(_source_line(s))}"
        + (f' <code title="sha256">{escape(str(s["sha256"])[:12])}</code>' if s.get("sha256") else "")
        + "</li>"
        for s in run.get("sources") or []
    )
    settings = "".join(
        f"<li><code>{escape(k)}</code> = <code>{escape(v)}</code></li>"
        for k, v in shown_settings(run.get("settings") or {}).items()
    )
    meta = [
        ("Status", f'<span class="status {escape(status)}">{escape(status)}</span> ({escape(_progress(run))})'),
        ("Run", f"<code>{escape(run.get('id', '?'))}</code>"),
        ("Started", escape(run.get("started_at") or "?")),
        ("Ended", escape(run.get("ended_at") or "-")),
        ("Model", escape(_model(run))),
        ("Sources", f"<ul>{sources}</ul>" if sources else "(none recorded)"),
        ("Document", f"{escape(_num(run.get('document_tokens')))} tokens"),
        ("Settings", f"<ul>{settings}</ul>" if settings else "(none recorded)"),
    ]
    if run.get("error"):
        meta.append(("Error", escape(run["error"])))
    return '<dl class="meta">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in meta) + "</dl>"


def step_view(step: Record, before: str, evidence: bool, early_stop: int = 3, protocol: str = "memagent") -> dict[str, Any]:
    """One step as a timeline shows it (this export, the page, `ask --each --html`): its index, where it
    read, its counts, its memory diffed against `before` (HTML: <ins> added, <del> dropped) with the
    words added and dropped, whether it is evidence, was cut at its budget, was taken from an earlier
    run (`copied_from`), and the planner's decision before it in words: InfMem's search or STOP, or
    the plan a QwenLong memory ends with."""
    body, (added, dropped) = _diff_html(before, step.get("memory") or "")
    decision = step.get("decision")
    if decision:
        try:
            planned: str | None = Decision.from_dict(decision, early_stop).describe()
        except (KeyError, TypeError):  # a trace from another version: shown without it
            planned = "(a decision this version of memagent cannot read)"
    elif protocol == "qwenlong":
        planned = qwenlong_parts(str(step.get("memory") or ""))[1].strip() or None
    else:
        planned = None
    return {
        "index": step.get("index"),
        "provenance": _provenance(step),
        "stats": _stats(step),
        "cut": step.get("finish_reason") == "length",
        "diff": body,
        "added": _words(added),
        "dropped": _words(dropped),
        "evidence": evidence,
        "copied_from": step.get("copied_from"),
        "decision": planned,
    }


def timeline_html(run: Record, *, id_prefix: str = "") -> str:
    """The memory timeline: the hide-dropped-text switch, the legend and one <li> per step, each
    memory diffed against the one before. `id_prefix` keeps element ids unique when one page holds
    several runs' timelines; PAGE_CSS's switch rule matches only the unprefixed "hide-del"."""
    steps = _steps(run)
    memories = _memories(run)
    evidence = _evidence(run)
    switch = escape(f"{id_prefix}hide-del")
    # A CSS-only switch (no script): the checkbox hides the struck-out text of every step.
    out = [f'<input type="checkbox" id="{switch}"> <label for="{switch}">hide dropped text</label>']
    out.append(
        f'<p class="legend"><ins>added</ins> <del>dropped</del> against the memory before the step; '
        f'<span class="badge">{EVIDENCE_MARK}</span>: {EVIDENCE_MEANING}.</p>'
    )
    out.append('<ol class="timeline">')
    for n, step in enumerate(steps, 1):
        view = step_view(step, memories[n - 1], step.get("index", n) in evidence)
        index = view["index"] or n
        head = [f'<span class="idx">Step {escape(index)}</span>']
        if view["evidence"]:
            head.append(f'<span class="badge">{EVIDENCE_MARK}</span>')
        head.append(f'<span class="prov">{escape(view["provenance"])}</span>')
        stats = escape(view["stats"])
        if view["cut"]:
            stats += f' · <span class="cut">{CUT_NOTE}</span>'
        step_id = f"{id_prefix}step-{index}" if isinstance(index, int) else f"{id_prefix}step-n{n}"
        out += [
            f'<li class="step{" evidence" if view["evidence"] else ""}" id="{escape(step_id)}">',
            f'<div class="head">{"".join(head)}</div>',
            f'<div class="stats">{stats}</div>',
            f'<pre class="memory">{view["diff"]}</pre>',
            f'<div class="changes">{view["added"]} added, {view["dropped"]} dropped</div>',
            "</li>",
        ]
    out.append("</ol>")
    if not steps:
        out.append("<p>No steps recorded.</p>")
    return "\n".join(out)


def answer_html(answer: Any) -> str:
    """The answer's box, or a box that says there is none (`answer` None)."""
    if answer is None:
        return '<div class="answer none">No answer.</div>'
    return f'<div class="answer">{escape(answer)}</div>'


def note_html(label: str, text: str) -> str:
    """A note beside the answer ("Note", "Error"): what the reader should know about the run."""
    return f'<div class="note" role="note"><strong>{escape(label)}:</strong> {escape(text)}</div>'


def page_head(title: str, css: str, body_class: str = "") -> list[str]:
    """The lines of an exported page up to its <body>: the policy that blocks scripts and loads,
    the title (escaped here) and the inline style; the page and `traces.report`'s share them."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{escape(PAGE_CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{css}</style>",
        "</head>",
        f'<body class="{body_class}">' if body_class else "<body>",
    ]


def quotes_html(quotes: Sequence[Record], sharing: Sharing, level: int = 2) -> str:
    """The quotes under an <h`level`>, each under its location as a heading one level down, marked
    in its paragraph where that is given (`before`, `after`); nothing when there are none."""
    if not quotes:
        return ""
    out = ['<section class="quotes">', f"<h{level}>Quotes</h{level}>"]
    for n, quote in enumerate(quotes, 1):
        before, after = quote.get("before") or "", quote.get("after") or ""
        out += [
            f"<h{level + 1}>[{n}] {escape(sharing.text(quote.get('location') or ''))}</h{level + 1}>",
            f'<p class="quote">{"…" if before else ""}{escape(before)}<mark>{escape(quote.get("text") or "")}</mark>'
            f"{escape(after)}{'…' if after else ''}</p>",
        ]
    out.append("</section>")
    return "\n".join(out)


def export_html(run: Record, quotes: Sequence[Record] = ()) -> str:
    sharing = for_run(run)
    run = sharing.run(run)  # a page to share: nothing of this machine (sharing.py)
    question = str(run.get("question") or "(no question)")
    title = " ".join(question.split())
    title = title if len(title) <= 80 else title[:79] + "…"

    out = [
        *page_head(f"memagent: {title}", PAGE_CSS),
        "<header>",
        f"<h1>{escape(question)}</h1>",
    ]
    answer = run.get("answer")
    out.append(answer_html(answer))
    raw = run.get("raw_answer")
    if raw is not None and raw != answer:
        out.append(f'<details class="raw"><summary>Raw answer</summary><pre>{escape(raw)}</pre></details>')
    note = status_note(run)
    if note:
        out.append(note_html("Note", note))

    quoted = quotes_html(quotes, sharing)
    if quoted:
        out.append(quoted)
    out.append(run_meta_html(run))
    out += ["</header>", "<main>", "<h2>Memory timeline</h2>", timeline_html(run)]
    out += [
        "</main>",
        f"<footer>Exported by memagent. Run <code>{escape(run.get('id', '?'))}</code>.</footer>",
        "</body>",
        "</html>",
    ]
    return "\n".join(out) + "\n"
