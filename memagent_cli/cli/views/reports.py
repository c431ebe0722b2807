"""Reports that are data in the layers below, drawn for a terminal here: `memagent inspect`'s
summary (core.inspection) and `memagent doctor`'s (install.doctor)."""

from __future__ import annotations

from typing import Any, Mapping

from rich.console import Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from ...core.inspection import Report
from ...core.protocols import get as get_protocol
from ...core.provenance import describe_extent
from ...model.memory import format_duration
from ..textout import visible


def render_inspection(report: Report) -> Group:
    info = report.info
    d = report.to_dict()
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("source", "left"),
        ("kind", "left"),
        ("read in", "right"),
        ("tokens", "right"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for s in d["sources"]:
        table.add_row(s["title"], s["kind"], describe_extent(s), f"{s['tokens']:,}")
    est = report.estimate
    lines: list[RenderableType] = [
        Text.assemble(
            ("model     ", "bold"),
            visible(info.path.name),  # by its file, as the live view names it
            ("" if info.has_weights else " (vocabulary only)", "dim"),
            (f"  tokenizer {report.prep.tokenizer.name}", "dim"),
        ),
        table,
        Text.assemble(
            ("document  ", "bold"),
            f"{report.stats.document_tokens:,} tokens → ",
            (f"{report.steps} step{'' if report.steps == 1 else 's'}", "bold"),
            f" of {report.chunk_tokens:,} tokens"
            + (" (a planner call and a memory write each)" if get_protocol(report.protocol).planner else "")
            + " + 1 final answer",
        ),
        _context_line(report.context),
        Text.assemble(
            ("estimate  ", "bold"),
            (
                f"~{format_duration(est['seconds_at_earliest_stop'])} if the planner stops at step 3, "
                if "seconds_at_earliest_stop" in est
                else ""
            ),
            f"up to ~{format_duration(est['seconds'])} on {est['device']}",
            (f"\n          assumes {est['assumes']}", "dim"),
        ),
    ]
    return Group(*lines)


def _context_line(context: Mapping[str, Any]) -> Text:
    from ...model.memory import format_bytes

    n = context["sequences"]
    size = f"{context['tokens_per_sequence']:,} tokens"
    if n > 1:
        size = f"{context['tokens']:,} tokens: {n} sequences of {context['tokens_per_sequence']:,}"
    line = Text.assemble(("context   ", "bold"), size, f", KV cache {format_bytes(context['kv_cache_bytes'])}")
    if context.get("kv_cache_assumes"):
        line.append(f" (assumes {context['kv_cache_assumes']})", style="dim")
    return line


def render_doctor(report: Mapping[str, Any]) -> Group:
    """A readable summary of a diagnose() report (plus report["paths"] when the caller added it)."""
    from ...model.memory import format_bytes

    def heading(title: str) -> Text:
        return Text(title, style="bold underline")

    def grid() -> Table:
        t = Table.grid(padding=(0, 2))
        t.add_column(style="dim", no_wrap=True)
        t.add_column()
        return t

    parts: list[RenderableType] = []
    parts.append(heading("Python & llama-cpp-python"))
    g = grid()
    g.add_row("Python", f"{report.get('python', '?')} ({report.get('platform', '?')})")
    g.add_row("llama-cpp-python", report.get("llama_cpp_python") or Text("not importable", style="red"))
    if report.get("llama_cpp_error"):
        g.add_row("error", Text(report["llama_cpp_error"], style="red"))
    g.add_row("backends", ", ".join(report.get("backends") or []) or "?")
    threads = report.get("threads") or {}
    if threads:
        g.add_row(
            "threads",
            f"{threads.get('default_generation_threads')} for generation ({threads.get('available_cores')} cores available)",
        )
    parts.append(g)

    parts.append(Text())
    parts.append(heading("GPU"))
    gpu = report.get("gpu") or {}
    g = grid()
    if gpu.get("offload_supported"):
        g.add_row("offload", Text("supported", style="green"))
        devices = gpu.get("devices") or []
        if not devices:
            g.add_row("devices", "none visible (llama.cpp will decide)")
        for d in devices:
            g.add_row(
                d.get("backend") or "GPU",
                f"{d.get('name')}: {format_bytes(d.get('free'))} free of {format_bytes(d.get('total'))}",
            )
    else:
        g.add_row("offload", Text("not supported: this llama-cpp-python build runs on the CPU only", style="yellow"))
        for d in gpu.get("system_devices") or []:
            g.add_row("present", f"{d.get('name')} ({format_bytes(d.get('total'))}), unused by this build")
    parts.append(g)
    if not gpu.get("offload_supported") and gpu.get("reinstall"):
        lead = "For a GPU fitted later" if gpu.get("gpu_visible") is False else "To enable it"
        parts.append(Text(f"{lead}, reinstall llama-cpp-python with a GPU backend:"))
        # Wrapped at spaces when the terminal is narrower (cropping would hide part of it);
        # --json carries it on one line.
        parts.append(Text("  " + gpu["reinstall"], style="bold"))
        if gpu.get("reinstall_note"):
            parts.append(Text(gpu["reinstall_note"], style="dim"))

    paths = report.get("paths")
    if paths:
        parts.append(Text())
        parts.append(heading("Paths"))
        g = grid()
        for key, value in paths.items():
            g.add_row(str(key), str(value))
        parts.append(g)

    models = report.get("models")
    if models is not None:
        parts.append(Text())
        ctx = report.get("n_ctx")
        parts.append(heading(f"Models (context {ctx:,} tokens)" if ctx else "Models (each at the context its runs make)"))
        if not models:
            parts.append(Text("none", style="dim"))
        else:
            t = Table(box=None, padding=(0, 2), show_edge=False)
            for col in ("name", "arch", "layers", "weights", "context", "KV cache", "GPU"):
                t.add_column(col, style="bold" if col == "name" else None, no_wrap=col != "GPU")
            for m in models:
                if m.get("error"):
                    t.add_row(m.get("name", "?"), "", "", "", "", "", Text(f"error: {m['error']}", style="red"))
                    continue
                plan = m.get("plan") or {}
                fits = m.get("fits_gpu")
                style = "green" if fits else ("yellow" if fits is False else "dim")
                t.add_row(
                    m.get("name", "?"),
                    m.get("architecture", "?"),
                    str(m.get("layers", "?")),
                    format_bytes(m.get("weights_bytes")),
                    f"{m['n_ctx']:,}" if m.get("n_ctx") else "?",
                    format_bytes(m.get("kv_bytes")),
                    Text(plan.get("reason", ""), style=style),
                )
            parts.append(t)
    return Group(*parts)
