"""B11's model: Qwen3-30B-A3B's exact tensors with random weights, built from two quantized layers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from benchmarks.harness import shapes
from benchmarks.harness.fixtures import DATA, QWEN25_VOCAB, shared_code

DEFAULT_VOCAB = QWEN25_VOCAB
STAND_IN = DATA / "qwenlong.gguf"
QUESTION = "What did the committee decide about the old mill?"
REAL_LAYERS = 48
REAL_Q4_K_M_GB = 18.6  # QwenLong-L1.5-30B-A3B at Q4_K_M, about (llama.cpp's mix of the real 30.5B parameters)


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


# --- the model ---------------------------------------------------------------------------------


def _add_header(w, n_layer: int, file_type: int, vocab: Path, template: str) -> None:
    """qwen3moe hyperparameters as memagent's converter writes them, and the tokenizer."""
    import gguf

    S = shared_code("hfcheckpoint").QWENLONG_L15_30B

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
    S = shared_code("hfcheckpoint").QWENLONG_L15_30B

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

    S = shared_code("hfcheckpoint").QWENLONG_L15_30B

    w = gguf.GGUFWriter(str(dest), "qwen3moe")
    _add_header(w, n_layer, int(gguf.LlamaFileType.MOSTLY_F16), vocab, template)
    layer = [(n, d, "ones" if len(d) == 1 else "router" if n == "ffn_gate_inp" else "random") for n, d in _layer_shapes().items()]
    tensors = [("token_embd.weight", (S.vocab_size, S.hidden_size), "random")]
    for i in range(n_layer):
        tensors += [(f"blk.{i}.{n}.weight", d, kind) for n, d, kind in layer]
    tensors += [("output_norm.weight", (S.hidden_size,), "ones"), ("output.weight", (S.vocab_size, S.hidden_size), "output")]
    return shapes.write_tensors(w, dest, tensors, seed)


def assemble(two: Path, dest: Path, n_layer: int, vocab: Path, template: str) -> dict[str, int]:
    """The `n_layer`-layer Q4_K_M from the quantized 2-layer one's bytes; the count of each type."""
    import gguf

    w = gguf.GGUFWriter(str(dest), "qwen3moe")
    _add_header(w, n_layer, int(gguf.LlamaFileType.MOSTLY_Q4_K_M), vocab, template)
    layer = [f"{n}.weight" for n in _layer_shapes()]
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
