"""B2: memagent's tokenizer against llama.cpp's, on the Qwen2 vocabulary, in one run.

Prints whether the ids are identical, both throughputs and their ratio (target: >= 5x),
and the vocabulary load time of each. Ratios come from one run, side by side, because
this machine is shared and noisy.

    python benchmarks/tokenizer.py [--vocab ../shared/fixtures/ggml-vocab-qwen2.gguf] [--chars 3000000]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def corpus(n_chars: int, seed: int = 0) -> str:
    """Mixed text: this repository's code, prose, CJK, numbers, white space runs, emoji."""
    code = "".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "memagent_cli").glob("*.py")))
    pieces = [code[i : i + 2000] for i in range(0, len(code), 2000)] + [
        "The committee met on 12 March 2019 and signed the amendment. ",
        "中文文本测试，这是一个句子。日本語のテキスト。한국어 텍스트 ",
        "    indented line\n\t\ttabs\n\n\n",
        "🦙🚀👍🏽 ",
        "3.14159 2,718 0xFF 1e-10 ",
        "=" * 60 + "\n",
    ]
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_chars:
        piece = rng.choice(pieces)
        out.append(piece)
        size += len(piece)
    return "".join(out)[:n_chars]


def best_of(fn, repeat: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default=str(REPO.parent / "shared" / "fixtures" / "ggml-vocab-qwen2.gguf"))
    parser.add_argument("--chars", type=int, default=3_000_000)
    parser.add_argument("--json", dest="json_out", help="also write the results here")
    args = parser.parse_args(argv)

    import llama_cpp

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.runtime import quiet_llama_logs
    from memagent_cli.model.tokenizer import load_tokenizer

    quiet_llama_logs()
    ours_load, tok = best_of(lambda: load_tokenizer(read_gguf(args.vocab)), 1)
    theirs_load, llm = best_of(lambda: llama_cpp.Llama(model_path=args.vocab, vocab_only=True, verbose=False), 1)
    text = corpus(args.chars)
    data = text.encode("utf-8")
    ours_s, ours = best_of(lambda: tok.encode(text))
    theirs_s, theirs = best_of(lambda: llm.tokenize(data, add_bos=False, special=False))
    result = {
        "tokenizer": tok.name,
        "chars": len(text),
        "tokens": len(ours),
        "identical_ids": ours == theirs,
        "memagent_tokens_per_second": round(len(ours) / ours_s),
        "llama_cpp_tokens_per_second": round(len(theirs) / theirs_s),
        "speedup": round(theirs_s / ours_s, 2),
        "memagent_load_seconds": round(ours_load, 3),
        "llama_cpp_load_seconds": round(theirs_load, 3),
    }
    for key, value in result.items():
        print(f"{key:28} {value}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["identical_ids"] else 1)
