"""B2: memagent's tokenizer against llama.cpp's on the Qwen2 vocabulary: identical ids, and the
speed of each (target: at least 5x llama.cpp's through Python), timed side by side in one run."""

from __future__ import annotations

import argparse
import random

from benchmarks.harness.fixtures import REPO, VOCAB
from benchmarks.harness.registry import Row, Target
from benchmarks.harness.timing import race

TITLE = "the tokenizer against llama.cpp's"
QUICK = ["--chars", "1000000"]
IDENTICAL = Target("yes")
SPEEDUP = Target("≥ 5")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vocab", default=str(VOCAB), help="a GGUF vocabulary (default: llama.cpp's Qwen2)")
    parser.add_argument("--chars", type=int, default=3_000_000, help="characters of mixed text to tokenize")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, interleaved; the fastest counts")


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


def measure(args: argparse.Namespace) -> dict:
    import llama_cpp

    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.runtime import quiet_llama_logs
    from memagent_cli.model.tokenizer import load_tokenizer

    quiet_llama_logs()
    loads = race(
        {
            "memagent": lambda: load_tokenizer(read_gguf(args.vocab)),
            "llama_cpp": lambda: llama_cpp.Llama(model_path=args.vocab, vocab_only=True, verbose=False),
        },
        rounds=1,
    )
    tok = load_tokenizer(read_gguf(args.vocab))
    llm = llama_cpp.Llama(model_path=args.vocab, vocab_only=True, verbose=False)
    text = corpus(args.chars)
    data = text.encode("utf-8")
    ours, theirs = tok.encode(text), llm.tokenize(data, add_bos=False, special=False)
    times = race(
        {"memagent": lambda: tok.encode(text), "llama_cpp": lambda: llm.tokenize(data, add_bos=False, special=False)},
        rounds=args.repeat,
    )
    ours_s, theirs_s = min(times["memagent"]), min(times["llama_cpp"])
    return {
        "tokenizer": tok.name,
        "chars": len(text),
        "tokens": len(ours),
        "identical_ids": ours == theirs,
        "memagent_tokens_per_second": round(len(ours) / ours_s),
        "llama_cpp_tokens_per_second": round(len(theirs) / theirs_s),
        "speedup": round(theirs_s / ours_s, 2),
        "memagent_load_seconds": round(loads["memagent"][0], 3),
        "llama_cpp_load_seconds": round(loads["llama_cpp"][0], 3),
    }


def rows(m: dict, results: object) -> list[Row]:
    return [
        IDENTICAL.row("tokenizer ids identical to llama.cpp", m["identical_ids"]),
        SPEEDUP.row("tokenizer speed-up over llama.cpp through Python", m["speedup"]),
        Row("vocabulary load, memagent / llama.cpp (s)", f"{m['memagent_load_seconds']} / {m['llama_cpp_load_seconds']}"),
    ]


def section(m: dict, results: object) -> str:
    return f"""{m["chars"]:,} characters of mixed text (this repository's code, prose, CJK, numbers, runs of white
space, emoji) tokenized by memagent's {m["tokenizer"]} and by llama.cpp through llama-cpp-python, on
the same vocabulary; the fastest of the rounds each, interleaved.

| | tokens per second | vocabulary load (s) |
|---|---|---|
| memagent | {m["memagent_tokens_per_second"]:,} | {m["memagent_load_seconds"]} |
| llama.cpp | {m["llama_cpp_tokens_per_second"]:,} | {m["llama_cpp_load_seconds"]} |

The ids are {"identical" if m["identical_ids"] else "NOT identical"} ({m["tokens"]:,} tokens): memagent counts and cuts chunks with
its own tokenizer, so a chunk is the tokens llama.cpp then reads."""
