"""B1: what memagent adds to the engine's own work, measured side by side in one run.

Three ways to do the same MemAgent run over the same document with the same tiny model, the
same prompts and the same token budgets (greedy, and the model never ends its turn, so every
step generates exactly its budget):

  bare   a plain llama-cpp-python loop: Llama.generate() per step, detokenize, next prompt
  quiet  `memagent ask --quiet --no-trace` as a user runs it (a real process)
  live   `memagent ask` with the live view drawing on a pseudo-terminal, and the trace store

Each is run `--repeat` times, interleaved, and the median wall time is kept, at two sizes (short
budgets, and the reference's 5000-token chunks with 1024-token memories), which separates
memagent's fixed cost (process start-up, imports) from its cost per generated token. Target: the
memagent/bare ratio <= 1.10 at the reference budgets (a tiny model is where our overhead shows most).

    python benchmarks/overhead.py [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def make_inputs(folder: Path, steps: int, chunk: int) -> tuple[Path, Path]:
    from helpers import words
    from tinymodel import write_tiny_qwen2

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    model = write_tiny_qwen2(folder / "tiny.gguf", seed=1)
    tok = load_tokenizer(read_gguf(model))
    text, n = "", 0
    while True:  # exactly `steps` chunks, the last one full
        text = words(len(text.split()) + 2000, seed=3)
        n = len(tok.encode(text))
        if n >= steps * chunk:
            break
    ids = tok.encode(text)[: steps * chunk]
    doc = folder / "doc.txt"
    doc.write_text(tok.decode_bytes(ids).decode("utf-8", errors="ignore").strip(), encoding="utf-8")
    return model, doc


def bare(model: Path, doc: Path, question: str, chunk: int, memory_tokens: int, answer_tokens: int) -> dict:
    """The engine alone: the reference protocol with llama-cpp-python's own generate loop."""
    import llama_cpp

    from memagent_cli.core.memagent import INITIAL_MEMORY, final_prompt, memory_prompt
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.runtime import quiet_llama_logs
    from memagent_cli.model.tokenizer import load_tokenizer

    t0 = time.perf_counter()
    quiet_llama_logs()
    info = read_gguf(model)
    tok, chat = load_tokenizer(info), ChatFormat.from_gguf(info)
    ids = tok.encode(doc.read_text(encoding="utf-8").strip())
    llm = llama_cpp.Llama(
        model_path=str(model),
        n_ctx=chunk + 2 * memory_tokens + 1024,
        n_batch=2048,
        n_threads=1,
        n_threads_batch=os.cpu_count(),
        verbose=False,
    )
    memory, generated = INITIAL_MEMORY, 0

    def run(prompt: str, budget: int) -> str:
        nonlocal generated
        out = []
        for token in llm.generate(chat.encode(tok, prompt), top_k=1, temp=0.0, repeat_penalty=1.0, min_p=0.0):
            out.append(token)
            if len(out) == budget:
                break
        generated += len(out)
        return llm.detokenize(out).decode("utf-8", errors="replace")

    for start in range(0, len(ids), chunk):
        memory = run(
            memory_prompt(question, memory, tok.decode_bytes(ids[start : start + chunk]).decode("utf-8", "replace")),
            memory_tokens,
        )
    run(final_prompt(question, memory), answer_tokens)
    llm.close()
    return {"seconds": time.perf_counter() - t0, "generated": generated}


def bare_process(model: Path, doc: Path, question: str, args) -> dict:
    """The bare loop in a fresh Python process, so it pays interpreter start-up like memagent."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--bare-run",
            str(model),
            str(doc),
            question,
            "--chunk",
            str(args.chunk),
            "--memory",
            str(args.memory),
            "--answer",
            str(args.answer),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    return {**json.loads(out), "seconds": time.perf_counter() - t0}


def memagent(
    model: Path, doc: Path, question: str, chunk: int, memory_tokens: int, answer_tokens: int, live: bool, home: Path
) -> dict:
    args = [
        sys.executable,
        "-m",
        "memagent_cli",
        "ask",
        str(doc),
        question,
        "-m",
        str(model),
        "--threads",
        "1",
        "--chunk-tokens",
        str(chunk),
        "--memory-tokens",
        str(memory_tokens),
        "--answer-tokens",
        str(answer_tokens),
        "--temperature",
        "0",
        "--no-speculate",  # the bare loop drafts nothing: this measures memagent's own cost (B6 measures drafts)
        "--json",
    ]
    env = {**os.environ, "MEMAGENT_HOME": str(home), "COLUMNS": "110"}
    t0 = time.perf_counter()
    if live:
        leader, follower = pty.openpty()  # stderr is a terminal: the live view draws
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=follower, env=env, cwd=REPO)
        os.close(follower)
        try:
            while os.read(leader, 65536):
                pass
        except OSError:
            pass
        out = proc.stdout.read()
        proc.wait()
        os.close(leader)
    else:
        out = subprocess.run(args + ["--quiet", "--no-trace"], capture_output=True, env=env, cwd=REPO, check=True).stdout
    seconds = time.perf_counter() - t0
    result = json.loads(out)
    generated = sum(s["generated_tokens"] for s in result["steps"]) + answer_tokens
    return {"seconds": seconds, "generated": generated, "steps": len(result["steps"])}


def measure(steps: int, chunk: int, memory: int, answer: int, repeat: int) -> dict:
    question = "What happened at the old mill?"
    opts = argparse.Namespace(chunk=chunk, memory=memory, answer=answer)
    with tempfile.TemporaryDirectory() as tmp:
        model, doc = make_inputs(Path(tmp), steps, chunk)
        runs: dict[str, list[dict]] = {"bare": [], "quiet": [], "live": []}
        for _ in range(repeat):  # interleaved, so load on the machine falls on all three alike
            runs["bare"].append(bare_process(model, doc, question, opts))
            runs["quiet"].append(memagent(model, doc, question, chunk, memory, answer, False, Path(tmp)))
            runs["live"].append(memagent(model, doc, question, chunk, memory, answer, True, Path(tmp)))
    generated = runs["bare"][0]["generated"]
    assert all(r["generated"] == generated for v in runs.values() for r in v), "the runs did different work"
    median = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    return {
        "steps": steps,
        "chunk_tokens": chunk,
        "memory_tokens": memory,
        "generated_tokens": generated,
        **{f"{k}_seconds": round(v, 3) for k, v in median.items()},
        "quiet_ratio": round(median["quiet"] / median["bare"], 3),
        "live_ratio": round(median["live"] / median["bare"], 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--bare-run", nargs=3, metavar=("MODEL", "DOC", "QUESTION"), help=argparse.SUPPRESS)
    parser.add_argument("--chunk", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--memory", type=int, default=256, help=argparse.SUPPRESS)
    parser.add_argument("--answer", type=int, default=64, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_run:  # the child process of bare_process()
        model, doc, question = args.bare_run
        print(json.dumps(bare(Path(model), Path(doc), question, args.chunk, args.memory, args.answer)))
        return {}
    # Two sizes: memagent's extra time = fixed (start-up) + per generated token; two runs solve for both.
    small = measure(steps=6, chunk=1000, memory=256, answer=64, repeat=args.repeat)
    large = measure(steps=8, chunk=5000, memory=1024, answer=256, repeat=args.repeat)
    result = {"small": small, "large": large}
    for view in ("quiet", "live"):
        extra_small = small[f"{view}_seconds"] - small["bare_seconds"]
        extra_large = large[f"{view}_seconds"] - large["bare_seconds"]
        per_token = (extra_large - extra_small) / (large["generated_tokens"] - small["generated_tokens"])
        result[f"{view}_us_per_token"] = round(per_token * 1e6, 1)
        result[f"{view}_fixed_ms"] = round((extra_small - per_token * small["generated_tokens"]) * 1e3)
    result["target"] = "ratio <= 1.10 at the reference budgets (large)"
    for key, value in result.items():
        print(f"{key:20} {value}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
