"""`memagent traces ...`: list, show, diff, export, search and remove recorded runs; the command
line's front end to the traces package (memagent_cli/traces), which keeps them.

Each command reads the TraceStore and prints for people, or JSON with --json. A run is named
by any unique prefix of its id, or `last`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Mapping, Optional

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.config import shown_settings
from ..core.memdiff import changes, evidence_record, evidence_steps, word_diff
from ..core.protocols import DEFAULT as DEFAULT_PROTOCOL
from ..core.protocols import get as get_protocol
from ..core.provenance import describe_extent, describe_spans
from ..core.quotes import QUOTE_FIELDS, describe_quotes
from ..errors import EXIT_USAGE, MemagentError
from .common import check_outputs, command_group, run_guard, stderr_console, warner
from .options import JsonOpt
from .textout import SafeConsole, clip, print_json, visible

if TYPE_CHECKING:
    from ..traces.store import TraceStore

app = command_group("Inspect recorded runs: every memory step with where it read, and the answer.")

RunArg = Annotated[str, typer.Argument(metavar="ID|last", help="A run: any unique prefix of its id, or last.")]


def _conversation_option(help: str) -> Any:
    """--conversation (--cid): the conversation a traces command shows, "last" or a prefix of its id."""
    return typer.Option("--conversation", "--cid", metavar="ID|last", help=help, show_default=False)


def _store() -> TraceStore:
    from ..traces.store import TraceStore

    store = TraceStore()
    if store.notice:
        warner(SafeConsole(stderr=True))(store.notice)
    return store


def _out(width: int | None = None) -> Console:
    """stdout: `width` columns where given; a terminal's own; piped, as wide as the lines are (a
    table is not squeezed into 80 columns, its questions wrapped a word a line)."""
    if width is None and not sys.stdout.isatty():
        width = 100_000
    return SafeConsole(highlight=False, soft_wrap=False, width=width)


def _when(stamp: str | None) -> str:
    return (stamp or "")[:19].replace("T", " ")


def _said_in_brief(found: list[dict[str, Any]], key: str, json_out: bool, none_found: str) -> bool:
    """What a listing found, said when it needs no table: as JSON ({key: found}) with --json, or
    `none_found` (on stderr) when it found nothing. Whether it was said."""
    if json_out:
        print_json({key: found})
        return True
    if not found:
        SafeConsole(stderr=True).print(none_found, markup=False)
        return True
    return False


@app.command("list")
@run_guard
def list_runs(
    status: Annotated[
        Optional[str],
        typer.Option(help="Only runs with this status: running, complete, interrupted, failed.", show_default=False),
    ] = None,
    source: Annotated[
        Optional[str], typer.Option(help="Only runs whose source paths contain this text.", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs, newest first.", min=1)] = 20,
    reused: Annotated[
        bool,
        typer.Option(
            "--reused",
            help="Only runs whose answer was given again (the same question about the same text), the last given first.",
        ),
    ] = False,
    conversation: Annotated[
        Optional[str],
        _conversation_option(
            "The turns of one conversation, in order: each turn's run (a turn answered from another run lists that one)."
        ),
    ] = None,
    width: Annotated[
        Optional[int],
        typer.Option(help="Lay the table out in this many columns (default: the terminal's; piped, as wide as it is).", min=40),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Recorded runs, newest first."""
    if conversation is not None:
        _list_turns(conversation, json_out)
        return
    runs = _store().list_runs(status=status, source=source, limit=limit, reused=reused)
    none = "No answer has been given again yet." if reused else "No runs recorded yet. Run memagent ask to make one."
    if _said_in_brief(runs, "runs", json_out, none):
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ("id", "when", "status", "steps", *(("reused",) if reused else ()), "question", "sources", "answer")
    for name in columns:
        table.add_column(name, overflow="ellipsis", no_wrap=name in ("id", "when", "status", "steps", "reused"))
    for r in runs:
        total = f"/{r['steps_total']}" if r.get("steps_total") else ""
        sources = ", ".join(s["path"] for s in r["sources"][:2]) + (" …" if len(r["sources"]) > 2 else "")
        table.add_row(
            r["id"][:8],
            _when(r["reused_at"] if reused else r["started_at"]),
            r["status"],
            f"{r['step_count']}{total}",
            *((f"{r['reuses']}×",) if reused else ()),
            clip(r.get("asked") or r["question"], 40),
            visible(sources),
            clip(r.get("answer"), 30),
        )
    _out(width).print(table)


def _list_turns(ref: str, json_out: bool) -> None:
    """`traces list --conversation`: its turns, each with its run."""
    store = _store()
    found = store.conversation(ref)
    runs = _turn_runs(store, found, with_steps=False)
    if json_out:
        listed = [
            {**runs.get(t["run"], {"id": t["run"]}), "turn": t["turn"], "reused": t["reused"], "asked": t["question"]}
            for t in found["turns"]
        ]
        print_json({"conversation": found["id"], "runs": listed})
        return
    table = Table(box=None, header_style="bold", pad_edge=False, title=f"conversation {found['id']}", title_justify="left")
    for name in ("turn", "id", "when", "status", "question", "answer"):
        table.add_column(name, overflow="ellipsis", no_wrap=name in ("turn", "id", "when", "status"))
    for turn in found["turns"]:
        run = runs.get(turn["run"], {})
        table.add_row(
            f"{turn['turn']}{' (again)' if turn['reused'] else ''}",
            turn["run"][:8],
            _when(turn["asked_at"]),
            str(run.get("status", "removed")),
            clip(turn["question"], 50),
            clip(turn.get("answer"), 40),
        )
    _out().print(table)


@app.command()
@run_guard
def show(
    run_ref: RunArg,
    step: Annotated[Optional[int], typer.Option(help="Only this step.", min=1, show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """The memory's evolution step by step: where each step read and what it added and dropped."""
    run = _store().get_run(run_ref)
    steps = run["steps"]
    if step is not None and not any(s["index"] == step for s in steps):
        raise MemagentError(f"Run {run['id'][:8]} has no step {step}; it has {len(steps)}.", exit_code=EXIT_USAGE)
    from ..traces.quoting import stored_quotes  # reads sources again: the readers and numpy

    evidence = set(evidence_steps(steps))
    shows_answer = step is None and run.get("answer") is not None
    # the sources are read again only where the quotes are shown
    quotes = stored_quotes(run, _note) if json_out or shows_answer else []
    if json_out:
        shown = [s for s in steps if step is None or s["index"] == step]
        chosen = [evidence_record(s) for s in steps if s["index"] in evidence]
        print_json({**run, "steps": shown, "evidence": chosen, "quotes": [{k: q[k] for k in QUOTE_FIELDS} for q in quotes]})
        return
    out = _out()
    out.print(_header(run))
    previous, plain = _initial_memory(run), _plain(out)
    for s in steps:
        if step is None or s["index"] == step:
            out.print(_step_panel(s, previous, s["index"] in evidence, plain))
        previous = s["memory"]
    if shows_answer:
        out.print(Text.assemble(("answer: ", "bold"), visible(run["answer"])))
        for line in describe_quotes(quotes):
            out.print(Text.assemble(("quote ", "bold"), visible(line)))


def _note(text: str) -> None:
    """A one-line note on stderr: a quote's source changed or gone, a quote not highlighted."""
    stderr_console().print(f"note: {text}", markup=False, highlight=False, soft_wrap=True)


# Shown in the header's own words already, or where the run was (not how it read)
_HEADER_SETTINGS = ("protocol", "cwd")


def _header(run: Mapping[str, Any]) -> Text:
    model = run.get("model") or {}
    sources = ", ".join(
        str(s.get("title") or s["path"]) + (f" ({describe_extent(s)})" if describe_extent(s) else "") for s in run["sources"]
    )
    total = f"/{run['steps_total']}" if run.get("steps_total") else ""
    status_style = {"complete": "green", "running": "cyan", "interrupted": "yellow", "failed": "red"}.get(run["status"], "")
    text = Text.assemble(
        ("run ", "bold"),
        run["id"],
        "  ",
        (run["status"], status_style),
        f"  {_when(run['started_at'])}",
        f"  steps {run['step_count']}{total}\n",
        (f"conversation {run['conversation'][:8]}, turn {run['turn']}\n" if run.get("conversation") else "", "dim"),
        ("Q: ", "bold"),
        visible(run["question"]),
        "\n",
        ("model ", "dim"),
        visible(str(model.get("name", "?"))),
        ("  sources ", "dim"),
        visible(sources),
    )
    protocol = _protocol_name(run)
    if protocol != DEFAULT_PROTOCOL:
        text.append_text(Text.assemble(("  protocol ", "dim"), visible(protocol)))
    shown = {k: v for k, v in shown_settings(run.get("settings") or {}).items() if k not in _HEADER_SETTINGS}
    if shown:
        text.append_text(Text.assemble(("\nsettings ", "dim"), visible(", ".join(f"{k}={v}" for k, v in shown.items()))))
    if run.get("error"):
        text.append_text(Text("\nerror: " + visible(run["error"]), style="red"))
    continued = run.get("continued_from")
    if continued:
        taken = "step 1" if continued["step"] == 1 else f"steps 1–{continued['step']}"
        text.append_text(Text(f"\ncontinued run {continued['run'][:8]}: {taken} taken from it", style="dim"))
    if run.get("reuses"):
        times = "once" if run["reuses"] == 1 else f"{run['reuses']} times"
        text.append_text(Text(f"\nanswer given again {times}, last {_when(run.get('reused_at'))}", style="dim"))
    return text


def _diff_text(before: str, after: str, plain: bool) -> Text:
    """What a step added (green) and dropped (red, struck through); where nothing shows color
    (NO_COLOR, a pipe, a file), git's plain word-diff marks instead: {+added+} and [-dropped-]."""
    body = Text()
    for op, text in word_diff(before, after):
        if op == "equal":
            body.append(visible(text))
        elif plain:
            body.append("{+" + visible(text) + "+}" if op == "insert" else "[-" + visible(text) + "-]")
        else:
            body.append(visible(text), style="green" if op == "insert" else "red strike")
    return body


def _plain(console: Console) -> bool:
    return console.no_color or console.color_system is None


def _protocol_name(run: Mapping[str, Any]) -> str:
    """The protocol a run used; a trace from before protocols used the default, memagent's."""
    return (run.get("settings") or {}).get("protocol") or DEFAULT_PROTOCOL


def _initial_memory(run: Mapping[str, Any]) -> str:
    """The memory a run started from: its protocol's."""
    return get_protocol(_protocol_name(run)).initial_memory


def _step_panel(s: Mapping[str, Any], previous: str, evidence: bool, plain: bool) -> Panel:
    added, dropped = changes(previous, s["memory"])
    body = _diff_text(previous, s["memory"], plain)
    stats = (
        f"+{sum(len(a.split()) for a in added)} −{sum(len(d.split()) for d in dropped)} words · "
        f"{s['memory_tokens']} tok memory · {s['seconds']:.1f}s"
    )
    if s["finish_reason"] == "length":
        stats += " · cut at the limit"
    title = Text.assemble(
        (f"step {s['index']}", "bold"),
        f"  {visible(describe_spans(s['spans']))}",
        ("  ★ evidence", "yellow") if evidence else "",
        (f"  from run {s['copied_from'][:8]}", "dim") if s.get("copied_from") else "",
    )
    return Panel(body, title=title, title_align="left", subtitle=stats, subtitle_align="right", border_style="blue")


@app.command()
@run_guard
def diff(
    run_ref: RunArg,
    k: Annotated[int, typer.Argument(help="A step (0 is the initial memory).", min=0)],
    l: Annotated[  # noqa: E741 - K and L name the two steps in the help
        Optional[int],
        typer.Argument(help="A later step. Default: the step after K.", min=0, show_default=False),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """The memory between two steps: what was added (green) and dropped (red); without color,
    {+added+} and [-dropped-]."""
    run = _store().get_run(run_ref)
    memories = [_initial_memory(run)] + [s["memory"] for s in run["steps"]]
    l = k + 1 if l is None else l  # noqa: E741
    for n in (k, l):
        if n >= len(memories):
            raise MemagentError(f"Run {run['id'][:8]} has no step {n}; it has {len(memories) - 1}.", exit_code=EXIT_USAGE)
    if json_out:
        ops = word_diff(memories[k], memories[l])
        print_json({"run": run["id"], "from": k, "to": l, "ops": [{"op": o, "text": t} for o, t in ops]})
        return
    out = _out()
    out.print(Group(Text(f"step {k} → step {l}", style="bold"), _diff_text(memories[k], memories[l], _plain(out))))


@app.command()
@run_guard
def export(
    run_ref: Annotated[
        Optional[str], typer.Argument(metavar="ID|last", help="A run: any unique prefix of its id, or last.", show_default=False)
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="jsonl, markdown, html (one self-contained page) or pdf (each PDF source with the quotes highlighted).",
        ),
    ] = "html",
    output: Annotated[
        Optional[Path],
        typer.Option(
            "--output", "-o", help="Write here instead of stdout (pdf: a file, or a folder for several PDFs).", show_default=False
        ),
    ] = None,
    conversation: Annotated[
        Optional[str], _conversation_option("Every turn of this conversation on one page (html or markdown), in place of a run.")
    ] = None,
) -> None:
    """One run as JSON lines, Markdown, an HTML page to share, or its PDFs with the quotes highlighted."""
    from ..traces.export import FORMATS
    from ..traces.export import export as render
    from ..traces.quoting import stored_quotes

    fmt = {"md": "markdown", "htm": "html", "json": "jsonl"}.get(fmt.lower(), fmt.lower())
    if (run_ref is None) == (conversation is None):
        raise MemagentError(
            "Name a run (ID or last), or a conversation with --conversation, to export.",
            "e.g. memagent traces export last, or memagent traces export --conversation last",
            exit_code=EXIT_USAGE,
        )
    if conversation is not None:
        _write_export(_conversation_page(conversation, fmt), None if output is not None and str(output) == "-" else output)
        return
    assert run_ref is not None
    if fmt == "pdf":
        check_outputs({"--output": output})  # PDFs are files (one per source): not standard output
        _export_pdf(_store().get_run(run_ref), output)
        return
    if output is not None and str(output) == "-":  # the usual spelling of standard output, where this writes by default
        output = None
    if fmt not in FORMATS:
        raise MemagentError(f"Unknown format {fmt!r}.", f"Use one of: {', '.join(FORMATS)}, pdf.", exit_code=EXIT_USAGE)
    run = _store().get_run(run_ref)
    quotes = stored_quotes(run, _note, context=True) if fmt in ("html", "markdown") else []
    _write_export(render(run, fmt, quotes), output)


def _conversation_page(ref: str, fmt: str) -> str:
    """`traces export --conversation`: its turns on one page."""
    from ..traces.conversation_export import export_conversation
    from ..traces.quoting import stored_quotes

    if fmt not in ("html", "markdown"):
        raise MemagentError(f"A conversation is exported as html or markdown, not {fmt}.", exit_code=EXIT_USAGE)
    store = _store()
    found = store.conversation(ref)
    runs = _turn_runs(store, found, with_steps=True)
    quotes = {run_id: stored_quotes(run, _note, context=True) for run_id, run in runs.items()}
    return export_conversation(found, runs, quotes, fmt)


def _turn_runs(store: TraceStore, conversation: Mapping[str, Any], *, with_steps: bool) -> dict[str, dict[str, Any]]:
    """The runs of a conversation's turns, by id, each read once; a run removed is left out (its turn
    stays, and says so)."""
    runs: dict[str, dict[str, Any]] = {}
    for turn in conversation["turns"]:
        if turn["run"] in runs:
            continue
        try:
            runs[turn["run"]] = store.get_run(turn["run"], with_steps=with_steps)
        except MemagentError:
            continue
    return runs


def _write_export(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise MemagentError(f"Cannot write {output}: {exc.strerror}.") from None
    SafeConsole(stderr=True).print(f"wrote {visible(str(output))}", markup=False, highlight=False, soft_wrap=True)


def _export_pdf(run: Mapping[str, Any], output: Path | None) -> None:
    """Each PDF source of the run that holds a quote, copied with its quotes highlighted."""
    from ..traces.pdfmarks import highlight
    from ..traces.quoting import stored_quotes

    sources = run.get("sources") or []

    def in_a_pdf(place: Mapping[str, Any]) -> bool:
        index = int(place["source"])
        return index < len(sources) and sources[index].get("kind") == "pdf" and not sources[index].get("member")

    # which PDFs to write is known from the stored places: the sources are read again only once
    # the command is known to be whole, and only the PDFs
    places = [place for place in run.get("quotes") or [] if in_a_pdf(place)]
    no_quote = MemagentError(
        f"Run {run['id'][:8]} has no quote in a PDF source to highlight.",
        "memagent traces show shows its quotes and evidence; --format html makes a page of them.",
    )
    if not places:
        raise no_quote
    if output is None:
        raise MemagentError(
            "--format pdf writes a PDF file.", "Name it with -o OUT.pdf (or -o FOLDER for several PDFs).", exit_code=EXIT_USAGE
        )
    by_pdf: dict[str, list[dict[str, Any]]] = {}
    for quote in stored_quotes({**run, "quotes": places}, _note):
        record: Mapping[str, Any] = next(s for s in sources if s.get("path") == quote["source"])
        by_pdf.setdefault(str(record.get("abspath") or record["path"]), []).append(quote)
    if not by_pdf:  # each PDF changed or gone since the run (said above)
        raise no_quote
    if len(by_pdf) > 1 and not output.is_dir():
        raise MemagentError(
            f"Run {run['id'][:8]} has quotes in {len(by_pdf)} PDFs.",
            "Name a folder with -o FOLDER: each is written there.",
            exit_code=EXIT_USAGE,
        )
    answer = run.get("answer") or ""
    comment = f"Question: {run.get('question', '')}\nAnswer: {answer}\n(memagent run {run['id'][:8]})"
    for path, its_quotes in by_pdf.items():
        destination = output / Path(path).name if output.is_dir() else output
        done, missing = highlight(Path(path), its_quotes, comment, destination)
        for text in missing:
            shown = clip(" ".join(text.split()), 80)
            _note(f'not found on its page (in its text, or by OCR on a scan), so not highlighted: "{shown}"')
        stderr_console().print(
            f"wrote {visible(str(destination))} ({done} of {len(its_quotes)} quotes highlighted)",
            markup=False,
            highlight=False,
            soft_wrap=True,  # one line, whatever the path's length: piped, it is read by scripts
        )


@app.command()
@run_guard
def search(
    text: Annotated[str, typer.Argument(help="Words to find in memories, questions and answers.")],
    limit: Annotated[int, typer.Option(help="At most this many hits.", min=1)] = 20,
    json_out: JsonOpt = False,
) -> None:
    """Full-text search over every recorded memory, question and answer."""
    hits = _store().search(text, limit=limit)
    if _said_in_brief(hits, "hits", json_out, "No matches."):
        return
    out = _out()
    for hit in hits:
        where = f"step {hit['step']}" if hit.get("step") is not None else hit["field"]
        out.print(Text.assemble((hit["run_id"][:8], "bold"), f"  {where}  ", clip(hit["snippet"], 160)))


@app.command()
@run_guard
def rm(
    run_ref: Annotated[Optional[str], typer.Argument(metavar="[ID|last]", show_default=False, help="The run to remove.")] = None,
    older_than: Annotated[
        Optional[str], typer.Option(help="Remove every run started longer ago than this, e.g. 30d, 12h.", show_default=False)
    ] = None,
) -> None:
    """Remove a run, or every run older than an age. A run still running is never removed."""

    if (run_ref is None) == (older_than is None):
        raise MemagentError("Name a run or give --older-than (one of the two).", exit_code=EXIT_USAGE)
    store = _store()
    err = SafeConsole(stderr=True)
    if run_ref is not None:
        run_id = store.resolve(run_ref)
        store.delete(run_id)  # refuses a run still running
        err.print(f"removed {run_id[:8]}", markup=False)
    else:
        assert older_than is not None  # one of the two, checked above
        removed = store.delete_older_than(parse_age(older_than))
        n = removed.count
        err.print(f"removed {n} run{'s' if n != 1 else ''}", markup=False)
        if removed.kept:
            k = len(removed.kept)
            which = ", ".join(f"{o.run_id[:8]} ({o.where()})" for o in removed.kept)
            err.print(f"kept {k} run{'s' if k != 1 else ''} still running: {which}", markup=False, soft_wrap=True)
            if any(o.state == "elsewhere" for o in removed.kept):
                err.print(
                    "a run on another host whose process is gone (a replaced container, a renamed machine) can be "
                    "released with `memagent traces release ID`, then removed",
                    style="dim",
                    markup=False,
                    soft_wrap=True,
                )


@app.command()
@run_guard
def release(
    run_ref: Annotated[str, typer.Argument(metavar="ID|last", show_default=False, help="The run to release.")],
) -> None:
    """Mark interrupted a run recorded as running on another host, once its process is gone.

    memagent checks whether a run's process is alive only on the host that ran it, so a run left
    "running" by a container that was replaced, or on a machine since renamed, stays so for good.
    Released, it can be resumed (memagent ask --resume ID) or removed. A run alive on this host is
    never released: stop it instead.
    """
    owner = _store().release(run_ref)
    SafeConsole(stderr=True).print(f"released {owner.run_id[:8]} ({owner.where()}): now interrupted", markup=False)


AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> float:
    """ "30d" -> seconds. Units: s, m, h, d, w (lowercase: "M" could mean months)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text or "")
    if match is None:
        raise MemagentError(
            f"Cannot read the age '{text}'", hint="use e.g. 30d, 12h, 90m (units s, m, h, d, w)", exit_code=EXIT_USAGE
        )
    return float(match.group(1)) * AGE_UNITS[match.group(2)]
