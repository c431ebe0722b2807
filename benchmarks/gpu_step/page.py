"""B4's rows and section: the GPU's figures (the `gpu` part of its results, from a lent GPU) and
the engine comparison on this CPU (the `cpu` part)."""

from __future__ import annotations

from benchmarks.harness.drafts import SAME_DISTRIBUTION, engine_rows, policy_cell
from benchmarks.harness.registry import Row, Target

RATIO = Target("≤ 1.05")


def rows(m: dict, results: object) -> list[Row]:
    return _b4_rows(m.get("gpu"), m.get("cpu"))


def section(m: dict, results: object) -> str:
    return _b4_section(m.get("gpu"), m.get("cpu"))


ENGINE_COUNTS = ("1", "4", "16")  # sequences at which B4 holds memagent to the bare engine


def _b4_rows(g: dict | None, cpu: dict | None) -> list[Row]:
    """B4's targets for the summary table: memagent against the bare engine at 1, 4 and 16
    sequences on the GPU (rows not measured yet say so) and on this CPU, and the bandwidth share."""
    rows = []
    g = g or {}
    for key, what in (("fa_on", "on"), ("fa_off", "off")):
        ratio = (g.get(key) or {}).get("step_ratio")
        if ratio is not None:
            rows.append(
                RATIO.row(f"memagent / bare engine, 1 sequence (one `ask` step) on the GPU, flash attention {what}", ratio)
            )
    engine = g.get("engine") or {}
    for n in ENGINE_COUNTS:
        if n == "1" and n not in engine and rows:
            continue  # the `ask` step above is the 1-sequence row until the engine part runs there
        what = f"memagent / bare engine, {n} sequence{'s' if n != '1' else ''} generating, on the GPU"
        ratio = (engine.get(n) or {}).get("time_ratio")
        rows.append(
            RATIO.row(what, ratio) if ratio is not None else Row(what, "not measured yet, needs a GPU", RATIO.text, False)
        )
    cpu_engine = (cpu or {}).get("engine") or {}
    for n in ENGINE_COUNTS:
        ratio = (cpu_engine.get(n) or {}).get("time_ratio")
        if ratio is not None:
            what = f"memagent / bare engine, {n} sequence{'s' if n != '1' else ''} generating, this CPU ({cpu['model']})"
            rows.append(RATIO.row(what, ratio))
    if not g:
        return rows
    on = _median_run(g["fa_on"]["bare"])
    share = round(on["gen_tok_s"] / g["bandwidth_limit_tok_s"], 2)
    rows.append(Row("generation / memory-bandwidth limit, one sequence, on the GPU (llama.cpp itself)", f"{share}"))
    four = ((g.get("e2e") or {}).get("questions_4") or {}).get("wall_vs_n_single_runs")
    if four is not None:
        rows.append(Row("`ask -q` x4 batched / four single runs, on the GPU", f"{four}"))
    sp = g.get("speculate")
    if sp:
        rows.append(
            RATIO.row("`--speculate` / `--no-speculate`, SmolLM2 on real prose, on the GPU", sp["real"]["generate_ratio"])
        )
    return rows


def _median_run(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["step_seconds"])[(len(runs) - 1) // 2]


def _b4_section(g: dict | None, cpu: dict | None) -> str:
    """B4 from the GPU results (_gpu_results), and its engine comparison on this CPU."""
    if g is None:
        return "Not measured yet: run `python -m benchmarks run B4 --device gpu` on a machine with a GPU.\n\n" + _b4_engine(
            g, cpu
        )
    on, off = _median_run(g["fa_on"]["bare"]), _median_run(g["fa_off"]["bare"])
    bon, boff = g["batch_fa_on"], g["batch_fa_off"]
    von, voff = g["verify_fa_on"], g["verify_fa_off"]
    limit = g["bandwidth_limit_tok_s"]
    step_rows = "\n".join(
        f"| {name} | {r['prompt_tok_s']:,} | {r['gen_tok_s']} | {r['step_seconds']:.2f} | {r['gen_tok_s'] / limit:.0%} |"
        for name, r in (("on", on), ("off", off))
    )
    batch_rows = "\n".join(
        f"| {n} | {bon[n]['gen_tok_s']} ({bon['gain_vs_1'][n]}×) | {boff[n]['gen_tok_s']} ({boff['gain_vs_1'][n]}×) |"
        for n in ("1", "4", "16")
    )
    verify_rows = "\n".join(
        f"| {k} | {von['ms'][k]} ({von['ratio'][k]}×) | {voff['ms'][k]} ({voff['ratio'][k]}×) |" for k in von["ms"]
    )
    return f"""Measured by `python -m benchmarks run B4 --device gpu` on {g["when"]}: **{g["device"]}**; {g["software"]}; {g["model"]}.
The raw numbers are the `gpu` part of `benchmarks/results/B4.json` (this machine has no GPU, so a
run here measures the `cpu` part and keeps that one). One reference step: the memory prompt with a 5,000-token chunk ({on["prompt_tokens"]:,}
prompt tokens), then 1,024 generated tokens, through llama.cpp's own `llama_decode` loop. Each
step figure is the median of {len(g["fa_on"]["bare"])} runs after a warm-up; the others are one run each (the lease is
30 minutes, and the CUDA build takes five of them).

| flash attention | prompt tok/s | generation tok/s | step (s) | share of the ~{limit} tok/s bandwidth limit |
|---|---|---|---|---|
{step_rows}

Flash attention is faster on this GPU for both halves of the step ({on["step_seconds"]:.2f} s against
{off["step_seconds"]:.2f} s), so memagent turns it on by default where layers run on a GPU
(`--no-flash-attn` turns it off); on the CPU it stays off, where it measured slower. Generation
reaches a third of the memory-bandwidth limit with one sequence. That share is llama.cpp's own at
batch 1 on this GPU, so it is reported, not held to a target (memagent's part is its time over the
bare engine's, below); several sequences per `llama_decode` go past it:

| sequences in one context (`n_seq_max`, per-sequence KV) | aggregate generation tok/s, flash attention on | off |
|---|---|---|
{batch_rows}

What checking k drafted tokens costs (speculative rewrites): one `llama_decode` of k tokens at the
step's context, against one of a single token:

| k | ms, flash attention on | off |
|---|---|---|
{verify_rows}

Sixteen drafted tokens cost about two single-token decodes, so a rewrite that copies pays on this
GPU as soon as more than one drafted token is accepted per check on average.

`--gpu-layers auto` planned every layer onto the GPU ("{g["auto_plan"]["reason"]}"), and `--json`
says so in `gpu` and `device`. {_b4_doctor(g)}

{_b4_memagent(g)}{_b4_engine(g, cpu)}{_b4_speculate(g)}{_b4_crash(g)}"""


def _b4_engine(g: dict | None, cpu: dict | None) -> str:
    """memagent against the bare engine at 1, 4 and 16 sequences (B4's target): on the GPU once
    B4's `engine` part has run there, and on this CPU with a small model."""
    engine = (g or {}).get("engine")
    head = """memagent's engine against the bare `llama_decode` loop at 1, 4 and 16 sequences (`run B4
--parts engine`, `engine_vs_bare`): the step's prompts already read, then each sequence generates,
one token per sequence per `llama_decode`, greedy, no drafts. memagent runs `LlamaEngine` as `ask`
builds it (its own loop for one sequence; for several, model/batched.py with a caller thread per
question); the bare loop has the same context, threads and KV settings. Interleaved, the order
swapped each round; medians. Target: memagent at most 1.05x the bare loop's time.

"""
    if engine:
        gpu = f"""On the GPU ({engine.get("note", g["device"] if g else "")}), {engine["context_tokens"]:,}-token prompts, {engine["generated_per_sequence"]} tokens per sequence:

| sequences | memagent tok/s | bare tok/s | time, memagent / bare |
|---|---|---|---|
{engine_rows(engine, "time_ratio")}

"""
    else:
        gpu = """On the GPU: **not measured yet, needs a GPU** (`bash .gpu/run.sh engine 3` on a lent one, as
benchmarks/gpu/README.md describes). Until then the `ask` step above is the 1-sequence figure.

"""
    if not cpu or not cpu.get("engine"):
        return head + gpu
    c = cpu["engine"]
    return (
        head
        + gpu
        + f"""On this CPU (a CPU figure, not the GPU's): {cpu["model"]}, {c["context_tokens"]}-token prompts (a
{cpu["chunk_tokens"]}-token chunk), {c["generated_per_sequence"]} tokens per sequence, {c["threads"]} threads, {c["repeat"]} rounds ({cpu["when"]}):

| sequences | memagent tok/s | bare tok/s | time, memagent / bare |
|---|---|---|---|
{engine_rows(c, "time_ratio")}

{cpu.get("note", "")}

"""
    )


def _b4_doctor(g: dict) -> str:
    d = g.get("doctor") or {}
    gpu = d.get("gpu") or {}
    if not gpu.get("devices"):
        return ""
    dev = gpu["devices"][0]
    return (
        f"`memagent doctor --json` reported offload {'supported' if gpu.get('offload_supported') else 'NOT supported'} "
        f"and the device ({dev['name']}, {dev['backend']}, {dev['free'] / 2**30:.1f} of {dev['total'] / 2**30:.1f} GiB free)."
    )


def _b4_speculate(g: dict) -> str:
    """B6's two cases again with every layer on the GPU."""
    sp = g.get("speculate")
    if not sp:
        return ""
    rows = "\n".join(
        f"| {name} | {r['steps']} | {r['generated_tokens']} | {r['drafted_tokens']} / {r['accepted_tokens']} | "
        f"**{r['generate_ratio']}** ({r['speculate_generate_seconds']} s / {r['plain_generate_seconds']} s) | "
        f"{r['step_ratio']} | {policy_cell(r['policy'])} | {r['identical_steps']}/{r['steps']} |"
        for name, r in (("trained code-word model, memory copied", sp["copying"]), (f"{sp['model']}, real prose", sp["real"]))
    )
    return f"""Speculative rewrites on the GPU: {sp["note"]}.

| model | steps | generated | drafted / taken | generation time, with / without | step time ratio | policy learnt | identical steps |
|---|---|---|---|---|---|---|---|
{rows}

On real prose drafts pay on the GPU as on the CPU: the policy learnt that a check of k tokens costs
little more than one decode, and drafted long. The code-word model's memories are 7 tokens: its
{sp["copying"]["generated_tokens"]} generated tokens took {sp["copying"]["plain_generate_seconds"]} s in all, a few sub-millisecond decodes per step, and
of {sp["copying"]["drafted_tokens"]} drafted tokens {sp["copying"]["accepted_tokens"]} were taken; at that size the ratio ({sp["copying"]["generate_ratio"]}x) is within noise.

{SAME_DISTRIBUTION} On the GPU {sp["real"]["identical_steps"]} of SmolLM2's {sp["real"]["steps"]} greedy steps came out the same with
and without drafts: CUDA's kernels for a wider batch round differently too (B6 measures the
CPU's).

"""


def _b4_crash(g: dict) -> str:
    c = g.get("crash")
    if not c:
        return ""
    rows = "\n".join(f"| {k} | {v} |" for k, v in c["variants"].items())
    return f"""The crash that kept memagent off the GPU until this run: {c["found"]}. Cause: {c["cause"]}.
Each variant in a fresh process, the model loaded with every layer on the GPU:

| what ran before `llama_model_load_from_file` | result |
|---|---|
{rows}

The fix: {c["fix"]}, which loads libstdc++ with `RTLD_GLOBAL` so that the one copy in the global
scope serves every library; a test checks it on any Linux machine.

"""


def _b4_memagent(g: dict) -> str:
    """memagent on the GPU, once B4's `memagent` and `e2e` parts have run there."""
    rows = [(name, g.get(key) or {}) for name, key in (("on", "fa_on"), ("off", "fa_off"))]
    measured = [(name, r) for name, r in rows if "step_ratio" in r]
    if not measured:
        return f"""**Not measured: memagent against the bare engine.** {g.get("memagent_note", "")}.

"""
    ratio_rows = "\n".join(f"| {name} | **{r['step_ratio']}x** | {r['wall_ratio']}x |" for name, r in measured)
    out = f"""memagent against the bare `llama_decode` loop, the same step without drafts (target at most 1.05x):

| flash attention | step time, memagent / bare | whole process, memagent / bare |
|---|---|---|
{ratio_rows}

"""
    e2e = g.get("e2e")
    if e2e:
        spec = [(flag, e2e[flag]) for flag in ("--speculate", "--no-speculate") if flag in e2e]
        spec_rows = "\n".join(
            f"| `{flag}` | {r['step_seconds']:.2f} | {r['drafted']} / {r['accepted']} | {r['wall']:.1f} |" for flag, r in spec
        )
        many = sorted((int(k.split("_")[1]), v) for k, v in e2e.items() if k.startswith("questions_"))
        many_rows = "\n".join(
            f"| {n} | {r['wall']:.1f} | {r['generated']:,} | {r.get('wall_vs_n_single_runs', '-')}x |" for n, r in many
        )
        out += f"""memagent end to end with its defaults (flash attention on), {g.get("e2e_note", "")} (a random model's text repeats
nothing from the chunk, so nothing is drafted):

| one question | step (s) | drafted / taken | whole run (s) |
|---|---|---|---|
{spec_rows}

| questions, `--batch` | whole run (s) | generated tokens | against that many single runs |
|---|---|---|---|
{many_rows}

"""
    return out
