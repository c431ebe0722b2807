"""B11: QwenLong-L1.5-30B-A3B's exact shapes (a random-weight Q4_K_M built from two quantized layers,
qwenlong/model.py): one memory step, memagent's engine against a bare llama_decode loop on the same
loaded model (step, generation, decode widths: qwenlong/step.py); and whether drafting from the
previous memory pays for QwenLong's memory plus plan, on the trained stand-in (drafts).

On this CPU a 1,024-token chunk and 256 generated tokens (the `cpu` part of the results); with --gpu
every layer offloaded, the full 32,768-token chunk and 1,024 tokens (the `gpu` part: on a lent GPU,
benchmarks/gpu/qwenlong.sh). Within a part, the pieces a run does not redo are kept from the last.
The section in docs/PERFORMANCE.md says how each piece is measured.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

from benchmarks.harness.engines import cold_runs, memagent_engine, tokenizer_and_chat
from benchmarks.harness.fixtures import shared_code
from benchmarks.harness.results import cores, gpu_name, load
from benchmarks.harness.runner import log, proc_kb
from benchmarks.qwenlong.model import DEFAULT_VOCAB, REAL_LAYERS, SHAPE, STAND_IN, build, model_record
from benchmarks.qwenlong.page import rows, section
from benchmarks.qwenlong.step import step_vs_bare

TITLE = "QwenLong-L1.5-30B-A3B's shapes"
QUICK = ["--parts", "drafts", "--repeat", "1"]
__all__ = ["TITLE", "QUICK", "add_arguments", "measure", "rows", "section"]


# --- drafts for memory plus plan: the trained stand-in ----------------------------------------------


def replay(prompts: list[list[int]], replies: list[list[int]], told: list[list[int]]) -> dict:
    """What the drafter could take, whatever checks cost: memagent's PromptLookup replayed over each
    step's prompt and reply, told `told` (ids, the end of turn last), checking every proposal whole.
    Plain decoding makes one decode a token; here a decode yields the token after its first and every
    drafted token taken. Machine-independent: how many decodes drafts save, and how wide they are."""
    from memagent_cli.model.speculate import DraftPolicy, PromptLookup

    class Always(DraftPolicy):
        def choose(self, available: int, width: int = 1, tokens: float = 1.0, acceptance: float | None = None) -> int:
            return min(available, self.draft_max)

    decodes = drafted = taken = widths = 0
    for prompt, reply, expected in zip(prompts, replies, told):
        lookup = PromptLookup(prompt, Always(), expected)
        lookup.add(reply[0])  # from the prompt's own decode
        done = 1
        while done < len(reply):
            draft = lookup.draft(len(reply) - done)
            got = 0
            while got < len(draft) and draft[got] == reply[done + got]:
                got += 1
            lookup.checked(len(draft), got)
            for token in reply[done : done + got + 1]:
                lookup.add(token)
            done += got + 1
            decodes, drafted, taken, widths = decodes + 1, drafted + len(draft), taken + got, widths + 1 + len(draft)
    tokens = sum(len(r) - 1 for r in replies)  # tokens after each reply's first, the end of turn included
    return {
        "decodes": decodes,
        "decodes_per_token": round(decodes / tokens, 3),
        "drafted": drafted,
        "taken": taken,
        "mean_width": round(widths / decodes, 2),
    }


def drafts(repeat: int, gpu_layers: int, steps: int = 24, memory_tokens: int = 64) -> dict:
    """QwenLong's loop with drafts (told the previous memory; told the previous reply) and without,
    through memagent's engine, interleaved; medians. The stand-in writes a short reasoning, then
    its memory and plan: unchanged after every section without the fact (before the fact as after)."""
    codeword = shared_code("codeword")
    import llama_cpp

    task = shared_code("qwenlong_task")

    from memagent_cli.core.protocols import get

    encode, decode = task.tokenizer()
    n = steps * task.CHUNK_TOKENS
    for _ in range(4):  # make_document counts tokens roughly: scaled until it makes `steps` sections
        doc = task.whole_fact(n, seed=3, where=0.3)
        ids = encode(doc.text.strip())  # sections as memagent cuts a text file: ids, sliced, decoded
        if -(-len(ids) // task.CHUNK_TOKENS) == steps:
            break
        n = int(n * steps * task.CHUNK_TOKENS / len(ids))
    chunks = [decode(ids[k : k + task.CHUNK_TOKENS]) for k in range(0, len(ids), task.CHUNK_TOKENS)]
    tok, chat = tokenizer_and_chat(STAND_IN)
    variants = {"plain": (False, "memory"), "memory": (True, "memory"), "reply": (True, "reply")}
    engines = {
        v: memagent_engine(STAND_IN, 2048, gpu_layers=gpu_layers, speculate=s, batch=False) for v, (s, _) in variants.items()
    }
    try:
        told = {v: t for v, (_, t) in variants.items()}
        runs = cold_runs(engines, codeword.QUESTION, chunks, memory_tokens, repeat, protocol="qwenlong", told=told)
        policies = {v: engines[v].draft_policy for v in ("memory", "reply")}
        device = engines["plain"].description
        vocab = llama_cpp.llama_model_get_vocab(engines["plain"]._model().model)
        eot = [llama_cpp.llama_vocab_eot(vocab) if llama_cpp.llama_vocab_eot(vocab) >= 0 else llama_cpp.llama_vocab_eos(vocab)]
    finally:
        for e in engines.values():
            e.close()
    plain = runs["plain"][0]
    qwenlong = get("qwenlong")
    # what a reply could copy: the memory and plan of a step that kept them, as tokens
    previous = [qwenlong.initial_memory] + [qwenlong.next_memory(t) for t in plain["texts"][:-1]]
    prompts = [chat.encode(tok, qwenlong.memory_prompt(codeword.QUESTION, m, c)) for m, c in zip(previous, chunks)]
    replies = [tok.encode(t) + eot for t in plain["texts"]]
    told = {
        "memory": [tok.encode(m) + eot for m in previous],
        "reply": [[]] + [tok.encode(t) + eot for t in plain["texts"][:-1]],
    }
    kept = [qwenlong.next_memory(t) for t, p in zip(plain["texts"], previous) if qwenlong.next_memory(t) == p]
    out: dict = {
        "model": "tests/data/qwenlong.gguf (the trained QwenLong stand-in)",
        "model_sha256": hashlib.sha256(STAND_IN.read_bytes()).hexdigest()[:16],
        "engine": device,
        "steps": len(chunks),
        "chunk_tokens": task.CHUNK_TOKENS,
        "memory_tokens": memory_tokens,
        "fact_in_final_memory": bool(doc.value and doc.value in plain["memory"]),
        "generated_tokens": plain["generated"],
        "steps_memory_kept": len(kept),
        "copyable_tokens": sum(len(tok.encode(m)) for m in kept),
        "reply_example": plain["texts"][-1],
        "repeats": repeat,
        "plain_generate_seconds": round(statistics.median(r["generate_seconds"] for r in runs["plain"]), 4),
        # prompt-lookup n-grams alone, told nothing: the baseline of the replays below
        "told_nothing": {"every_proposal_checked": replay(prompts, replies, [[] for _ in replies])},
    }
    for v in ("memory", "reply"):
        fast = runs[v][-1]  # the last run: the draft policy has learnt this machine's costs by then
        g = statistics.median(r["generate_seconds"] for r in runs[v])
        s = statistics.median(r["step_seconds"] for r in runs[v])
        cost = policies[v].cost()
        out["told_" + v] = {
            "drafted_tokens": fast["drafted"],
            "accepted_tokens": fast["accepted"],
            "acceptance": round(fast["accepted"] / fast["drafted"], 3) if fast["drafted"] else None,
            "generate_seconds": round(g, 4),
            "generate_ratio": round(g / out["plain_generate_seconds"], 3),
            "step_ratio": round(s / statistics.median(r["step_seconds"] for r in runs["plain"]), 3),
            "identical_steps": min(sum(a == b for a, b in zip(plain["texts"], r["texts"])) for r in runs[v]),
            "drafted_by_run": [r["drafted"] for r in runs[v]],
            "accepted_by_run": [r["accepted"] for r in runs[v]],
            "decode_cost_ms": None if cost is None else {"a": round(cost[0] * 1000, 3), "b": round(cost[1] * 1000, 3)},
            "every_proposal_checked": replay(prompts, replies, told[v]),
        }
        log("drafts", v, json.dumps(out["told_" + v]))
    return out


# --- the run -----------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", action="store_true", help="every layer on the GPU, the full 32,768-token chunk")
    parser.add_argument("--work", type=Path, default=Path("/tmp/b11"), help="where the model is built (kept)")
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB)
    parser.add_argument(
        "--layers", type=int, default=REAL_LAYERS, help="fewer, with --parts step: the same step with memory to spare"
    )
    parser.add_argument("--chunk", type=int, default=None, help="chunk tokens (1,024 on a CPU; 32,768 with --gpu)")
    parser.add_argument("--gen", type=int, default=None, help="generated tokens (256 on a CPU; 1,024 with --gpu)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", type=int, default=7, help="rounds of the generation part")
    parser.add_argument("--parts", default="step,generation,widths,drafts", help="build alone only makes the model")
    parser.add_argument("--delete-model", action="store_true", help="delete the built model at the end")


def measure(args: argparse.Namespace) -> dict:
    parts = set(args.parts.split(","))
    gpu_layers = -1 if args.gpu else 0
    chunk = args.chunk or (32768 if args.gpu else 1024)
    gen = args.gen or (1024 if args.gpu else 256)
    # Should memory run out, this process is the one the kernel ends, not other work on the machine.
    Path("/proc/self/oom_score_adj").write_text("1000")
    t0 = time.perf_counter()
    results: dict = {
        "device": gpu_name() if args.gpu else f"this CPU ({cores()} cores)",
        "memory_gb": round(proc_kb("/proc/meminfo")["MemTotal"] / 1e6, 2),
    }
    cold, warm = args.repeat if "step" in parts else 0, args.warm if "generation" in parts else 0
    wide = args.warm if "widths" in parts else 0
    if args.layers != REAL_LAYERS and (warm or wide or "drafts" in parts):
        raise SystemExit("--layers other than 48 is for the step part alone (results: step_fewer_layers)")
    if "build" in parts or cold or warm or wide:  # "build" alone: a first device call that only makes the model
        model = build(args.work, args.vocab, args.layers)
        model_key = "model" if args.layers == REAL_LAYERS else "fewer_layers_model"
        results[model_key] = model_record(model)
    if cold or warm or wide:
        need = model.stat().st_size / 1e9 + 1.5  # on a CPU llama.cpp repacks the weights into anonymous memory
        results["available_gb_before"] = round(proc_kb("/proc/meminfo")["MemAvailable"] / 1e6, 1)
        log(json.dumps(results))
        if not args.gpu and results["available_gb_before"] < need:
            raise SystemExit(f"{results['available_gb_before']} GB available, {need:.1f} GB needed")
        out = step_vs_bare(model, chunk, gen, gpu_layers, cold, warm, wide)
        if wide:
            results["widths"] = {"engine": out["engine"], "prompt_tokens": out["prompt_tokens"], **out.pop("widths")}
        if warm:
            keys = ("chunk_tokens", "prompt_tokens", "engine", "threads", "load_seconds", "memory_after_steps")
            results["generation"] = {**{k: out[k] for k in keys}, **out.pop("warm")}
        if cold and args.layers == REAL_LAYERS:
            results["step"] = out
        elif cold:  # the same layers, fewer of them: where the whole model's memory is the question
            results["step_fewer_layers"] = {**out, "model": results.pop("fewer_layers_model")}
        log("step", json.dumps(out))
        if args.delete_model:
            model.unlink()
            (args.work / f"random-{SHAPE}-2L-q4_k_m.gguf").unlink(missing_ok=True)
    if "drafts" in parts:
        results["drafts"] = drafts(max(args.repeat, 7), gpu_layers)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    part = "gpu" if args.gpu else "cpu"
    kept = ((load("B11") or {}).get("metrics") or {}).get(part) or {}  # the pieces not run this time are kept
    seconds = {**kept.get("seconds_by_part", {}), args.parts: results.pop("seconds")}
    return {part: {**kept, **results, "seconds_by_part": seconds}}
