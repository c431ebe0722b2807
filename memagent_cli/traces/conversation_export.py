"""Exporting a conversation (TraceStore.conversation) as one page, HTML or Markdown: each turn's
question as asked, then its run as export.py shows one, its quotes; a turn whose run is gone says so."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from ..display import visible
from .export import (
    PAGE_CSS,
    Record,
    answer_html,
    escape,
    export_markdown,
    md_inline,
    note_html,
    page_head,
    quotes_html,
    run_meta_html,
    status_note,
    timeline_html,
)
from .sharing import for_run, shared_time


def export_conversation(
    conversation: Record, runs: Mapping[str, Record], quotes: Mapping[str, Sequence[Record]], fmt: str
) -> str:
    """Every turn of a conversation (TraceStore.conversation) on one page, HTML or Markdown: each
    turn's question as asked, then its run as `export` shows one (`runs`, by id; a turn whose run
    is gone says so), its quotes (`quotes`, by run id)."""
    if fmt == "html":
        return _conversation_html(conversation, runs, quotes)
    if fmt == "markdown":
        return visible(_conversation_markdown(conversation, runs, quotes))
    raise ValueError(f"a conversation is exported as html or markdown, not {fmt!r}")


def _turn_note(turn: Record) -> str:
    said = f"answered from run {turn['run'][:8]}, given again" if turn.get("reused") else f"run {turn['run'][:8]}"
    changed = ", ".join(f"{name} {value}" for name, value in (turn.get("changed") or {}).items())
    return said + (f"; for this turn {changed}" if changed else "")


def _conversation_markdown(conversation: Record, runs: Mapping[str, Record], quotes: Mapping[str, Sequence[Record]]) -> str:
    turns = conversation.get("turns") or []
    out = [
        f"# Conversation {md_inline(conversation['id'])}",
        "",
        f"{len(turns)} turns, begun {md_inline(shared_time(conversation.get('started_at')))}.",
    ]
    for turn in turns:
        out += ["", f"## Turn {turn['turn']}: {md_inline(turn['question'])}", "", f"*{md_inline(_turn_note(turn))}*", ""]
        run = runs.get(turn["run"])
        if run is None:
            out.append("(its run has been removed)")
            continue
        body = export_markdown(run, quotes.get(turn["run"], ())).splitlines()
        out += _demoted(body[1:])  # its own title is the problem it read: the turn's question stands for it
    return "\n".join(out).rstrip("\n") + "\n"


def _demoted(lines: Sequence[str]) -> list[str]:
    """Markdown lines with every heading one level down, those inside fenced blocks (memories) left as they are."""
    out, fence = [], ""
    for line in lines:
        marker = re.match(r"^(`{3,})", line)
        if fence:
            if marker is not None and line.strip() == fence:
                fence = ""
        elif marker is not None:
            fence = marker.group(1)
        elif line.startswith("#"):
            line = "#" + line
        out.append(line)
    return out


# Additions to the export's stylesheet for a conversation's turns. No url(), @import or web fonts.
_CONVERSATION_CSS = """
section.turn { border-top: 2px solid var(--line); margin: 2rem 0 0; padding-top: .5rem; }
section.turn h2 { overflow-wrap: anywhere; }
p.muted { color: var(--muted); margin: 0 0 .5rem; }
details.trace { margin: 1rem 0 0; background: #eceef2; border-radius: 6px; padding: .5rem .75rem; }
details.trace > summary { cursor: pointer; font-weight: 600; }
"""


def _conversation_html(conversation: Record, runs: Mapping[str, Record], quotes: Mapping[str, Sequence[Record]]) -> str:
    turns = conversation.get("turns") or []
    out = [
        *page_head(f"memagent: conversation {conversation['id']}", PAGE_CSS + _CONVERSATION_CSS),
        "<header>",
        f"<h1>Conversation {escape(conversation['id'])}</h1>",
        f"<p>{len(turns)} turns, begun {escape(shared_time(conversation.get('started_at')))}.</p>",
        "</header>",
        "<main>",
    ]
    for turn in turns:
        number = turn["turn"]
        out += [f'<section class="turn" id="turn-{number}">', f"<h2>Turn {number}: {escape(turn['question'])}</h2>"]
        out.append(f'<p class="muted">{escape(_turn_note(turn))}</p>')
        run = runs.get(turn["run"])
        if run is None:
            out += [note_html("Note", "its run has been removed"), "</section>"]
            continue
        sharing = for_run(run)
        shown = sharing.run(run)
        out.append(answer_html(shown.get("answer")))
        note = status_note(shown)
        if note:
            out.append(note_html("Note", note))
        quoted = quotes_html(quotes.get(turn["run"], ()), sharing, level=3)
        if quoted:
            out.append(quoted)
        out.append(run_meta_html(shown))
        out += [
            '<details class="trace"><summary>Memory timeline</summary>',
            timeline_html(shown, id_prefix=f"turn-{number}-"),
            "</details>",
            "</section>",
        ]
    out += ["</main>", "<footer>Exported by memagent.</footer>", "</body>", "</html>"]
    return "\n".join(out) + "\n"
