"""Random-weight GGUFs with the exact shapes of real Qwen2.5 and Qwen3 models, for speed benchmarks:
speed depends on shapes and quantization, not on what the weights learned. The real Qwen2.5
vocabulary and chat template (Qwen3's four added tokens in the converter's padding rows), random
weights, Q4_K_M by llama.cpp's own quantizer; nothing is downloaded. The control tokens' output rows
are zero, so greedy decoding never ends its turn and every step generates its whole budget.

`build(..., fast=True)` quantizes a 2-layer model and repeats its layers' quantized bytes by
llama.cpp's rule for which layers get more bits (use_more_bits): the file llama.cpp would write,
in seconds instead of minutes.

    python -m benchmarks.harness.shapes qwen2.5-7b OUT_DIR [--vocab FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks.harness.fixtures import QWEN25_VOCAB, shared_code

DEFAULT_VOCAB = QWEN25_VOCAB

# config.json of each Qwen2.5-Instruct model (Hugging Face); the vocabulary rows are the
# converter's padded 152,064 for both (1.5B's real embedding has 151,936 rows: 0.08% fewer).
SHAPES = {
    "qwen2.5-1.5b": {"n_embd": 1536, "n_layer": 28, "n_head": 12, "n_head_kv": 2, "n_ff": 8960, "tied": True},
    "qwen2.5-7b": {"n_embd": 3584, "n_layer": 28, "n_head": 28, "n_head_kv": 4, "n_ff": 18944, "tied": False},
    # Qwen3-4B's config.json (InfMem-4B is a fine-tune of it): a head is 128 wide, so the queries
    # (32 x 128) are wider than the embedding; no biases, RMS norms on q and k; 151,936 rows.
    "qwen3-4b": {
        "n_embd": 2560,
        "n_layer": 36,
        "n_head": 32,
        "n_head_kv": 8,
        "n_ff": 9728,
        "tied": True,
        "arch": "qwen3",
        "head_dim": 128,
        "rows": 151936,
        "context": 40960,
    },
    # QwenLong-L1.5-30B-A3B, Qwen3-30B-A3B's shapes (testkit's hfcheckpoint.QWENLONG_L15_30B): 128
    # experts of width 768, 8 a token, a router kept float32; its chat template is build()'s to give.
    "qwenlong-l1.5-30b-a3b": {
        "n_embd": 2048,
        "n_layer": 48,
        "n_head": 32,
        "n_head_kv": 4,
        "n_ff": 6144,
        "tied": False,
        "arch": "qwen3moe",
        "head_dim": 128,
        "rows": 151936,
        "context": 262144,
        "rope": 1e7,
        "experts": 128,
        "experts_used": 8,
        "n_ff_exp": 768,
    },
}
FIRST_CONTROL = 151643  # ids from here up are control and padding tokens
QWEN3_ADDED = {151665: "<tool_response>", 151666: "</tool_response>", 151667: "<think>", 151668: "</think>"}
USER_DEFINED = 4  # llama.cpp's token type of a added token that is not a control token


def copy_tokenizer(
    writer, vocab: Path, rows: int | None = None, skip: tuple[str, ...] = (), added: dict[int, str] | None = None
) -> int:
    """Copies every tokenizer.* key of the vocabulary GGUF but those in `skip`, its tokens and
    their types cut to `rows` when given, the tokens of `added` (id -> text) in place of the
    rows they name, typed as added tokens; returns the number of tokens written."""
    import gguf

    reader = gguf.GGUFReader(str(vocab))
    n_tokens = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer.") or field.name in skip:
            continue
        value = field.contents()
        if rows is not None and field.name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            value = value[:rows]
        if added and field.name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            value = list(value)
            for i, text in added.items():
                value[i] = text if field.name == "tokenizer.ggml.tokens" else USER_DEFINED
        if field.name == "tokenizer.ggml.tokens":
            n_tokens = len(value)
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(field.name, value)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(field.name, value)
        elif kind == gguf.GGUFValueType.BOOL:
            writer.add_bool(field.name, bool(value))
        else:
            writer.add_uint32(field.name, int(value))
    return n_tokens


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's rule (llama-quant.cpp) for which layers' attn_v and ffn_down get Q6_K in Q4_K_M."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _header(w, shape: str, n_layer: int, file_type: int, vocab: Path, template: str | None = None) -> int:
    """The name, hyper-parameters and tokenizer of `shape` with `n_layer` layers (the chat template
    `template` where given, else the vocabulary's); the vocabulary's rows."""
    import gguf

    add_qwen2_hparams = shared_code("tinymodel").add_qwen2_hparams

    s = SHAPES[shape]
    w.add_name(f"random-{shape}")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_file_type(file_type)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_qwen2_hparams(
        w, s["n_embd"], n_layer, s["n_ff"], s["n_head"], s["n_head_kv"], s.get("context", 32768), s.get("rope", 1e6)
    )
    if "head_dim" in s:
        w.add_key_length(s["head_dim"])
        w.add_value_length(s["head_dim"])
    if "experts" in s:
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["experts_used"])
        w.add_expert_feed_forward_length(s["n_ff_exp"])
    added = QWEN3_ADDED if s.get("arch") == "qwen3" else None
    n_tokens = copy_tokenizer(w, vocab, rows=s.get("rows"), added=added, skip=("tokenizer.chat_template",) if template else ())
    if template:
        w.add_chat_template(template)
    return n_tokens


def _layer(shape: str) -> list[tuple[str, tuple[int, ...], str]]:
    """One layer's tensors (name after "blk.N.", numpy shape, values), as the converter writes them."""
    s = SHAPES[shape]
    n_embd, n_ff = s["n_embd"], s["n_ff"]
    head = s.get("head_dim", n_embd // s["n_head"])
    n_q, n_kv = head * s["n_head"], head * s["n_head_kv"]
    qwen3 = s.get("arch") in ("qwen3", "qwen3moe")
    out = [("attn_norm.weight", (n_embd,), "ones"), ("attn_q.weight", (n_q, n_embd), "random")]
    out += [("attn_q_norm.weight", (head,), "ones")] if qwen3 else [("attn_q.bias", (n_q,), "random")]
    out += [("attn_k.weight", (n_kv, n_embd), "random")]
    out += [("attn_k_norm.weight", (head,), "ones")] if qwen3 else [("attn_k.bias", (n_kv,), "random")]
    out += [("attn_v.weight", (n_kv, n_embd), "random")]
    out += [] if qwen3 else [("attn_v.bias", (n_kv,), "random")]
    out += [("attn_output.weight", (n_embd, n_q), "random"), ("ffn_norm.weight", (n_embd,), "ones")]
    if "experts" in s:  # a mixture of experts: the router, then each expert's gate, up and down
        e, f = s["experts"], s["n_ff_exp"]
        out += [("ffn_gate_inp.weight", (e, n_embd), "router"), ("ffn_gate_exps.weight", (e, f, n_embd), "random")]
        return out + [("ffn_up_exps.weight", (e, f, n_embd), "random"), ("ffn_down_exps.weight", (e, n_embd, f), "random")]
    gate_up = [("ffn_gate.weight", (n_ff, n_embd), "random"), ("ffn_up.weight", (n_ff, n_embd), "random")]
    return out + gate_up + [("ffn_down.weight", (n_embd, n_ff), "random")]


def write_f16(
    shape: str, dest: Path, vocab: Path = DEFAULT_VOCAB, seed: int = 0, n_layer: int | None = None, template: str | None = None
) -> Path:
    """Writes the random F16 model (`n_layer` layers, default the shape's; `template`: _header's)."""
    import gguf

    s = SHAPES[shape]
    n_embd = s["n_embd"]
    n_layer = s["n_layer"] if n_layer is None else n_layer
    w = gguf.GGUFWriter(str(dest), s.get("arch", "qwen2"))
    n_vocab = _header(w, shape, n_layer, int(gguf.LlamaFileType.MOSTLY_F16), vocab, template)
    # a tied embedding is the output layer too: its control tokens' rows are zero
    tensors = [("token_embd.weight", (n_vocab, n_embd), "output" if s["tied"] else "random")]
    for i in range(n_layer):
        tensors += [(f"blk.{i}.{name}", dims, kind) for name, dims, kind in _layer(shape)]
    tensors.append(("output_norm.weight", (n_embd,), "ones"))
    if not s["tied"]:
        tensors.append(("output.weight", (n_vocab, n_embd), "output"))
    return write_tensors(w, dest, tensors, seed)


def write_tensors(w, dest: Path, tensors: list[tuple[str, tuple[int, ...], str]], seed: int = 0) -> Path:
    """Writes to `w` (its header added) random tensors, one by one (a 7B model is 15 GB: never all in
    memory), and closes it. Each is (name, numpy shape, kind): "ones", "random", "router" (random,
    kept float32 as the converters keep a MoE router) or "output" (random, the control tokens' rows
    zero: they never win a greedy choice). Vectors stay float32, as llama.cpp's converter writes them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # A pool of random values read at random offsets: drawing billions of fresh normals would take
    # minutes, and speed cannot tell the difference.
    pool = (rng.standard_normal(1 << 24) * 0.02).astype(np.float16)

    def dtype(shape: tuple[int, ...], kind: str) -> np.dtype:
        return np.dtype(np.float32 if len(shape) == 1 or kind == "router" else np.float16)

    def values(shape: tuple[int, ...], kind: str) -> np.ndarray:
        if kind == "ones":
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
        if kind == "output":
            out[FIRST_CONTROL:] = 0
        return out.astype(dtype(shape, kind), copy=False)

    for name, shape, kind in tensors:
        w.add_tensor_info(name, shape, dtype(shape, kind), int(np.prod(shape)) * dtype(shape, kind).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _, shape, kind in tensors:
        w.write_tensor_data(values(shape, kind))
    w.close()
    return dest


def assemble(
    shape: str, two: Path, dest: Path, n_layer: int, vocab: Path = DEFAULT_VOCAB, template: str | None = None
) -> dict[str, int]:
    """The `n_layer`-layer Q4_K_M from the quantized 2-layer one's bytes; the count of each type."""
    import gguf

    w = gguf.GGUFWriter(str(dest), SHAPES[shape].get("arch", "qwen2"))
    _header(w, shape, n_layer, int(gguf.LlamaFileType.MOSTLY_Q4_K_M), vocab, template)
    tail = ["output_norm.weight"] + ([] if SHAPES[shape]["tied"] else ["output.weight"])
    return repeat_layers(two, w, [name for name, _, _ in _layer(shape)], n_layer, tail)


def repeat_layers(two: Path, w, layer: list[str], n_layer: int, tail: list[str]) -> dict[str, int]:
    """Writes to `w` (its header added) the quantized 2-layer model's tensors with `n_layer` layers
    of the tensors named in `layer` (after "blk.N."), each from layer 1 where use_more_bits says so,
    else from layer 0, the embedding first and `tail` last; closes it; the count of each type."""
    import gguf

    reader = gguf.GGUFReader(str(two))
    by_name = {t.name: t for t in reader.tensors}
    order, source = ["token_embd.weight"], {"token_embd.weight": "token_embd.weight"}
    for i in range(n_layer):
        src = 1 if use_more_bits(i, n_layer) else 0
        for name in layer:
            order.append(f"blk.{i}.{name}")
            source[order[-1]] = f"blk.{src}.{name}"
    order += tail
    source.update({n: n for n in tail})
    types: dict[str, int] = {}
    for name in order:
        t = by_name[source[name]]
        w.add_tensor_info(name, t.data.shape, t.data.dtype, int(t.n_bytes), raw_dtype=t.tensor_type)
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name in order:
        w.write_tensor_data(by_name[source[name]].data)
    w.close()
    return types


def build(
    shape: str,
    folder: Path,
    vocab: Path = DEFAULT_VOCAB,
    quant: str = "q4_k_m",
    fast: bool = False,
    n_layer: int | None = None,
    template: str | None = None,
) -> Path:
    """The quantized model in `folder`, made once (the F16 intermediate is deleted); `fast` (Q4_K_M
    only) assembles it from a quantized 2-layer model (kept), `n_layer` layers (default the shape's);
    `template`: a chat template in place of the vocabulary's."""
    from memagent_cli.model.convert.quantize import quantize

    folder.mkdir(parents=True, exist_ok=True)
    n_layer = SHAPES[shape]["n_layer"] if n_layer is None else n_layer
    layers = "" if n_layer == SHAPES[shape]["n_layer"] else f"-{n_layer}L"
    final = folder / f"random-{shape}{layers}-{quant}.gguf"
    if final.is_file():
        return final
    if fast and quant != "q4_k_m":
        raise ValueError("fast builds make Q4_K_M only")
    f16 = folder / f"random-{shape}{'-2L' if fast else layers}-f16.gguf"
    two = folder / f"random-{shape}-2L-q4_k_m.gguf"
    t0 = time.perf_counter()
    if not f16.is_file() and not (fast and two.is_file()):  # written whole (an interrupted one stays .partial)
        partial = f16.with_name(f16.name + ".partial")
        write_f16(shape, partial, vocab, n_layer=2 if fast else n_layer, template=template)
        partial.rename(f16)
    t1 = time.perf_counter()
    if fast:
        if not two.is_file():
            quantize(f16, two, quant)
            f16.unlink()
        t2 = time.perf_counter()
        partial = final.with_name(final.name + ".partial")
        types = assemble(shape, two, partial, n_layer, vocab, template)
        partial.rename(final)
        print(
            f"built {final.name}: 2-layer F16 in {t1 - t0:.0f} s, quantized in {t2 - t1:.0f} s, "
            f"{n_layer} layers assembled in {time.perf_counter() - t2:.0f} s; tensor types {types}",
            file=sys.stderr,
        )
        return final
    quantize(f16, final, quant)
    f16.unlink()
    print(f"built {final.name}: F16 in {t1 - t0:.0f} s, {quant} in {time.perf_counter() - t1:.0f} s", file=sys.stderr)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("out", type=Path)
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB)
    parser.add_argument("--quant", default="q4_k_m")
    parser.add_argument("--fast", action="store_true", help="assemble from a quantized 2-layer model (Q4_K_M)")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's (quick checks)")
    args = parser.parse_args(argv)
    print(build(args.shape, args.out, args.vocab, args.quant, args.fast, args.layers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
