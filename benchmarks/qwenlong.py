"""B11: QwenLong-L1.5-30B-A3B's exact shapes: one memory step, memagent against the bare engine;
and whether drafting from the previous memory pays for QwenLong's memory plus plan.

Speed depends on shapes and quantization, not on what the weights learned (see shapes.py), so the
model is random: Qwen3-30B-A3B's exact tensors (tests/hfcheckpoint.QWENLONG_L15_30B: 48 layers,
hidden 2048, 32 heads / 4 KV heads of 128, 128 experts of width 768 with 8 per token, vocabulary
151,936), the real Qwen vocabulary from ../shared/fixtures (its 151,936 first entries), the trained
QwenLong stand-in's Qwen3-Thinking-style chat template, Q4_K_M by llama.cpp's own quantizer. The
control tokens' output rows are zero, so greedy decoding never ends its turn.

A 61 GB F16 model and its 18 GB Q4_K_M do not fit on a small disk together, so the model is made
from two layers: a 2-layer F16 (3.7 GB) is quantized by llama.cpp, whose Q4_K_M mix gives layer 0
the plain types (Q4_K everywhere) and layer 1 the "more bits" ones (attn_v and ffn_down_exps in
Q6_K; in a 2-layer model that is layer 1); the 48-layer file is then written from those bytes,
each layer taking layer 1's when llama.cpp's rule (use_more_bits(i, 48)) would give it more bits,
layer 0's otherwise. The mix is llama.cpp's, tensor for tensor; only the values repeat.

  step      one memory step with QwenLong's memory prompt (a chunk of `--chunk` tokens, the first
            step's "No previous memory"), `--gen` generated tokens, greedy, no drafts: through
            memagent's engine (LlamaEngine, as `ask` builds it) and through a bare llama_decode
            loop in a second context on the same loaded model (one copy of the weights in memory,
            the same threads, batch sizes and flash attention). Each run starts cold; the two are
            interleaved, the order swapped each round; medians. Target: memagent at most 1.05x.
  generation  the same, generation alone: each side has read the prompt (B4's engine part). A run
            is a minute here, not a cold step's seven: more rounds (--warm), less drift within one.
  widths    what one decode of w tokens costs against one of a single token, after the step's prompt:
            the price of checking w - 1 drafted tokens (a mixture of experts reads more experts for
            more tokens, which a dense model does not).
  drafts    QwenLong's loop (memory update after memory update, the reply's memory and plan
            carried) with drafts and without, through memagent's engine, with the trained stand-in
            tests/data/qwenlong.gguf (a random model copies nothing): drafted and taken tokens,
            generation time, identical steps; told the previous step's whole reply instead of its
            memory (the reply opens with its reasoning); and memagent's drafter replayed over the
            same replies checking every proposal: decodes per token, whatever checks cost here.

    python benchmarks/qwenlong.py --json benchmarks/qwenlong-results.json
    python benchmarks/run.py --doc-only     # B11 in docs/PERFORMANCE.md from that file

builds the model in --work once (18.56 GB; the F16 intermediate is deleted; kept for the next run
unless --delete-model) and measures on this CPU: a 1,024-token chunk, 256 generated tokens. On a
lent GPU (benchmarks/gpu/README.md: build.sh first; ../shared does not travel, so the vocabulary
goes in the carried .gpu/), every layer offloaded, the full 32,768-token chunk, 1,024 generated:

    python3 benchmarks/qwenlong.py --gpu --parts build --vocab .gpu/qwen2.5-vocab-llamacpp.gguf
    python3 benchmarks/qwenlong.py --gpu --vocab .gpu/qwen2.5-vocab-llamacpp.gguf --json benchmarks/qwenlong-gpu-results.json

--json keeps the parts of the file's last run that this run does not redo.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import shapes  # noqa: E402  # the random-model helpers B4 and B8 use
import speculate  # noqa: E402  # the loop B6 times, told the previous memory or reply

DEFAULT_VOCAB = shapes.DEFAULT_VOCAB
STAND_IN = REPO / "tests" / "data" / "qwenlong.gguf"
QUESTION = "What did the committee decide about the old mill?"
LAYER_TENSORS = ("attn_norm", "attn_q", "attn_q_norm", "attn_k", "attn_k_norm", "attn_v", "attn_output")
LAYER_TENSORS += ("ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
REAL_LAYERS = 48
REAL_Q4_K_M_GB = 18.6  # QwenLong-L1.5-30B-A3B at Q4_K_M, about (llama.cpp's mix of the real 30.5B parameters)


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


# --- the model ---------------------------------------------------------------------------------


def _add_header(w, n_layer: int, file_type: int, vocab: Path, template: str) -> None:
    """qwen3moe hyperparameters as memagent's converter writes them, and the tokenizer."""
    import gguf
    from hfcheckpoint import QWENLONG_L15_30B as S

    w.add_name("random-qwenlong-l1.5-30b-a3b")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_block_count(n_layer)
    w.add_context_length(S.max_position_embeddings)
    w.add_embedding_length(S.hidden_size)
    w.add_feed_forward_length(S.intermediate_size)
    w.add_head_count(S.num_attention_heads)
    w.add_head_count_kv(S.num_key_value_heads)
    w.add_rope_freq_base(S.rope_theta)
    w.add_layer_norm_rms_eps(S.rms_norm_eps)
    w.add_expert_count(S.num_experts)
    w.add_expert_used_count(S.num_experts_per_tok)
    w.add_key_length(S.head_dim)
    w.add_value_length(S.head_dim)
    w.add_file_type(file_type)
    w.add_expert_feed_forward_length(S.moe_intermediate_size)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    # the converter's padding past Qwen3's 151,936 rows cut; the template is the stand-in's
    shapes.copy_tokenizer(w, vocab, rows=S.vocab_size, skip=("tokenizer.chat_template",))
    w.add_chat_template(template)


def _layer_shapes() -> dict[str, tuple[int, ...]]:
    """One layer's tensors, numpy order (the writer reverses them into ggml's)."""
    from hfcheckpoint import QWENLONG_L15_30B as S

    h, hd, e, f = S.hidden_size, S.head_dim, S.num_experts, S.moe_intermediate_size
    q, kv = S.num_attention_heads * hd, S.num_key_value_heads * hd
    return {
        "attn_norm": (h,),
        "attn_q": (q, h),
        "attn_q_norm": (hd,),
        "attn_k": (kv, h),
        "attn_k_norm": (hd,),
        "attn_v": (kv, h),
        "attn_output": (h, q),
        "ffn_norm": (h,),
        "ffn_gate_inp": (e, h),
        "ffn_gate_exps": (e, f, h),
        "ffn_up_exps": (e, f, h),
        "ffn_down_exps": (e, h, f),
    }


def write_f16(dest: Path, n_layer: int, vocab: Path, template: str, seed: int = 0) -> Path:
    """The random F16 model of `n_layer` layers, tensor by tensor."""
    import gguf
    import numpy as np
    from hfcheckpoint import QWENLONG_L15_30B as S

    rng = np.random.default_rng(seed)
    # random values read at random offsets of a pool: speed cannot tell them from fresh draws
    pool = (rng.standard_normal(1 << 24) * 0.02).astype(np.float16)
    tensors: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (S.vocab_size, S.hidden_size))]
    for i in range(n_layer):
        tensors += [(f"blk.{i}.{n}.weight", shape) for n, shape in _layer_shapes().items()]
    tensors += [("output_norm.weight", (S.hidden_size,)), ("output.weight", (S.vocab_size, S.hidden_size))]

    def f32(name: str, shape: tuple[int, ...]) -> bool:
        # vectors and the router stay float32, as llama.cpp's converter (and memagent's) writes them
        return len(shape) == 1 or name.endswith("ffn_gate_inp.weight")

    def values(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if len(shape) == 1:
            return np.ones(shape, dtype=np.float32)
        n = int(np.prod(shape))
        out = np.empty(n, dtype=np.float16)
        done = 0
        while done < n:
            start = int(rng.integers(0, len(pool) // 2))
            take = min(n - done, len(pool) - start)
            out[done : done + take] = pool[start : start + take]
            done += take
        out = out.reshape(shape)
        if name == "output.weight":
            out[shapes.FIRST_CONTROL :] = 0  # control tokens never win a greedy choice
        return out.astype(np.float32) if f32(name, shape) else out

    w = gguf.GGUFWriter(str(dest), "qwen3moe")
    _add_header(w, n_layer, int(gguf.LlamaFileType.MOSTLY_F16), vocab, template)
    for name, shape in tensors:
        dtype = np.dtype(np.float32 if f32(name, shape) else np.float16)
        w.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape in tensors:
        w.write_tensor_data(values(name, shape))
    w.close()
    return dest


def assemble(two: Path, dest: Path, n_layer: int, vocab: Path, template: str) -> dict[str, int]:
    """The `n_layer`-layer Q4_K_M from the quantized 2-layer one's bytes; the count of each type."""
    import gguf

    w = gguf.GGUFWriter(str(dest), "qwen3moe")
    _add_header(w, n_layer, int(gguf.LlamaFileType.MOSTLY_Q4_K_M), vocab, template)
    layer = [f"{n}.weight" for n in LAYER_TENSORS]
    return shapes.repeat_layers(two, w, layer, n_layer, ["output_norm.weight", "output.weight"])


def chat_template() -> str:
    """The trained QwenLong stand-in's Qwen3-Thinking-style template (its prompt opens "<think>")."""
    from memagent_cli.model.gguf import read_gguf

    return read_gguf(STAND_IN).chat_template or ""


def build(work: Path, vocab: Path = DEFAULT_VOCAB, n_layer: int = REAL_LAYERS) -> Path:
    """The Q4_K_M model in `work`, made once; the intermediates are deleted."""
    from memagent_cli.model.convert.quantize import quantize

    work.mkdir(parents=True, exist_ok=True)
    final = work / f"random-qwenlong-l1.5-30b-a3b-{n_layer}L-q4_k_m.gguf"
    if final.is_file():
        return final
    template = chat_template()
    f16, two = work / "two-layers-f16.gguf", work / "two-layers-q4_k_m.gguf"
    t0 = time.perf_counter()
    if not two.is_file():
        write_f16(f16, 2, vocab, template)
        t1 = time.perf_counter()
        quantize(f16, two, "q4_k_m")
        f16.unlink()
        log(f"2-layer F16 written in {t1 - t0:.0f} s, quantized in {time.perf_counter() - t1:.0f} s")
    t2 = time.perf_counter()
    partial = final.with_name(final.name + ".partial")
    types = assemble(two, partial, n_layer, vocab, template)
    partial.rename(final)  # the 2-layer file (1.2 GB) stays: --layers N makes another in a minute
    log(f"{final.name}: {final.stat().st_size / 1e9:.2f} GB in {time.perf_counter() - t2:.0f} s; tensor types {types}")
    return final


# --- one memory step: memagent's engine against a bare llama_decode loop -------------------------


class SharedBare:
    """A second llama.cpp context on a model already loaded (memagent's): llama_decode alone, one
    sequence, greedy. Sharing the model keeps one copy of 18 GB of weights in memory."""

    def __init__(self, model, n_ctx: int, n_batch: int, threads: int, threads_batch: int, flash_attn: bool):
        import llama_cpp

        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = self.n_batch = n_batch
        cparams.n_ubatch = min(512, n_batch)
        cparams.n_seq_max = 1
        cparams.n_threads = threads
        cparams.n_threads_batch = threads_batch
        cparams.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        cparams.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(model, cparams)
        assert self.ctx, "could not make the bare context"
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.greedy = llama_cpp.llama_sampler_init_greedy()
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.vocab = llama_cpp.llama_model_get_vocab(model)

    def step(self, prompt: list[int], gen: int) -> dict:
        """A cold step: the prompt in n_batch pieces (logits for its last token), then one
        llama_decode per generated token. Prompt seconds end when the prompt's decode is done;
        generation is every token sampled, the first one included (as memagent counts them)."""
        import llama_cpp

        from memagent_cli.model.batched import decode

        llama_cpp.llama_memory_clear(self.mem, True)
        c0, t0 = time.process_time(), time.perf_counter()
        for start in range(0, len(prompt), self.n_batch):
            part = prompt[start : start + self.n_batch]
            last = start + len(part) == len(prompt)
            decode(self.ctx, self.batch, [(t, start + i, 0, last and i == len(part) - 1) for i, t in enumerate(part)])
        llama_cpp.llama_synchronize(self.ctx)
        t1 = time.perf_counter()
        ids = self._reply(len(prompt), gen)
        t2 = time.perf_counter()
        cpu = time.process_time() - c0
        return {"prompt_seconds": t1 - t0, "generate_seconds": t2 - t1, "cpu_seconds": cpu, "generated": len(ids), "ids": ids}

    def generate(self, prompt: list[int], gen: int) -> dict:
        """Generation alone: all of the prompt but its last token is in the cache (step() read it)."""
        import llama_cpp

        from memagent_cli.model.batched import decode

        llama_cpp.llama_memory_seq_rm(self.mem, 0, len(prompt) - 1, -1)
        c0, t0 = time.process_time(), time.perf_counter()
        decode(self.ctx, self.batch, [(prompt[-1], len(prompt) - 1, 0, True)])
        ids = self._reply(len(prompt), gen)
        return {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0, "generated": len(ids)}

    def decode_width(self, n_prompt: int, tokens: list[int]) -> float:
        """Seconds for one llama_decode of `tokens` after the prompt in the cache, logits for each
        (as a check of drafted tokens needs); the cache is cut back to the prompt first."""
        import llama_cpp

        from memagent_cli.model.batched import decode

        llama_cpp.llama_memory_seq_rm(self.mem, 0, n_prompt, -1)
        t0 = time.perf_counter()
        decode(self.ctx, self.batch, [(t, n_prompt + i, 0, True) for i, t in enumerate(tokens)])
        llama_cpp.llama_synchronize(self.ctx)
        return time.perf_counter() - t0

    def _reply(self, n_prompt: int, gen: int) -> list[int]:
        """Greedy tokens from the last decode's logits on, one llama_decode each."""
        import llama_cpp

        from memagent_cli.model.batched import decode

        ids: list[int] = []
        token = int(llama_cpp.llama_sampler_sample(self.greedy, self.ctx, -1))
        while not llama_cpp.llama_vocab_is_eog(self.vocab, token):
            ids.append(token)
            if len(ids) >= gen:
                break
            decode(self.ctx, self.batch, [(token, n_prompt + len(ids) - 1, 0, True)])
            token = int(llama_cpp.llama_sampler_sample(self.greedy, self.ctx, -1))
        return ids

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_sampler_free(self.greedy)
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)


def memagent_step(engine, message: str, gen: int, cold: bool = True) -> dict:
    """The same step through memagent's engine: cold (its prefix reuse told the cache is empty), or
    warm (its prefix reuse keeps all of the prompt but the last token: generation alone)."""
    from memagent_cli.model.engine import CompletionDone, Sampling

    if cold:
        engine._model().n_tokens = 0  # llama-cpp-python's bookkeeping: eval() then clears the cache
    done = None
    c0, t0 = time.process_time(), time.perf_counter()
    for item in engine.complete(message, gen, Sampling(temperature=0.0)):
        if isinstance(item, CompletionDone):
            done = item
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert done is not None and (done.cached_tokens == 0) == cold
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
    fields = {}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                fields[key] = round(int(value.split()[0]) / 1e6, 2)  # kB
    return {
        "rss_gb": fields.get("VmRSS"),
        "anon_gb": fields.get("RssAnon"),
        "file_gb": fields.get("RssFile"),
        "peak_gb": fields.get("VmHWM"),
    }


def chunk_text(tok, n: int) -> str:
    """Prose of exactly `n` tokens or just under (B4's document: helpers.words)."""
    from helpers import words

    k = n
    while True:
        ids = tok.encode(words(k, seed=7))
        if len(ids) >= n:
            break
        k = int(k * 1.3)
    text = tok.decode_bytes(ids[:n]).decode("utf-8", errors="ignore").strip()
    while len(tok.encode(text)) > n:  # a cut token may re-encode as more
        text = text[:-1].strip()
    return text


def step_vs_bare(model: Path, chunk: int, gen: int, gpu_layers: int, repeat: int, warm: int = 0, wide: int = 0) -> dict:
    """One QwenLong memory step (the first: "No previous memory"), memagent against bare, `repeat`
    rounds; then `warm` rounds of generation alone (out["warm"]) and `wide` rounds of decodes
    of each width (out["widths"]); see the module's docstring."""
    from memagent_cli.core.protocols import get
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.runtime import available_cores
    from memagent_cli.model.tokenizer import load_tokenizer

    info = read_gguf(model)
    tok, chat = load_tokenizer(info), ChatFormat.from_gguf(info)
    qwenlong = get("qwenlong")
    message = qwenlong.memory_prompt(QUESTION, qwenlong.initial_memory, chunk_text(tok, chunk))
    prompt = chat.encode(tok, message)
    n_ctx = len(prompt) + gen + 64
    out: dict = {"chunk_tokens": chunk, "prompt_tokens": len(prompt), "generated_tokens": gen}
    out["memory_before_load"] = memory()
    t0 = time.perf_counter()
    # memagent's own choices: threads (one for generation on this 2-core CPU: B7), flash attention
    engine = LlamaEngine(
        info, tok, chat, n_ctx=n_ctx, options=EmbeddedOptions(gpu_layers=gpu_layers, speculate=False, batch=False)
    )
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
    bare.decode_width(len(prompt), tokens[:4])  # warm-up: this width's graph
    times: dict[int, list[float]] = {w: [] for w in WIDTHS}
    for r in range(repeat):
        for w in WIDTHS if r % 2 == 0 else WIDTHS[::-1]:
            times[w].append(bare.decode_width(len(prompt), tokens[:w]))
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
            row = bare.generate(prompt, gen) if side == "bare" else memagent_step(engine, message, gen, cold=False)
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


# --- drafts for memory plus plan: the trained stand-in ----------------------------------------------


def loop(engine, chunks: list[str], memory_tokens: int, expect: str) -> dict:
    """QwenLong's memory updates over `chunks`, cold, as memagent's loop calls the engine. The
    drafts are told `expect`: "memory" (the previous memory and plan, what memagent tells them) or
    "reply" (the previous step's whole reply, reasoning included)."""
    import codeword

    engine._model().n_tokens = 0  # no prefix reuse across runs: every run starts cold
    return speculate.run_loop(engine, codeword.QUESTION, chunks, memory_tokens, protocol="qwenlong", told=expect)


def replay(prompts: list[list[int]], replies: list[list[int]], told: list[list[int]]) -> dict:
    """What the drafter could take, whatever checks cost: memagent's PromptLookup replayed over each
    step's prompt and reply, told `told` (ids, the end of turn last), checking every proposal whole.
    Plain decoding makes one decode a token; here a decode yields the token after its first and every
    drafted token taken. Machine-independent: how many decodes drafts save, and how wide they are."""
    from memagent_cli.model.speculate import DraftPolicy, PromptLookup

    class Always(DraftPolicy):
        def choose(self, available: int, width: int = 1, tokens: float = 1.0, acceptance: float | None = None) -> int:
            return min(available, self.draft_max)

    decodes = drafted = taken = widths = 0
    for prompt, reply, expected in zip(prompts, replies, told):
        lookup = PromptLookup(prompt, Always(), expected)
        lookup.add(reply[0])  # from the prompt's own decode
        done = 1
        while done < len(reply):
            draft = lookup.draft(len(reply) - done)
            got = 0
            while got < len(draft) and draft[got] == reply[done + got]:
                got += 1
            lookup.checked(len(draft), got)
            for token in reply[done : done + got + 1]:
                lookup.add(token)
            done += got + 1
            decodes, drafted, taken, widths = decodes + 1, drafted + len(draft), taken + got, widths + 1 + len(draft)
    tokens = sum(len(r) - 1 for r in replies)  # tokens after each reply's first, the end of turn included
    return {
        "decodes": decodes,
        "decodes_per_token": round(decodes / tokens, 3),
        "drafted": drafted,
        "taken": taken,
        "mean_width": round(widths / decodes, 2),
    }


def drafts(repeat: int, gpu_layers: int, steps: int = 24, memory_tokens: int = 64) -> dict:
    """QwenLong's loop with drafts (told the previous memory; told the previous reply) and without,
    through memagent's engine, interleaved; medians. The stand-in writes a short reasoning, then
    its memory and plan: unchanged after every section without the fact (before the fact as after)."""
    import codeword
    import llama_cpp
    import qwenlong_task as task

    from memagent_cli.core.protocols import get
    from memagent_cli.model.chat import ChatFormat
    from memagent_cli.model.gguf import read_gguf
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine
    from memagent_cli.model.tokenizer import load_tokenizer

    encode, decode = task.tokenizer()
    n = steps * task.CHUNK_TOKENS
    for _ in range(4):  # make_document counts tokens roughly: scaled until it makes `steps` sections
        doc = task.whole_fact(n, seed=3, where=0.3)
        ids = encode(doc.text.strip())  # sections as memagent cuts a text file: ids, sliced, decoded
        if -(-len(ids) // task.CHUNK_TOKENS) == steps:
            break
        n = int(n * steps * task.CHUNK_TOKENS / len(ids))
    chunks = [decode(ids[k : k + task.CHUNK_TOKENS]) for k in range(0, len(ids), task.CHUNK_TOKENS)]
    info = read_gguf(STAND_IN)
    tok = load_tokenizer(info)
    chat = ChatFormat.from_gguf(info)
    variants = {"plain": (False, "memory"), "memory": (True, "memory"), "reply": (True, "reply")}
    engines = {
        v: LlamaEngine(info, tok, chat, n_ctx=2048, options=EmbeddedOptions(gpu_layers=gpu_layers, speculate=s, batch=False))
        for v, (s, _) in variants.items()
    }
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    try:
        names = list(variants)
        for r in range(repeat):  # interleaved, the order rotated each round
            for v in names[r % 3 :] + names[: r % 3]:
                runs[v].append(loop(engines[v], chunks, memory_tokens, variants[v][1]))
        policies = {v: engines[v].draft_policy for v in ("memory", "reply")}
        device = engines["plain"].description
        vocab = llama_cpp.llama_model_get_vocab(engines["plain"]._model().model)
        eot = [llama_cpp.llama_vocab_eot(vocab) if llama_cpp.llama_vocab_eot(vocab) >= 0 else llama_cpp.llama_vocab_eos(vocab)]
    finally:
        for e in engines.values():
            e.close()
    plain = runs["plain"][0]
    qwenlong = get("qwenlong")
    # what a reply could copy: the memory and plan of a step that kept them, as tokens
    previous = [qwenlong.initial_memory] + [qwenlong.next_memory(t) for t in plain["texts"][:-1]]
    prompts = [chat.encode(tok, qwenlong.memory_prompt(codeword.QUESTION, m, c)) for m, c in zip(previous, chunks)]
    replies = [tok.encode(t) + eot for t in plain["texts"]]
    told = {
        "memory": [tok.encode(m) + eot for m in previous],
        "reply": [[]] + [tok.encode(t) + eot for t in plain["texts"][:-1]],
    }
    kept = [qwenlong.next_memory(t) for t, p in zip(plain["texts"], previous) if qwenlong.next_memory(t) == p]
    out: dict = {
        "model": "tests/data/qwenlong.gguf (the trained QwenLong stand-in)",
        "model_sha256": hashlib.sha256(STAND_IN.read_bytes()).hexdigest()[:16],
        "engine": device,
        "steps": len(chunks),
        "chunk_tokens": task.CHUNK_TOKENS,
        "memory_tokens": memory_tokens,
        "fact_in_final_memory": bool(doc.value and doc.value in plain["memory"]),
        "generated_tokens": plain["generated"],
        "steps_memory_kept": len(kept),
        "copyable_tokens": sum(len(tok.encode(m)) for m in kept),
        "reply_example": plain["texts"][-1],
        "repeats": repeat,
        "plain_generate_seconds": round(statistics.median(r["generate_seconds"] for r in runs["plain"]), 4),
        # prompt-lookup n-grams alone, told nothing: the baseline of the replays below
        "told_nothing": {"every_proposal_checked": replay(prompts, replies, [[] for _ in replies])},
    }
    for v in ("memory", "reply"):
        fast = runs[v][-1]  # the last run: the draft policy has learnt this machine's costs by then
        g = statistics.median(r["generate_seconds"] for r in runs[v])
        s = statistics.median(r["step_seconds"] for r in runs[v])
        cost = policies[v].cost()
        out["told_" + v] = {
            "drafted_tokens": fast["drafted"],
            "accepted_tokens": fast["accepted"],
            "acceptance": round(fast["accepted"] / fast["drafted"], 3) if fast["drafted"] else None,
            "generate_seconds": round(g, 4),
            "generate_ratio": round(g / out["plain_generate_seconds"], 3),
            "step_ratio": round(s / statistics.median(r["step_seconds"] for r in runs["plain"]), 3),
            "identical_steps": min(sum(a == b for a, b in zip(plain["texts"], r["texts"])) for r in runs[v]),
            "drafted_by_run": [r["drafted"] for r in runs[v]],
            "accepted_by_run": [r["accepted"] for r in runs[v]],
            "decode_cost_ms": None if cost is None else {"a": round(cost[0] * 1000, 3), "b": round(cost[1] * 1000, 3)},
            "every_proposal_checked": replay(prompts, replies, told[v]),
        }
        log("drafts", v, json.dumps(out["told_" + v]))
    return out


# --- the run -----------------------------------------------------------------------------------------


def device_name(gpu: bool) -> str:
    import subprocess

    from memagent_cli.model.runtime import available_cores

    if not gpu:
        return f"this CPU ({available_cores()} cores)"
    try:
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip() or "no NVIDIA GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "no NVIDIA GPU"


def machine_gb() -> float:
    """This machine's physical memory (GB)."""
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1e6, 2)
    raise RuntimeError("no MemTotal in /proc/meminfo")


def available_gb() -> float:
    with open("/proc/meminfo", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable")) / 1e6


def model_record(model: Path) -> dict:
    import gguf

    reader = gguf.GGUFReader(str(model))
    types: dict[str, int] = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    n_layer = int(reader.fields["qwen3moe.block_count"].contents())
    return {
        "file": model.name,
        "bytes": model.stat().st_size,
        "gb": round(model.stat().st_size / 1e9, 2),
        "real_gb": REAL_Q4_K_M_GB,
        "layers": n_layer,
        "tensor_types": types,
        "layers_with_more_bits": sum(shapes.use_more_bits(i, n_layer) for i in range(n_layer)),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="every layer on the GPU, the full 32,768-token chunk")
    parser.add_argument("--work", type=Path, default=Path("/tmp/b11"), help="where the model is built (kept)")
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB)
    parser.add_argument(
        "--layers", type=int, default=REAL_LAYERS, help="fewer, with --parts step: the same step with memory to spare"
    )
    parser.add_argument("--chunk", type=int, default=None, help="chunk tokens (1,024 on a CPU; 32,768 with --gpu)")
    parser.add_argument("--gen", type=int, default=None, help="generated tokens (256 on a CPU; 1,024 with --gpu)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", type=int, default=7, help="rounds of the generation part")
    parser.add_argument("--parts", default="step,generation,widths,drafts", help="build alone only makes the model")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--delete-model", action="store_true", help="delete the built model at the end")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    gpu_layers = -1 if args.gpu else 0
    chunk = args.chunk or (32768 if args.gpu else 1024)
    gen = args.gen or (1024 if args.gpu else 256)
    # Should memory run out, this process is the one the kernel ends, not other work on the machine.
    Path("/proc/self/oom_score_adj").write_text("1000")
    t0 = time.perf_counter()
    results: dict = {"device": device_name(args.gpu), "memory_gb": machine_gb()}
    cold, warm = args.repeat if "step" in parts else 0, args.warm if "generation" in parts else 0
    wide = args.warm if "widths" in parts else 0
    if args.layers != REAL_LAYERS and (warm or wide or "drafts" in parts):
        raise SystemExit("--layers other than 48 is for the step part alone (results: step_fewer_layers)")
    if "build" in parts or cold or warm or wide:  # "build" alone: a first device call that only makes the model
        model = build(args.work, args.vocab, args.layers)
        model_key = "model" if args.layers == REAL_LAYERS else "fewer_layers_model"
        results[model_key] = model_record(model)
    if cold or warm or wide:
        need = model.stat().st_size / 1e9 + 1.5  # on a CPU llama.cpp repacks the weights into anonymous memory
        results["available_gb_before"] = round(available_gb(), 1)
        log(json.dumps(results))
        if not args.gpu and results["available_gb_before"] < need:
            raise SystemExit(f"{results['available_gb_before']} GB available, {need:.1f} GB needed")
        out = step_vs_bare(model, chunk, gen, gpu_layers, cold, warm, wide)
        if wide:
            results["widths"] = {"engine": out["engine"], "prompt_tokens": out["prompt_tokens"], **out.pop("widths")}
        if warm:
            keys = ("chunk_tokens", "prompt_tokens", "engine", "threads", "load_seconds", "memory_after_steps")
            results["generation"] = {**{k: out[k] for k in keys}, **out.pop("warm")}
        if cold and args.layers == REAL_LAYERS:
            results["step"] = out
        elif cold:  # the same layers, fewer of them: where the whole model's memory is the question
            results["step_fewer_layers"] = {**out, "model": results.pop("fewer_layers_model")}
        log("step", json.dumps(out))
        if args.delete_model:
            model.unlink()
            (args.work / "two-layers-q4_k_m.gguf").unlink(missing_ok=True)
    if "drafts" in parts:
        results["drafts"] = drafts(max(args.repeat, 7), gpu_layers)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:  # the parts not run this time are kept from the file's last run
        kept = json.loads(args.json.read_text(encoding="utf-8")) if args.json.exists() else {}
        seconds = {**kept.get("seconds_by_part", {}), args.parts: results.pop("seconds")}
        results = {**kept, **results, "seconds_by_part": seconds}
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))
    return results


# --- PERFORMANCE.md ------------------------------------------------------------------------------


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def summary_rows(results: dict) -> list[tuple[str, str, str, str]]:
    """B11's rows for PERFORMANCE.md's summary table: (id, measure, result, target)."""
    rows = []
    s, d = results.get("step"), results.get("drafts")
    where = "on the GPU" if "GPU" in (s or {}).get("engine", "") else "this CPU"
    if s:
        r, each = s["ratio"]["step"], s["ratio"]["step_by_round"]
        measure = f"memagent / bare engine, one QwenLong step at QwenLong-L1.5-30B-A3B's shapes (Q4_K_M), {where}"
        rows.append(("B11", measure, f"{r} {_mark(r <= 1.05)} (rounds {min(each)} to {max(each)})", "≤ 1.05"))
    f = results.get("step_fewer_layers")
    if f:
        r, n = f["ratio"]["step"], f["model"]["layers"]
        measure = f"memagent / bare engine, the same step on {n} of its layers (memory to spare), {where}"
        rows.append(("B11", measure, f"{r} {_mark(r <= 1.05)}", "≤ 1.05"))
    w = results.get("generation")
    if w:
        r = w["ratio"]["time"]
        measure = f"memagent / bare engine, generation alone at QwenLong-L1.5-30B-A3B's shapes (Q4_K_M), {where}"
        rows.append(("B11", measure, f"{r} {_mark(r <= 1.05)}", "≤ 1.05"))
    if d:
        r = d["told_memory"]["generate_ratio"]
        measure = f"`--speculate` / `--no-speculate`, QwenLong stand-in copying memory and plan, {where}"
        rows.append(("B11", measure, str(r), "—"))
        widths = results.get("widths")
        if widths:
            checked = d["told_memory"]["every_proposal_checked"]
            p = projected_ratio(widths, checked["decodes_per_token"], checked["mean_width"])
            measure = f"drafts told the memory, every proposal checked, priced at QwenLong-L1.5-30B-A3B's decode widths ({where})"
            rows.append(("B11", measure, f"{p}x generation time", "—"))
    return rows


def _step_table(s: dict) -> str:
    lines = [
        "| engine | prompt tok/s | generation tok/s | prompt s | generation s | step s | CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for side in ("bare", "memagent"):
        x = s[side]
        lines.append(
            f"| {side} | {x['prompt_tok_s']} | {x['gen_tok_s']} | {x['prompt_seconds']} | {x['generate_seconds']} "
            f"| {x['step_seconds']} | {x['cpu_seconds']} |"
        )
    r = s["ratio"]
    lines.append(
        f"| **memagent / bare** | | | {r['prompt']}x | {r['generate']}x | **{r['step']}x** {_mark(r['step'] <= 1.05)} "
        f"| {r['cpu']}x |"
    )
    return "\n".join(lines)


def _step_text(s: dict, device: str, label: str) -> str:
    mem = s["memory_after_steps"]
    cpu = "CPU" in s["engine"]
    rounds = ", ".join(f"{r}x" for r in s["ratio"]["step_by_round"])
    return (
        f"**One memory step on {label}** ({device}; memagent's engine: {s['engine']}): QwenLong's memory prompt with "
        f"a {s['chunk_tokens']:,}-token chunk ({s['prompt_tokens']:,} prompt tokens) and {s['generated_tokens']} "
        "generated tokens, greedy, no drafts, through memagent's engine (`LlamaEngine`, as `ask` builds it) and "
        "through a bare `llama_decode` loop in a second context on the same loaded model (the same threads, batch "
        f"sizes, flash attention: {s['flash_attn']}); cold, interleaved, medians of {s['repeat']} rounds. Same reply "
        f"both ways: {s['same_reply']}. Each round's own ratio: {rounds}. Load {s['load_seconds']} s; resident "
        f"{mem['rss_gb']} GB, {mem['anon_gb']} GB of it anonymous"
        + (" (llama.cpp's CPU backend repacks the Q4_K weights out of the mapped file; the Q6_K ones stay mapped)" if cpu else "")
        + f", {mem['file_gb']} GB file-backed; peak {mem['peak_gb']} GB."
    )


def _fewer_layers_text(f: dict, results: dict) -> str:
    """The same step on fewer layers of the same shapes: memagent against bare with memory to spare."""
    r, m, mem = f["ratio"], f["model"], f["memory_after_steps"]
    text = (
        f"**The same step, {m['layers']} layers** ({m['gb']} GB, every layer QwenLong's; resident {mem['rss_gb']} GB "
        f"after the steps, {f['engine']}, medians of {f['repeat']} rounds): memagent / bare **{r['step']}x** "
        f"{_mark(r['step'] <= 1.05)} (prompt {r['prompt']}x, generation {r['generate']}x, CPU seconds {r['cpu']}x; "
        f"rounds {min(r['step_by_round'])}x to {max(r['step_by_round'])}x)."
    )
    whole = results.get("step")
    if whole:
        peak = whole["memory_after_load"]["peak_gb"]
        text += (
            f" At {results['model']['layers']} layers the process peaks at {peak} GB of this machine's "
            f"{results['memory_gb']} GB, and "
            f"the gap is in reading the prompt ({whole['ratio']['prompt']}x) while generation matches "
            f"({whole['ratio']['generate']}x); with memory to spare, the prompt is within {abs(r['prompt'] - 1) * 100:.0f}%."
        )
    return text


def _generation_text(w: dict) -> str:
    m, b, r = w["memagent"], w["bare"], w["ratio"]
    rounds = ", ".join(f"{x}x" for x in r["by_round"])
    return (
        f"**Generation alone** ({w['engine']}), the same prompt already read by each side, {w['generated']} tokens "
        f"a run, {w['repeat']} rounds interleaved (a run is short, so the load on the machine moves less within "
        f"one): memagent {m['tok_s']} tok/s, bare {b['tok_s']} tok/s; time **{r['time']}x** "
        f"{_mark(r['time'] <= 1.05)}, CPU seconds {r['cpu']}x; each round's own ratio: {rounds}."
    )


def _widths_text(w: dict) -> str:
    widths = list(w["relative"])
    return "\n".join(
        [
            f"**Decode width** ({w['engine']}): one `llama_decode` of w tokens after the step's {w['prompt_tokens']:,}-token "
            "prompt, logits for each (what checking w - 1 drafted tokens costs), against one of a single token; "
            f"the widths interleaved, medians of {w['repeat']} rounds. Each token picks its own 8 of the 128 experts, "
            "so a wider decode reads more of the expert weights, where a dense model reads the same weights at any "
            "width.",
            "",
            "| tokens in the decode | " + " | ".join(widths) + " |",
            "|---|" + "---|" * len(widths),
            "| seconds | " + " | ".join(str(w["seconds"][k]) for k in widths) + " |",
            "| / one token | " + " | ".join(f"{w['relative'][k]}x" for k in widths) + " |",
        ]
    )


def _projected(widths: dict | None, checked: dict) -> str:
    if not widths:
        return ""
    return f"{projected_ratio(widths, checked['decodes_per_token'], checked['mean_width'])}x"


def _drafts_text(d: dict, label: str, intro: bool = True, widths: dict | None = None) -> str:
    mm, rr, nn = d["told_memory"], d["told_reply"], d["told_nothing"]
    same = mm["every_proposal_checked"]["decodes"] == nn["every_proposal_checked"]["decodes"]
    lines = [
        f"**Drafts for memory plus plan, {label}** ({d['engine']}). QwenLong's loop over {d['steps']} sections of "
        f"{d['chunk_tokens']} tokens with the trained stand-in (`tests/data/qwenlong.gguf`), greedy, "
        f"{d['memory_tokens']}-token memories, through memagent's engine with drafts and without, interleaved, medians "
        f"of {d['repeats']}. Each reply is a short reasoning, `</think>`, then the memory and the plan; "
        f"{d['steps_memory_kept']} of {d['steps']} steps kept both unchanged ({d['copyable_tokens']} tokens a reply "
        f"could copy of {d['generated_tokens']} generated). memagent tells the drafter the previous memory, which it "
        "proposes while the reply follows it from its first token; a QwenLong reply opens with its reasoning, so the "
        "drafter lets it go at the reply's first token, before proposing any of it"
        + (
            "; the drafting is then prompt-lookup n-grams alone: told the memory, the drafter does exactly what it "
            "does told nothing."
            if same
            else "."
        )
        + " Told the previous step's whole reply (reasoning included) instead, it follows the reply from its start. "
        "The last two columns replay memagent's drafter over the same replies checking every proposal whole, which "
        "no timing decides: decodes per generated token (plain decoding: 1) and tokens per decode checked. "
        "Drafted and taken: the last run's (the policy has learnt this machine's costs by then).",
        "",
        "| drafts told | drafted | taken | acceptance | generation s | / no drafts | steps identical "
        "| every proposal checked: decodes / token | its mean width | its generation time at QwenLong's shapes |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| no drafts | | | | {d['plain_generate_seconds']} | 1 | | 1 | 1 | {'1' if widths else ''} |",
        f"| nothing (n-grams only) | | | | | | | {nn['every_proposal_checked']['decodes_per_token']} "
        f"| {nn['every_proposal_checked']['mean_width']} | {_projected(widths, nn['every_proposal_checked'])} |",
    ]
    if widths:
        lines[0] += (
            " The last column prices those decodes at QwenLong-L1.5's shapes with the decode-width costs above: "
            "decodes per token times what a decode of the mean width costs against one of a single token "
            "(a projection, not a run of the big model: its replies would be QwenLong's, not the stand-in's)."
        )
    if not intro:
        lines[0] = f"**The same, {label}** ({d['engine']}), medians of {d['repeats']}:"
    for name, x in (("the previous memory (memagent)", mm), ("the previous reply", rr)):
        r = x["every_proposal_checked"]
        lines.append(
            f"| {name} | {x['drafted_tokens']} | {x['accepted_tokens']} | {x['acceptance']} | {x['generate_seconds']} "
            f"| {x['generate_ratio']}x | {x['identical_steps']}/{d['steps']} | {r['decodes_per_token']} | {r['mean_width']} "
            f"| {_projected(widths, r)} |"
        )
    if widths:
        p_memory, p_reply = _projected(widths, mm["every_proposal_checked"]), _projected(widths, rr["every_proposal_checked"])
        eight = widths["relative"].get("8")
        lines += [
            "",
            "**Does drafting pay for memory plus plan?** Not from the memory: told it, memagent's drafter drafts what "
            "prompt lookup drafts alone (the memory is in the prompt already), and generation took "
            f"{mm['generate_ratio']}x the time without drafts on the stand-in; checking every proposal would take "
            f"{p_memory} at QwenLong's shapes, because each checked token calls its own experts"
            + (f" (a decode of 8 tokens costs {eight}x one of 1)" if eight else "")
            + f". Only replies repeated whole, reasoning included, would pay ({p_reply} told the previous reply), "
            "and the stand-in's reasoning repeats word for word where QwenLong's does not. memagent's draft policy "
            "times its checks as it runs and drafts only as much as pays, so `--speculate` stays on by default.",
        ]
    return "\n".join(lines)


def section(results: dict, gpu: dict | None = None) -> str:
    """B11's section of PERFORMANCE.md from this benchmark's results (this CPU), and a GPU's when one
    has run it (`--gpu`)."""
    out = ["## B11: QwenLong-L1.5-30B-A3B's shapes", ""]
    m = results.get("model")
    if m:
        t = m["tensor_types"]
        out.append(
            "A random-weight model of QwenLong-L1.5-30B-A3B's exact tensors (Qwen3-30B-A3B: 48 layers, hidden 2048, "
            "32 heads / 4 KV heads of 128, 128 experts of width 768, 8 per token, vocabulary 151,936), Q4_K_M by "
            "llama.cpp's own quantizer, built by `benchmarks/qwenlong.py` without the 61 GB F16: a 2-layer F16 is "
            "quantized (llama.cpp gives its layer 0 the plain Q4_K types and its layer 1 Q6_K for attn_v and "
            "ffn_down_exps), and the 48-layer file is written from those bytes, each layer taking the types llama.cpp's "
            f"Q4_K_M rule gives it ({m['layers_with_more_bits']} of {m['layers']} with Q6_K): the real mix, tensor for "
            f"tensor, with repeated values. **{m['gb']} GB** against about {m['real_gb']} GB for the real file "
            f"({', '.join(f'{v} {k}' for k, v in sorted(t.items()))} tensors). The control tokens' output rows are "
            "zero, so greedy decoding never ends its turn; the chat template is the QwenLong stand-in's "
            "(Qwen3-Thinking style, the reply opening with `<think>`); the vocabulary is Qwen2.5's (Qwen3's less its "
            "four added tokens)."
        )
        out.append("")
    for label, res in (("this CPU", results), ("the GPU", gpu)):
        s, w = (res or {}).get("step"), (res or {}).get("generation")
        if s:
            out += [_step_text(s, res["device"], label), "", _step_table(s), ""]
        if (res or {}).get("step_fewer_layers"):
            out += [_fewer_layers_text(res["step_fewer_layers"], res), ""]
        if w:
            out += [_generation_text(w), ""]
        if (res or {}).get("widths"):
            out += [_widths_text(res["widths"]), ""]
    shown = False
    for label, d, widths in (
        ("this CPU", results.get("drafts"), results.get("widths")),
        ("the GPU", (gpu or {}).get("drafts"), (gpu or {}).get("widths")),
    ):
        if d:
            out += [_drafts_text(d, label, intro=not shown, widths=widths), ""]
            shown = True
    out += [
        "```",
        "python benchmarks/qwenlong.py --json benchmarks/qwenlong-results.json  # then: python benchmarks/run.py --doc-only",
        "python benchmarks/qwenlong.py --gpu --work DIR --json benchmarks/qwenlong-gpu-results.json  # on a lent GPU",
        "```",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    main()
