"""B17: one InfMem step at Qwen3-4B's exact shapes, one MemAgent step at Qwen2.5-7B's, and what they
make of a 1M-token input.

Random-weight models of each shape at Q4_K_M (shapes.py, the fast build), the real Qwen2.5
vocabulary (with Qwen3's four added tokens for the 4B). Their control tokens never win, so every call
writes its whole budget: the longest step each protocol can take.

  infmem    one InfMem step through memagent's engine (LlamaEngine.complete_raw, as core/infmem_loop
            calls it): the planner (Qwen-Agent's tool system message, a 1,024-token memory, three
            searches in the history), then the memory write (a 5,000-token chunk, the four
            500-token units a search found, the memory); each call two stages: stage one's 1,024
            thinking tokens, the forced close, stage two's 1,024 (`--memory-tokens`)
  bare      the same four generations with llama-cpp-python alone (Llama.generate, greedy, the same
            token ids, the same context settings): memagent / bare <= 1.05 is the target
  memagent  one MemAgent step at Qwen2.5-7B's shapes through the same engine: the 5,000-token chunk
            and a 1,024-token memory, 1,024 tokens written (LlamaEngine.complete)

Drafts are off on both engines (the bare loop has none; on random weights they are never accepted),
and one context each (no batching of sequences). Then time-to-answer for a 1M-token input (200
chunks of 5,000 tokens): InfMem stopping early after 10%, 25% or all of the chunks (each read chunk
one step; the stopping step's planner call and the final answer added; the index from B15), against
MemAgent's 200 steps and answer. Interleaved `--repeat` times, the median kept.

    python benchmarks/infmem_step.py [--gpu] [--work DIR] [--layers N] [--repeat 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import shapes  # noqa: E402  # the random-weight models

QUESTION = "What did the committee decide about the old mill?"
CHUNK, UNIT, MEMORY = 5000, 500, 1024
DOCUMENT = 1_000_000
STOPS = (0.10, 0.25, 1.0)


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def prose(tok, n: int, seed: int) -> str:
    """Prose of `n` tokens or just under."""
    from helpers import words

    k = n
    while len(ids := tok.encode(words(k, seed=seed))) < n:
        k = int(k * 1.3)
    text = tok.decode_bytes(ids[:n]).decode("utf-8", errors="ignore").strip()
    while len(tok.encode(text)) > n:  # a cut token may re-encode as more
        text = text[:-1].strip()
    return text


def infmem_prompts(tok, memory_tokens: int) -> list:
    """The step's two prompts (RawPrompt), as core/infmem_loop renders them."""
    from memagent_cli.core import infmem
    from memagent_cli.core.infmem_loop import raw_chat

    memory = prose(tok, memory_tokens, seed=11)
    history = infmem.history_text(100, 200, [("old mill", 8), ("committee decision", 8), ("vote on the mill", 8)])
    planner = raw_chat(
        infmem.TOOL_SYSTEM, infmem.PLANNER_PROMPT.format(prompt=QUESTION, retrieval_history=history, memory=memory)
    )
    units = [prose(tok, UNIT, seed=20 + k) for k in range(infmem.RESULTS)]
    write = raw_chat(
        None,
        infmem.MEMORY_PROMPT.format(
            prompt=QUESTION, retrieve=infmem.retrieved_block(units), chunk=prose(tok, CHUNK, seed=7), memory=memory
        ),
    )
    return [planner, write]


def engine(model: Path, n_ctx: int, gpu: bool, threads: int | None):
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    tok = load_tokenizer(info)
    eng = LlamaEngine(
        info,
        tok,
        ChatFormat.from_gguf(info),
        n_ctx=n_ctx,
        options=EmbeddedOptions(gpu_layers=-1 if gpu else 0, threads=threads, speculate=False, batch=False),
    )
    return eng, tok


def memagent_infmem(eng, prompts: list, budget: int) -> dict:
    """The step through memagent's engine: each prompt's two stages, as _Reading.think makes them."""
    from memagent_cli.core import infmem
    from memagent_cli.model.engine import CompletionDone, Sampling

    def call(prompt, tokens: int) -> CompletionDone:
        done = None
        for item in eng.complete_raw(prompt, tokens, Sampling(temperature=0.0, top_p=1.0)):
            if isinstance(item, CompletionDone):
                done = item
        assert done is not None
        return done

    t0 = time.perf_counter()
    out = {"prompt_tokens": 0, "generated": 0, "prompt_seconds": 0.0, "generate_seconds": 0.0}
    for i, prompt in enumerate(prompts):
        first = call(prompt, infmem.THINKING_TOKENS)
        second = call(prompt.then(infmem.closed_thinking(first.text)), budget)
        if i == 0:
            out["planner_seconds"] = time.perf_counter() - t0
        for done in (first, second):
            out["prompt_tokens"] += done.prompt_tokens - done.cached_tokens
            out["generated"] += done.completion_tokens
            out["prompt_seconds"] += done.prompt_seconds
            out["generate_seconds"] += done.generate_seconds
    out["seconds"] = time.perf_counter() - t0
    return out


def bare_infmem(llm, tok, prompts: list, budget: int) -> dict:
    """The same generations with llama-cpp-python alone (its own prefix reuse, as B16)."""
    from memagent_cli.core import infmem
    from memagent_cli.model.tokenizer import encode_template

    def generate(ids: list[int], tokens: int) -> str:
        out: list[int] = []
        for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
            if llm.token_eos() == token or len(out) >= tokens:
                break
            out.append(token)
        return tok.decode_bytes(out).decode("utf-8", errors="replace")

    t0 = time.perf_counter()
    generated = 0
    for prompt in prompts:
        first = generate(encode_template(tok, prompt.pieces), infmem.THINKING_TOKENS)
        second = generate(encode_template(tok, prompt.then(infmem.closed_thinking(first)).pieces), budget)
        generated += len(tok.encode(first)) + len(tok.encode(second))
    return {"seconds": time.perf_counter() - t0, "generated_about": generated}


def memagent_step(eng, tok, memory_tokens: int) -> dict:
    """One MemAgent memory step through memagent's engine (rule: the memory prompt, 1,024 written)."""
    from memagent_cli.core.protocols import get
    from memagent_cli.model.engine import CompletionDone, Sampling

    memagent = get("memagent")
    message = memagent.memory_prompt(QUESTION, prose(tok, memory_tokens, seed=11), prose(tok, CHUNK, seed=7))
    t0 = time.perf_counter()
    done = None
    for item in eng.complete(message, memory_tokens, Sampling(temperature=0.0)):
        if isinstance(item, CompletionDone):
            done = item
    assert done is not None
    return {
        "seconds": time.perf_counter() - t0,
        "prompt_tokens": done.prompt_tokens - done.cached_tokens,
        "generated": done.completion_tokens,
        "prompt_seconds": done.prompt_seconds,
        "generate_seconds": done.generate_seconds,
    }


def answer_seconds(per_token: float, prompt_rate: float, thinking: bool) -> float:
    """The final answer's cost from a step's rates: its prompt (the memory and the question, about
    1,300 tokens) and its reply (InfMem: the thinking's 1,024 tokens and a short answer; MemAgent:
    a short answer)."""
    return 1300 / prompt_rate + (1024 + 32 if thinking else 32) * per_token


def median(rows: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 3)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="every layer on the GPU")
    parser.add_argument("--work", type=Path, default=Path("/tmp/b17"))
    parser.add_argument("--vocab", type=Path, default=shapes.DEFAULT_VOCAB)
    parser.add_argument("--layers", type=int, help="fewer layers than the real models (a quick check, not a result)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--memory-tokens", type=int, default=MEMORY)
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: memagent's choice)")
    parser.add_argument("--parts", default="build,step")
    parser.add_argument("--json", type=Path, default=REPO / "benchmarks" / "infmem-step-results.json")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))

    import llama_cpp

    from memagent_cli.model.runtime import quiet_llama_logs

    quiet_llama_logs()
    models = {}
    for shape in ("qwen3-4b", "qwen2.5-7b"):
        layers = args.layers or shapes.SHAPES[shape]["n_layer"]
        t0 = time.perf_counter()
        models[shape] = shapes.build(shape, args.work, args.vocab, fast=True, n_layer=layers)
        log(f"{models[shape].name}: {models[shape].stat().st_size / 1e9:.2f} GB ({time.perf_counter() - t0:.0f} s)")
    if "step" not in parts:
        return {}

    budget = args.memory_tokens
    n_ctx = 12288  # the write's prompt (about 8,300 tokens) and both stages' 2,048
    four, tok4 = engine(models["qwen3-4b"], n_ctx, args.gpu, args.threads)
    prompts = infmem_prompts(tok4, budget)
    llm = llama_cpp.Llama(
        model_path=str(models["qwen3-4b"]),
        n_ctx=n_ctx,
        n_batch=min(2048, n_ctx),
        n_ubatch=512,
        n_gpu_layers=-1 if args.gpu else 0,
        n_threads=four.threads,
        n_threads_batch=four.threads_batch,
        flash_attn=four.flash_attn,
        verbose=False,
    )
    log(f"InfMem step at Qwen3-4B's shapes on {four.description}")
    ours, bare = [], []
    for r in range(args.repeat):
        ours.append(memagent_infmem(four, prompts, budget))
        bare.append(bare_infmem(llm, tok4, prompts, budget))
        log(f"  round {r + 1}: memagent {ours[-1]['seconds']:.1f} s, bare {bare[-1]['seconds']:.1f} s")
    device = four.description
    four.close()
    del llm

    seven, tok7 = engine(models["qwen2.5-7b"], 8192, args.gpu, args.threads)
    log(f"MemAgent step at Qwen2.5-7B's shapes on {seven.description}")
    steps7 = []
    for r in range(args.repeat):
        steps7.append(memagent_step(seven, tok7, budget))
        log(f"  round {r + 1}: {steps7[-1]['seconds']:.1f} s")
    seven.close()

    infmem_s, memagent_s = median(ours, "seconds"), median(steps7, "seconds")
    per_token4 = median(ours, "generate_seconds") / statistics.median(o["generated"] for o in ours)
    rate4 = statistics.median(o["prompt_tokens"] for o in ours) / median(ours, "prompt_seconds")
    per_token7 = median(steps7, "generate_seconds") / statistics.median(o["generated"] for o in steps7)
    rate7 = statistics.median(o["prompt_tokens"] for o in steps7) / median(steps7, "prompt_seconds")
    planner_s = median(ours, "planner_seconds")  # the stopping step calls the planner alone
    chunks = DOCUMENT // CHUNK
    index_s = 0.29  # B15: the 1M-token index
    tta = {
        f"infmem_stop_{int(f * 100)}pct": round(
            index_s + round(f * chunks) * infmem_s + (planner_s if f < 1 else 0) + answer_seconds(per_token4, rate4, True), 1
        )
        for f in STOPS
    }
    tta["memagent_all"] = round(chunks * memagent_s + answer_seconds(per_token7, rate7, False), 1)
    row = {
        "benchmark": "B17 infmem step",
        "device": device,
        "layers": args.layers or "real",
        "memory_tokens": budget,
        "repeat": args.repeat,
        "infmem_step": {
            "memagent_seconds": infmem_s,
            "planner_seconds": planner_s,
            "bare_seconds": median(bare, "seconds"),
            "ratio": round(infmem_s / median(bare, "seconds"), 3),
            "prompt_tokens": ours[0]["prompt_tokens"],
            "generated": ours[0]["generated"],
            "prompt_tok_s": round(rate4, 1),
            "generate_tok_s": round(1 / per_token4, 1),
        },
        "memagent_step_7b": {
            "seconds": memagent_s,
            "prompt_tokens": steps7[0]["prompt_tokens"],
            "generated": steps7[0]["generated"],
            "prompt_tok_s": round(rate7, 1),
            "generate_tok_s": round(1 / per_token7, 1),
        },
        "step_ratio_infmem4b_over_memagent7b": round(infmem_s / memagent_s, 3),
        "time_to_answer_1m_seconds": tta,
    }
    print(json.dumps(row, indent=2))
    args.json.write_text(json.dumps(row, indent=2) + "\n", encoding="utf-8")
    return row


if __name__ == "__main__":
    main()
