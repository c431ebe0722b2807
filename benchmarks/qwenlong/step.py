"""B11's step, generation and decode-width parts: memagent's engine against a bare llama_decode
loop in a second context on the same loaded model."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from benchmarks.harness.engines import Bare, finished, memagent_engine, tokenizer_and_chat
from benchmarks.harness.fixtures import exact_prose
from benchmarks.harness.runner import log, proc_kb
from benchmarks.qwenlong.model import QUESTION

# --- one memory step: memagent's engine against a bare llama_decode loop -------------------------


class SharedBare(Bare):
    """A second llama.cpp context on a model already loaded (memagent's): llama_decode alone, one
    sequence, greedy. Sharing the model keeps one copy of 18 GB of weights in memory."""

    def __init__(self, model, n_ctx: int, n_batch: int, threads: int, threads_batch: int, flash_attn: bool):
        import llama_cpp

        super().__init__(None, n_ctx, 1, flash_attn, threads=threads, n_batch=n_batch, threads_batch=threads_batch, loaded=model)
        self.vocab = llama_cpp.llama_model_get_vocab(model)

    def step(self, prompt: list[int], gen: int) -> dict:
        """A cold step: the prompt in n_batch pieces (logits for its last token), then one
        llama_decode per generated token. Prompt seconds end when the prompt's decode is done;
        generation is every token sampled, the first one included (as memagent counts them)."""
        self.clear()
        c0, t0 = time.process_time(), time.perf_counter()
        self.prompt(prompt)
        self.sync()
        t1 = time.perf_counter()
        ids = self._reply(len(prompt), gen)
        t2 = time.perf_counter()
        cpu = time.process_time() - c0
        return {"prompt_seconds": t1 - t0, "generate_seconds": t2 - t1, "cpu_seconds": cpu, "generated": len(ids), "ids": ids}

    def generation(self, prompt: list[int], gen: int) -> dict:
        """Generation alone: all of the prompt but its last token is in the cache (step() read it)."""
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(self.mem, 0, len(prompt) - 1, -1)
        c0, t0 = time.process_time(), time.perf_counter()
        self.decode([(prompt[-1], len(prompt) - 1, 0, True)])
        ids = self._reply(len(prompt), gen)
        return {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0, "generated": len(ids)}

    def _reply(self, n_prompt: int, gen: int) -> list[int]:
        """Greedy tokens from the last decode's logits on, one llama_decode each, to the end of turn."""
        import llama_cpp

        ids: list[int] = []
        token = self.sample(-1)
        while not llama_cpp.llama_vocab_is_eog(self.vocab, token):
            ids.append(token)
            if len(ids) >= gen:
                break
            self.decode([(token, n_prompt + len(ids) - 1, 0, True)])
            token = self.sample(-1)
        return ids


def memagent_step(engine, message: str, gen: int, cold: bool = True) -> dict:
    """The same step through memagent's engine: cold (its prefix reuse told the cache is empty), or
    warm (its prefix reuse keeps all of the prompt but the last token: generation alone)."""
    from memagent_cli.model.engine import Sampling

    if cold:
        engine._model().n_tokens = 0  # llama-cpp-python's bookkeeping: eval() then clears the cache
    c0, t0 = time.process_time(), time.perf_counter()
    done = finished(engine.complete(message, gen, Sampling(temperature=0.0)))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert (done.cached_tokens == 0) == cold
    return {
        "prompt_seconds": done.prompt_seconds,
        "generate_seconds": done.generate_seconds,
        "seconds": seconds,  # the whole call: the chat template and tokenizing too
        "cpu_seconds": cpu,
        "generated": done.completion_tokens,
        "text": done.text,
    }


def memory() -> dict:
    """This process's memory (GB): resident in all, anonymous (e.g. repacked weights) and file-backed
    (the mmapped model), and the peak resident."""
    kb = proc_kb()
    named = {"rss_gb": "VmRSS", "anon_gb": "RssAnon", "file_gb": "RssFile", "peak_gb": "VmHWM"}
    return {name: round(kb[key] / 1e6, 2) if key in kb else None for name, key in named.items()}


def step_vs_bare(model: Path, chunk: int, gen: int, gpu_layers: int, repeat: int, warm: int = 0, wide: int = 0) -> dict:
    """One QwenLong memory step (the first: "No previous memory"), memagent against bare, `repeat`
    rounds; then `warm` rounds of generation alone (out["warm"]) and `wide` rounds of decodes
    of each width (out["widths"]); see the module's docstring."""
    from memagent_cli.core.protocols import get
    from memagent_cli.model.runtime import available_cores

    tok, chat = tokenizer_and_chat(model)
    qwenlong = get("qwenlong")
    message = qwenlong.memory_prompt(QUESTION, qwenlong.initial_memory, exact_prose(tok, chunk, seed=7))
    prompt = chat.encode(tok, message)
    n_ctx = len(prompt) + gen + 64
    out: dict = {"chunk_tokens": chunk, "prompt_tokens": len(prompt), "generated_tokens": gen}
    out["memory_before_load"] = memory()
    t0 = time.perf_counter()
    # memagent's own choices: threads (one for generation on this 2-core CPU: B7), flash attention
    engine = memagent_engine(model, n_ctx, gpu_layers=gpu_layers, speculate=False, batch=False)
    out["load_seconds"] = round(time.perf_counter() - t0, 1)
    out["engine"] = engine.description
    out["flash_attn"] = engine.flash_attn
    out["memory_after_load"] = memory()
    log("loaded", json.dumps({k: out[k] for k in ("load_seconds", "engine", "memory_after_load")}))
    llm = engine._model()
    # the bare context as memagent's: n_batch, threads for one token and for a batch, flash attention
    threads_batch = max(engine.threads, available_cores())
    out["threads"], out["threads_batch"] = engine.threads, threads_batch
    bare = SharedBare(llm.model, n_ctx, llm.n_batch, engine.threads, threads_batch, engine.flash_attn)
    try:
        # warm-up: first decodes (graph allocation, kernels, CUDA graphs), untimed
        memagent_step(engine, qwenlong.memory_prompt(QUESTION, qwenlong.initial_memory, "warm up"), 4)
        bare.step(prompt[:64], 4)
        runs: dict[str, list[dict]] = {"memagent": [], "bare": []}
        for r in range(repeat):
            for side in ("bare", "memagent") if r % 2 == 0 else ("memagent", "bare"):
                row = bare.step(prompt, gen) if side == "bare" else memagent_step(engine, message, gen)
                runs[side].append(row)
                log(side, r, {k: round(v, 3) for k, v in row.items() if isinstance(v, float)}, row["generated"])
        if warm:
            out["warm"] = warm_generation(engine, bare, message, prompt, gen, warm, primed=repeat > 0)
        if wide:
            if not (repeat or warm):
                bare.step(prompt, 1)
            out["widths"] = decode_widths(bare, prompt, wide)
        out["memory_after_steps"] = memory()
    finally:
        bare.close()
        engine.close()
    if not repeat:
        return out
    same = tok.decode_bytes(runs["bare"][0]["ids"]).decode("utf-8", errors="replace") == runs["memagent"][0]["text"]
    out["same_reply"] = same  # greedy on the same weights: the same tokens
    for side, rows in runs.items():
        p = statistics.median(r["prompt_seconds"] for r in rows)
        g = statistics.median(r["generate_seconds"] for r in rows)
        s = statistics.median(r["prompt_seconds"] + r["generate_seconds"] for r in rows)
        made = rows[0]["generated"]
        out[side] = {
            "cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in rows), 3),
            "prompt_seconds": round(p, 3),
            "generate_seconds": round(g, 3),
            "step_seconds": round(s, 3),
            "prompt_tok_s": round(len(prompt) / p, 1),
            "gen_tok_s": round(made / g, 2),
            "generated": made,
            "step_seconds_each": [round(r["prompt_seconds"] + r["generate_seconds"], 3) for r in rows],
        }
    m, b = out["memagent"], out["bare"]
    out["ratio"] = {  # memagent / bare, time: target at most 1.05
        "step": round(m["step_seconds"] / b["step_seconds"], 3),
        "prompt": round(m["prompt_seconds"] / b["prompt_seconds"], 3),
        "generate": round(m["generate_seconds"] / b["generate_seconds"], 3),
        # CPU seconds of the process (every thread): less sensitive to other work on shared cores
        "cpu": round(m["cpu_seconds"] / b["cpu_seconds"], 3),
        # each round's own pair (run one after the other): how far the load on the machine moves it
        "step_by_round": [round(x / y, 3) for x, y in zip(m["step_seconds_each"], b["step_seconds_each"])],
    }
    out["repeat"] = repeat
    return out


WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16)  # tokens in one decode: one (plain decoding) and what a draft check takes


def decode_widths(bare: SharedBare, prompt: list[int], repeat: int) -> dict:
    """What a decode of w tokens costs at these shapes against one of 1 token, after the step's
    prompt: the price of checking w - 1 drafted tokens. In a mixture of experts each token picks
    its own 8 of 128 experts, so a wider decode reads more expert weights (a dense model reads the
    same weights for any width); the tokens are the chunk's own prose. Rounds interleave the widths,
    the order reversed every other round; medians."""
    tokens = prompt[-40:]  # prose from the chunk, not the prompt's fixed text
    bare.timed_decode(len(prompt), tokens[:4])  # warm-up: this width's graph
    times: dict[int, list[float]] = {w: [] for w in WIDTHS}
    for r in range(repeat):
        for w in WIDTHS if r % 2 == 0 else WIDTHS[::-1]:
            times[w].append(bare.timed_decode(len(prompt), tokens[:w]))
    one = statistics.median(times[1])
    out = {
        "repeat": repeat,
        "seconds": {str(w): round(statistics.median(t), 4) for w, t in times.items()},
        "relative": {str(w): round(statistics.median(t) / one, 3) for w, t in times.items()},
    }
    log("widths", json.dumps(out))
    return out


def projected_ratio(widths: dict, decodes_per_token: float, mean_width: float) -> float:
    """Generation time with drafts over plain decoding, were every decode `mean_width` tokens wide
    at the cost `widths` measured (linear between measured widths): decodes per token times what
    one such decode costs against one of a single token."""
    points = sorted((int(w), r) for w, r in widths["relative"].items())
    for (w0, r0), (w1, r1) in zip(points, points[1:]):
        if w0 <= mean_width <= w1:
            return round(decodes_per_token * (r0 + (r1 - r0) * (mean_width - w0) / (w1 - w0)), 3)
    raise ValueError(f"mean width {mean_width} outside the measured {points[0][0]}..{points[-1][0]}")


def warm_generation(engine, bare: SharedBare, message: str, prompt: list[int], gen: int, repeat: int, primed: bool) -> dict:
    """Generation alone, as B4's engine part: each side has read the prompt once; each run decodes
    its last token and generates `gen`. A run takes a minute here, not the seven of a cold step, so
    more rounds fit and the machine's load moves less within one; interleaved, medians."""
    if not primed:  # each side reads the prompt once (after the cold steps, both caches hold it)
        memagent_step(engine, message, 1)
        bare.step(prompt, 1)
    runs: dict[str, list[dict]] = {"memagent": [], "bare": []}
    for r in range(repeat):
        for side in ("bare", "memagent") if r % 2 == 0 else ("memagent", "bare"):
            row = bare.generation(prompt, gen) if side == "bare" else memagent_step(engine, message, gen, cold=False)
            runs[side].append(row)
            log("warm", side, r, round(row["seconds"], 3), round(row["cpu_seconds"], 3), row["generated"])
    out: dict = {"repeat": repeat, "generated": gen}
    for side, rows in runs.items():
        out[side] = {
            "seconds": round(statistics.median(r["seconds"] for r in rows), 3),
            "cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in rows), 3),
            "tok_s": round(statistics.median(r["generated"] / r["seconds"] for r in rows), 3),
            "seconds_each": [round(r["seconds"], 3) for r in rows],
        }
    m, b = out["memagent"], out["bare"]
    out["ratio"] = {
        "time": round(m["seconds"] / b["seconds"], 3),
        "cpu": round(m["cpu_seconds"] / b["cpu_seconds"], 3),
        "by_round": [round(x / y, 3) for x, y in zip(m["seconds_each"], b["seconds_each"])],
    }
    return out
