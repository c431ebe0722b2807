"""B11's rows and section, from the `cpu` part of its results and the `gpu` part once a GPU has run it."""

from __future__ import annotations

from benchmarks.harness.registry import Row, Target, mark
from benchmarks.qwenlong.step import projected_ratio

RATIO = Target("≤ 1.05")


def _summary_rows(results: dict) -> list[Row]:
    """B11's rows for PERFORMANCE.md's summary table from one part (cpu or gpu) of its results."""
    rows = []
    s, d = results.get("step"), results.get("drafts")
    where = "on the GPU" if "GPU" in (s or {}).get("engine", "") else "this CPU"
    if s:
        each = s["ratio"]["step_by_round"]
        what = f"memagent / bare engine, one QwenLong step at QwenLong-L1.5-30B-A3B's shapes (Q4_K_M), {where}"
        rows.append(RATIO.row(what, s["ratio"]["step"], f"rounds {min(each)} to {max(each)}"))
    f = results.get("step_fewer_layers")
    if f:
        what = f"memagent / bare engine, the same step on {f['model']['layers']} of its layers (memory to spare), {where}"
        rows.append(RATIO.row(what, f["ratio"]["step"]))
    w = results.get("generation")
    if w:
        what = f"memagent / bare engine, generation alone at QwenLong-L1.5-30B-A3B's shapes (Q4_K_M), {where}"
        rows.append(RATIO.row(what, w["ratio"]["time"]))
    if d:
        what = f"`--speculate` / `--no-speculate`, QwenLong stand-in copying memory and plan, {where}"
        rows.append(Row(what, str(d["told_memory"]["generate_ratio"])))
        widths = results.get("widths")
        if widths:
            checked = d["told_memory"]["every_proposal_checked"]
            p = projected_ratio(widths, checked["decodes_per_token"], checked["mean_width"])
            what = f"drafts told the memory, every proposal checked, priced at QwenLong-L1.5-30B-A3B's decode widths ({where})"
            rows.append(Row(what, f"{p}x generation time"))
    return rows


def _step_table(s: dict) -> str:
    lines = [
        "| engine | prompt tok/s | generation tok/s | prompt s | generation s | step s | CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for side in ("bare", "memagent"):
        x = s[side]
        lines.append(
            f"| {side} | {x['prompt_tok_s']} | {x['gen_tok_s']} | {x['prompt_seconds']} | {x['generate_seconds']} "
            f"| {x['step_seconds']} | {x['cpu_seconds']} |"
        )
    r = s["ratio"]
    lines.append(
        f"| **memagent / bare** | | | {r['prompt']}x | {r['generate']}x | **{r['step']}x** {mark(r['step'] <= 1.05)} "
        f"| {r['cpu']}x |"
    )
    return "\n".join(lines)


def _step_text(s: dict, device: str, label: str) -> str:
    mem = s["memory_after_steps"]
    cpu = "CPU" in s["engine"]
    rounds = ", ".join(f"{r}x" for r in s["ratio"]["step_by_round"])
    return (
        f"**One memory step on {label}** ({device}; memagent's engine: {s['engine']}): QwenLong's memory prompt with "
        f"a {s['chunk_tokens']:,}-token chunk ({s['prompt_tokens']:,} prompt tokens) and {s['generated_tokens']} "
        "generated tokens, greedy, no drafts, through memagent's engine (`LlamaEngine`, as `ask` builds it) and "
        "through a bare `llama_decode` loop in a second context on the same loaded model (the same threads, batch "
        f"sizes, flash attention: {s['flash_attn']}); cold, interleaved, medians of {s['repeat']} rounds. Same reply "
        f"both ways: {s['same_reply']}. Each round's own ratio: {rounds}. Load {s['load_seconds']} s; resident "
        f"{mem['rss_gb']} GB, {mem['anon_gb']} GB of it anonymous"
        + (" (llama.cpp's CPU backend repacks the Q4_K weights out of the mapped file; the Q6_K ones stay mapped)" if cpu else "")
        + f", {mem['file_gb']} GB file-backed; peak {mem['peak_gb']} GB."
    )


def _fewer_layers_text(f: dict, results: dict) -> str:
    """The same step on fewer layers of the same shapes: memagent against bare with memory to spare."""
    r, m, mem = f["ratio"], f["model"], f["memory_after_steps"]
    text = (
        f"**The same step, {m['layers']} layers** ({m['gb']} GB, every layer QwenLong's; resident {mem['rss_gb']} GB "
        f"after the steps, {f['engine']}, medians of {f['repeat']} rounds): memagent / bare **{r['step']}x** "
        f"{mark(r['step'] <= 1.05)} (prompt {r['prompt']}x, generation {r['generate']}x, CPU seconds {r['cpu']}x; "
        f"rounds {min(r['step_by_round'])}x to {max(r['step_by_round'])}x)."
    )
    whole = results.get("step")
    if whole:
        peak = whole["memory_after_load"]["peak_gb"]
        text += (
            f" At {results['model']['layers']} layers the process peaks at {peak} GB of this machine's "
            f"{results['memory_gb']} GB, and "
            f"the gap is in reading the prompt ({whole['ratio']['prompt']}x) while generation matches "
            f"({whole['ratio']['generate']}x); with memory to spare, the prompt is within {abs(r['prompt'] - 1) * 100:.0f}%."
        )
    return text


def _generation_text(w: dict) -> str:
    m, b, r = w["memagent"], w["bare"], w["ratio"]
    rounds = ", ".join(f"{x}x" for x in r["by_round"])
    return (
        f"**Generation alone** ({w['engine']}), the same prompt already read by each side, {w['generated']} tokens "
        f"a run, {w['repeat']} rounds interleaved (a run is short, so the load on the machine moves less within "
        f"one): memagent {m['tok_s']} tok/s, bare {b['tok_s']} tok/s; time **{r['time']}x** "
        f"{mark(r['time'] <= 1.05)}, CPU seconds {r['cpu']}x; each round's own ratio: {rounds}."
    )


def _widths_text(w: dict) -> str:
    widths = list(w["relative"])
    return "\n".join(
        [
            f"**Decode width** ({w['engine']}): one `llama_decode` of w tokens after the step's {w['prompt_tokens']:,}-token "
            "prompt, logits for each (what checking w - 1 drafted tokens costs), against one of a single token; "
            f"the widths interleaved, medians of {w['repeat']} rounds. Each token picks its own 8 of the 128 experts, "
            "so a wider decode reads more of the expert weights, where a dense model reads the same weights at any "
            "width.",
            "",
            "| tokens in the decode | " + " | ".join(widths) + " |",
            "|---|" + "---|" * len(widths),
            "| seconds | " + " | ".join(str(w["seconds"][k]) for k in widths) + " |",
            "| / one token | " + " | ".join(f"{w['relative'][k]}x" for k in widths) + " |",
        ]
    )


def _projected(widths: dict | None, checked: dict) -> str:
    if not widths:
        return ""
    return f"{projected_ratio(widths, checked['decodes_per_token'], checked['mean_width'])}x"


def _drafts_text(d: dict, label: str, intro: bool = True, widths: dict | None = None) -> str:
    mm, rr, nn = d["told_memory"], d["told_reply"], d["told_nothing"]
    same = mm["every_proposal_checked"]["decodes"] == nn["every_proposal_checked"]["decodes"]
    lines = [
        f"**Drafts for memory plus plan, {label}** ({d['engine']}). QwenLong's loop over {d['steps']} sections of "
        f"{d['chunk_tokens']} tokens with the trained stand-in (`tests/data/qwenlong.gguf`), greedy, "
        f"{d['memory_tokens']}-token memories, through memagent's engine with drafts and without, interleaved, medians "
        f"of {d['repeats']}. Each reply is a short reasoning, `</think>`, then the memory and the plan; "
        f"{d['steps_memory_kept']} of {d['steps']} steps kept both unchanged ({d['copyable_tokens']} tokens a reply "
        f"could copy of {d['generated_tokens']} generated). memagent tells the drafter the previous memory, which it "
        "proposes while the reply follows it from its first token; a QwenLong reply opens with its reasoning, so the "
        "drafter lets it go at the reply's first token, before proposing any of it"
        + (
            "; the drafting is then prompt-lookup n-grams alone: told the memory, the drafter does exactly what it "
            "does told nothing."
            if same
            else "."
        )
        + " Told the previous step's whole reply (reasoning included) instead, it follows the reply from its start. "
        "The last two columns replay memagent's drafter over the same replies checking every proposal whole, which "
        "no timing decides: decodes per generated token (plain decoding: 1) and tokens per decode checked. "
        "Drafted and taken: the last run's (the policy has learnt this machine's costs by then).",
        "",
        "| drafts told | drafted | taken | acceptance | generation s | / no drafts | steps identical "
        "| every proposal checked: decodes / token | its mean width | its generation time at QwenLong's shapes |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| no drafts | | | | {d['plain_generate_seconds']} | 1 | | 1 | 1 | {'1' if widths else ''} |",
        f"| nothing (n-grams only) | | | | | | | {nn['every_proposal_checked']['decodes_per_token']} "
        f"| {nn['every_proposal_checked']['mean_width']} | {_projected(widths, nn['every_proposal_checked'])} |",
    ]
    if widths:
        lines[0] += (
            " The last column prices those decodes at QwenLong-L1.5's shapes with the decode-width costs above: "
            "decodes per token times what a decode of the mean width costs against one of a single token "
            "(a projection, not a run of the big model: its replies would be QwenLong's, not the stand-in's)."
        )
    if not intro:
        lines[0] = f"**The same, {label}** ({d['engine']}), medians of {d['repeats']}:"
    for name, x in (("the previous memory (memagent)", mm), ("the previous reply", rr)):
        r = x["every_proposal_checked"]
        lines.append(
            f"| {name} | {x['drafted_tokens']} | {x['accepted_tokens']} | {x['acceptance']} | {x['generate_seconds']} "
            f"| {x['generate_ratio']}x | {x['identical_steps']}/{d['steps']} | {r['decodes_per_token']} | {r['mean_width']} "
            f"| {_projected(widths, r)} |"
        )
    if widths:
        p_memory, p_reply = _projected(widths, mm["every_proposal_checked"]), _projected(widths, rr["every_proposal_checked"])
        eight = widths["relative"].get("8")
        lines += [
            "",
            "**Does drafting pay for memory plus plan?** Not from the memory: told it, memagent's drafter drafts what "
            "prompt lookup drafts alone (the memory is in the prompt already), and generation took "
            f"{mm['generate_ratio']}x the time without drafts on the stand-in; checking every proposal would take "
            f"{p_memory} at QwenLong's shapes, because each checked token calls its own experts"
            + (f" (a decode of 8 tokens costs {eight}x one of 1)" if eight else "")
            + f". Only replies repeated whole, reasoning included, would pay ({p_reply} told the previous reply), "
            "and the stand-in's reasoning repeats word for word where QwenLong's does not. memagent's draft policy "
            "times its checks as it runs and drafts only as much as pays, so `--speculate` stays on by default.",
        ]
    return "\n".join(lines)


def _section(results: dict, gpu: dict | None = None) -> str:
    """B11's section from this CPU's results, and a GPU's when one has run it (`--gpu`)."""
    out = []
    m = results.get("model")
    if m:
        t = m["tensor_types"]
        out.append(
            "A random-weight model of QwenLong-L1.5-30B-A3B's exact tensors (Qwen3-30B-A3B: 48 layers, hidden 2048, "
            "32 heads / 4 KV heads of 128, 128 experts of width 768, 8 per token, vocabulary 151,936), Q4_K_M by "
            "llama.cpp's own quantizer, built by `python -m benchmarks run B11` without the 61 GB F16: a 2-layer F16 is "
            "quantized (llama.cpp gives its layer 0 the plain Q4_K types and its layer 1 Q6_K for attn_v and "
            "ffn_down_exps), and the 48-layer file is written from those bytes, each layer taking the types llama.cpp's "
            f"Q4_K_M rule gives it ({m['layers_with_more_bits']} of {m['layers']} with Q6_K): the real mix, tensor for "
            f"tensor, with repeated values. **{m['gb']} GB** against about {m['real_gb']} GB for the real file "
            f"({', '.join(f'{v} {k}' for k, v in sorted(t.items()))} tensors). The control tokens' output rows are "
            "zero, so greedy decoding never ends its turn; the chat template is the QwenLong stand-in's "
            "(Qwen3-Thinking style, the reply opening with `<think>`); the vocabulary is Qwen2.5's (Qwen3's less its "
            "four added tokens)."
        )
        out.append("")
    for label, res in (("this CPU", results), ("the GPU", gpu)):
        s, w = (res or {}).get("step"), (res or {}).get("generation")
        if s:
            out += [_step_text(s, res["device"], label), "", _step_table(s), ""]
        if (res or {}).get("step_fewer_layers"):
            out += [_fewer_layers_text(res["step_fewer_layers"], res), ""]
        if w:
            out += [_generation_text(w), ""]
        if (res or {}).get("widths"):
            out += [_widths_text(res["widths"]), ""]
    shown = False
    for label, d, widths in (
        ("this CPU", results.get("drafts"), results.get("widths")),
        ("the GPU", (gpu or {}).get("drafts"), (gpu or {}).get("widths")),
    ):
        if d:
            out += [_drafts_text(d, label, intro=not shown, widths=widths), ""]
            shown = True
    out += [
        "```",
        "python -m benchmarks run B11  # this CPU: the cpu part of benchmarks/results/B11.json",
        "python -m benchmarks run B11 --gpu --work DIR --out B11.json  # on a lent GPU: the gpu part",
        "```",
        "",
    ]
    return "\n".join(out)


def rows(m: dict, results: object) -> list[Row]:
    out = _summary_rows(m.get("cpu") or {}) + _summary_rows(m.get("gpu") or {})
    if not m.get("gpu"):
        what = "memagent / bare engine, one QwenLong step at QwenLong-L1.5-30B-A3B's shapes, on a GPU"
        out.append(Row(what, "not measured yet, needs a GPU (`benchmarks/gpu/qwenlong.sh`)", RATIO.text))
    return out


def section(m: dict, results: object) -> str:
    return _section(m.get("cpu") or {}, m.get("gpu"))
