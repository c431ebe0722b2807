"""B10's rows and section: what each part of its results says, with the commands that ran it."""

from __future__ import annotations

from typing import Any

from benchmarks.harness.registry import Row, Target, mark

SCALE = Target("≤ 1.1")  # wall time against the ideal (requests x latency / slots)
FLAT = Target("≤ 1.1")  # peak RSS at 10,000 runs against 1,000
# The served parts' budgets and vocabulary (the section names them)
TOKENIZER = "tests/data/shared/fixtures/ggml-vocab-qwen2.gguf"
CHUNK, MEMORY, ANSWER = 64, 32, 16
BUDGETS = ["--chunk-tokens", str(CHUNK), "--memory-tokens", str(MEMORY), "--answer-tokens", str(ANSWER)]


def rows(m: dict[str, Any], results: object) -> list[Row]:
    out = []
    if "embedded" in m:
        e = m["embedded"]
        out.append(
            Row(
                f"`ask --each` batched / one after another, {e['documents']} documents ({e['model']}, this CPU)",
                f"{e['speedup']}x",
            )
        )
    if "scale" in m:
        r = m["scale"]["runs"]["no_trace"]
        out.append(SCALE.row(f"`batch` of {m['scale']['chains']:,} chains on served engines, wall / ideal", r["ratio"]))
    if "rss" in m:
        for kind in ("batch", "each"):
            runs = m["rss"][kind]
            peak = round(runs["10000"]["peak_rss_mb"] / runs["1000"]["peak_rss_mb"], 3)
            out.append(FLAT.row(f"`{'ask --each' if kind == 'each' else 'batch'}` peak RSS, 10,000 runs / 1,000", peak))
    if "loss" in m:
        out.append(Row("`batch` with one of 4 servers killed mid-job, wall / intact", f"{m['loss']['wall_ratio']}x"))
    return out


def section(results: dict[str, Any], found: object) -> str:
    lines = []
    e = results.get("embedded")
    if e:
        lines.append(
            f"**Embedded engine.** `ask --each` over {e['documents']} documents of real prose ({e['steps']} chunks of "
            f"{e['chunk_tokens']} tokens each, {e['memory_tokens']}-token memories, greedy) with {e['model']} on "
            f"{e['device']}: one run after another {e['one_at_a_time_seconds']} s, batched in one context "
            f"{e['batched_seconds']} s, **{e['speedup']}x**. Answers agree for {e['answers_agree']} of "
            f"{e['documents']} documents and every step's memory for {e['memories_agree']} (where they differ, "
            "it is the engine's batch-shape numerics: B6). This is why `--each` runs documents one after another "
            "on a CPU and batches them on a GPU.\n"
        )
    served_parts = [results[name] for name in ("scale", "rss", "loss") if name in results]
    if served_parts:
        m = served_parts[0]["machine"]
        lines.append(
            "**Served engines, many runs.** Each figure below is one run of the real CLI (`python -m memagent_cli "
            "batch` or `ask --each`) in a process of its own, against tests/fakeserver.py's OpenAI-compatible "
            "servers in another process (started by its command line): each request holds one of a server's "
            "slots for a fixed latency, its reply streamed in 4 pieces; chunks are cut by the vocabulary-only "
            f"GGUF `{TOKENIZER}`, budgets `{' '.join(BUDGETS)}`. Client CPU is the CLI process's own "
            f"(os.wait4), its peak RSS its VmHWM. Machine: {m['cores']} cores ({m['cpu']}), Python {m['python']}, "
            f"shared with other work (load average {m['load'][0]} at the start), {m['when']}; "
            "`python -m benchmarks run B10` runs the parts in one go.\n"
        )
    if "scale" in results:
        lines.append(_scale_text(results["scale"]))
    if "rss" in results:
        lines.append(_rss_text(results["rss"]))
    if "loss" in results:
        lines.append(_loss_text(results["loss"]))
    return "\n".join(lines) + "\n"


def _commands(*commands: str) -> str:
    return "```\n" + "\n".join(commands) + "\n```\n"


def _scale_text(s: dict[str, Any]) -> str:
    bare, traced = s["runs"]["no_trace"], s["runs"]["trace"]
    c = bare["checks"]
    rate = s["requests"] / s["ideal_seconds"]
    rows = [
        "| run | latency: ideal | wall | ratio (target ≤ 1.1) | client CPU / request | client cores busy | "
        "main thread CPU | startup | mean chain (ideal) | mean request | slots busy (most) | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    runs = [("`--no-trace`", bare), ("trace store on", traced), ("`--no-trace`, faster", s["runs"]["faster"])]
    for label, r in runs:
        rows.append(
            f"| {label} | {r['latency']} s: {r['ideal_seconds']} s | {r['wall_seconds']} s | {r['ratio']}x "
            f"{mark(r['ratio'] <= 1.1)} | {r['cpu_ms_per_request']} ms | {r['busy_cores']} | "
            f"{r['main_thread_cpu_seconds']} s | {r['startup_seconds']} s | {r['chain_seconds_mean']} s "
            f"({s['steps'] * r['latency']:g} s) | {1000 * r['request_seconds_mean']:.0f} ms | "
            f"{sum(r['checks']['max_busy'])} of {s['parallel']} | {r['peak_rss_mb']} MB |"
        )
    exact = all(
        r["rc"] == 0
        and r["checks"]["ids_once"]
        and r["checks"]["answers"] == s["chains"]
        and r["checks"]["requests_per_chain"] == [s["steps"], s["steps"]]
        and r["checks"]["requests_served"] == s["requests"]
        for _, r in runs
    )
    fast = s["requests"] / s["runs"]["faster"]["ideal_seconds"]
    cost = s["trace_cost"]
    ceil = s["ceilings"]
    top, few, tokens = ceil["threads"], ceil["few_threads"], ceil["token_events"]
    return (
        f"**Scale.** `batch` of {s['chains']:,} lines over {s['servers']} servers of {s['slots']} slots, "
        f"{s['latency']} s a request, `--parallel {s['parallel']}`. Each line's inline context is exactly "
        f"{s['context_tokens']} tokens, {s['steps'] - 1} chunks of {CHUNK}: {s['steps'] - 1} memory updates and the "
        f"answer, **{s['steps']} requests a chain**, {s['requests']:,} in all; ideal wall time "
        f"{s['requests']:,} x {s['latency']} s / {s['parallel']} slots = {s['ideal_seconds']} s "
        f"({-(-s['chains'] // s['parallel'])} waves of chains of {s['ideal_chain_seconds']} s), {rate:.0f} requests/s; "
        f"the faster run asks {fast:.0f} requests/s.\n\n" + "\n".join(rows) + "\n\n"
        f"Every run: every custom_id once with its answer, the servers counted {c['requests_per_chain'][0]}-"
        f"{c['requests_per_chain'][1]} requests per chain key and {c['requests_served']:,} served in all {mark(exact)}. "
        "Slots busy is the most the servers had busy at once, summed; the fake servers' own process used "
        f"{bare['servers_cpu_seconds']} s of CPU in the first run. Startup is launch to the first chain's start "
        "(imports, the tokenizer, the job file checked); a chain's time and a request's are as the client saw them "
        "(ideal: the latency). Client CPU is the process's user + "
        "system time over the requests; the main thread feeds the trace store and the results file, worker threads "
        "run the chains.\n\n"
        f"**The trace store** (each run's steps committed to SQLite one by one as they end, on the main thread) costs "
        f"**{cost['wall_ratio']}x** the wall time of `--no-trace`, {cost['cpu_ms_per_request']:+} ms CPU a request "
        f"({cost['main_thread_cpu_seconds']:+} s on the main thread); its database ended at {traced['trace_store_mb']} MB.\n\n"
        f"**The client's ceiling.** The same job on servers with no latency, so that the client alone sets the pace "
        f"(requests/s after startup): with {top['parallel']} chains in flight, **{top['requests_per_second']:.0f} "
        f"requests/s** at {top['cpu_ms_per_request']} ms CPU each; with {few['parallel']} in flight, "
        f"{few['requests_per_second']:.0f} requests/s at {few['cpu_ms_per_request']} ms; with {top['parallel']} and "
        f"each reply streamed a token an event, as a real server sends it ({tokens['pieces']} pieces, the answer "
        f"{ANSWER}), {tokens['requests_per_second']:.0f} requests/s at {tokens['cpu_ms_per_request']} ms. One "
        f"memagent process runs its chains as threads under one interpreter lock, so at most about one core's "
        f"worth of this work: the scale job needs {rate:.0f} requests/s, the faster one {fast:.0f}.\n\n"
        + _commands(
            bare["servers_command"] + "  # prints the URLs, kept in $TMP/urls.txt",
            bare["command"],
            traced["command"],
            tokens["servers_command"] + "  # the ceiling with a token an event (4 pieces, the default, for the others)",
            tokens["command"],
        )
    )


def _rss_text(r: dict[str, Any]) -> str:
    sizes = [str(n) for n in r["sizes"]]
    base, last = sizes[1] if len(sizes) > 2 else sizes[0], sizes[-1]
    kinds = ("batch", "each")
    rows = [
        "| runs | `batch` peak RSS | `batch` most while running | requests in flight (most) | `ask --each` peak RSS | "
        "`ask --each` most while running | requests in flight (most) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        cells = [f"{int(n):,}"]
        for kind in kinds:
            x = r[kind][n]
            cells += [f"{x['peak_rss_mb']} MB", f"{x['running_rss_mb']} MB", str(x["in_flight"])]
        rows.append("| " + " | ".join(cells) + " |")

    def ratio(kind: str, field: str) -> float:
        return r[kind][last][field] / r[kind][base][field]

    whole = all(
        r[kind][n]["rc"] == 0 and r[kind][n]["once"] and r[kind][n]["answers"] == int(n) and r[kind][n]["requests"] == 2 * int(n)
        for n in sizes
        for kind in kinds
    )
    held = r["held"]
    said = []
    for kind, name in zip(kinds, ("`batch`", "`ask --each`")):
        peak, running = ratio(kind, "peak_rss_mb"), ratio(kind, "running_rss_mb")
        more = (r[kind][last]["running_rss_mb"] - r[kind][base]["running_rss_mb"]) / (int(last) - int(base)) * 1000
        said.append(
            f"{name} peak **{peak:.3f}x** {mark(peak <= 1.1)}, while running **{running:.3f}x** {mark(running <= 1.1)} "
            f"({more:+.2f} MB per 1,000 runs)"
        )
    return (
        f"**Memory as the job grows.** `batch` over job files of {', '.join(f'{int(n):,}' for n in sizes)} lines and "
        f"`ask --each` over folders of as many small files ({r['context_tokens']} tokens each: one memory update and "
        f"the answer), `--no-trace`, {r['servers']} servers of {r['slots']} slots with no latency, `--parallel "
        f"{r['parallel']}`. The peak is the process's (VmHWM); the most while running is the largest resident "
        "size sampled every 0.1 s once the first result was written, past the start's own peak (loading the "
        f"tokenizer). Target: flat, {int(last):,} runs within 1.1x of {int(base):,}, from where the client keeps "
        f"as many requests in flight as it can (with {int(sizes[0]):,}, runs end before they all overlap).\n\n"
        + "\n".join(rows)
        + "\n\n"
        f"{int(last):,} runs against {int(base):,}: {'; '.join(said)}; every run answered, once, in every job "
        f"{mark(whole)}. `batch` reads a line's context when its run starts and appends its result as it ends; "
        f"`ask --each` lists the folder up front: {held['bytes_per_source']} bytes a document for its Source and "
        f"{held['bytes_per_job']} for its Job (tracemalloc, {held['documents']:,} documents), "
        f"{10000 * (held['bytes_per_source'] + held['bytes_per_job']) / 2**20:.1f} MB for 10,000 documents.\n\n"
        + _commands(r["servers_command"], r["batch"][last]["command"], r["each"][last]["command"])
    )


def _loss_text(s: dict[str, Any]) -> str:
    intact, killed = s["runs"]["intact"], s["runs"]["killed"]
    c = killed["checks"]
    ok_exit = killed["rc"] == 0
    ok_ids = c["ids_once"] and c["lines"] == s["chains"]
    ok_answers = c["answers"] == s["chains"]
    ok_once = c["requests_served"] == s["requests"] and c["short_chains"] == 0 and c["unknown_keys"] == 0
    after = killed["killed_after"]
    return (
        f"**A server lost mid-job.** The scale job with {s['chains']} lines at {s['latency']} s a request "
        f"({s['requests']:,} requests, ideal {s['ideal_seconds']} s), once with all {s['servers']} servers and once "
        f"with server {s['victim']} killed (`kill {s['victim']}` on the fake servers' standard input: its port "
        f"closed, its open replies cut) after {after['received']:,} requests had been sent, {after['seconds']} s in; "
        f"it had served {killed['victim_served']} and had {killed['victim_cut']} open. Exit {killed['rc']} {mark(ok_exit)}; "
        f"{c['lines']} result lines, every custom_id once {mark(ok_ids)}; {c['answers']} answers {mark(ok_answers)}; "
        f"{c['requests_served']:,} requests served whole for {s['requests']:,} asked, every chain {s['steps']} or more "
        f"received ({c['resent']} cut replies sent again elsewhere), so no step and no chain ran twice "
        f"{mark(ok_once)}. Wall time **{killed['wall_seconds']} s against {intact['wall_seconds']} s** intact "
        f"({s['wall_ratio']}x; the work left after the kill has {s['servers'] - 1} of the {s['servers']} servers).\n\n"
        + _commands(killed["servers_command"], killed["command"])
    )
