"""Random-weight GGUFs with the exact shapes of real Qwen2.5 models, for speed benchmarks.

Speed depends on a model's shapes and quantization, not on what its weights learned, so a
model of Qwen2.5-7B-Instruct's (or 1.5B's) exact tensor shapes, with the real Qwen2.5
vocabulary and chat template and random weights, quantized to Q4_K_M by llama.cpp's own
quantizer, runs at the real model's speed. Nothing is downloaded: the vocabulary is the
converter's output in ../shared/fixtures (or --vocab), the weights are drawn here.

The output rows of the control tokens (<|endoftext|>, <|im_start|>, <|im_end|>, ...) are zero,
so their logits are 0 where every other token's is random with a spread of several units:
greedy decoding never ends its turn, and every step generates its whole budget.

    python benchmarks/shapes.py qwen2.5-7b OUT_DIR [--vocab FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
DEFAULT_VOCAB = REPO.parent / "shared" / "fixtures" / "qwen2.5-vocab-llamacpp.gguf"

# config.json of each Qwen2.5-Instruct model (Hugging Face); the vocabulary rows are the
# converter's padded 152,064 for both (1.5B's real embedding has 151,936 rows: 0.08% fewer).
SHAPES = {
    "qwen2.5-1.5b": {"n_embd": 1536, "n_layer": 28, "n_head": 12, "n_head_kv": 2, "n_ff": 8960, "tied": True},
    "qwen2.5-7b": {"n_embd": 3584, "n_layer": 28, "n_head": 28, "n_head_kv": 4, "n_ff": 18944, "tied": False},
}
FIRST_CONTROL = 151643  # ids from here up are control and padding tokens


def copy_tokenizer(writer, vocab: Path, rows: int | None = None, skip: tuple[str, ...] = ()) -> int:
    """Copies every tokenizer.* key of the vocabulary GGUF but those in `skip`, its tokens and
    their types cut to `rows` when given; returns the number of tokens written."""
    import gguf

    reader = gguf.GGUFReader(str(vocab))
    n_tokens = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer.") or field.name in skip:
            continue
        value = field.contents()
        if rows is not None and field.name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            value = value[:rows]
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


def write_f16(shape: str, dest: Path, vocab: Path = DEFAULT_VOCAB, seed: int = 0) -> Path:
    """Writes the random F16 model, tensor by tensor (a 7B one is 15 GB: never all in memory)."""
    import gguf
    import numpy as np
    from tinymodel import add_qwen2_hparams

    s = SHAPES[shape]
    n_embd, n_layer, n_head, n_head_kv, n_ff = s["n_embd"], s["n_layer"], s["n_head"], s["n_head_kv"], s["n_ff"]
    n_kv = n_embd // n_head * n_head_kv
    rng = np.random.default_rng(seed)
    # A pool of random values read at random offsets: drawing 7.6 billion fresh normals would take
    # minutes, and speed cannot tell the difference.
    pool = (rng.standard_normal(1 << 24) * 0.02).astype(np.float16)

    w = gguf.GGUFWriter(str(dest), "qwen2")
    w.add_name(f"random-{shape}")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    add_qwen2_hparams(w, n_embd, n_layer, n_ff, n_head, n_head_kv)
    n_vocab = copy_tokenizer(w, vocab)

    tensors: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (n_vocab, n_embd), "random")]
    for i in range(n_layer):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", (n_embd,), "ones"),
            (p + "attn_q.weight", (n_embd, n_embd), "random"),
            (p + "attn_q.bias", (n_embd,), "random"),
            (p + "attn_k.weight", (n_kv, n_embd), "random"),
            (p + "attn_k.bias", (n_kv,), "random"),
            (p + "attn_v.weight", (n_kv, n_embd), "random"),
            (p + "attn_v.bias", (n_kv,), "random"),
            (p + "attn_output.weight", (n_embd, n_embd), "random"),
            (p + "ffn_norm.weight", (n_embd,), "ones"),
            (p + "ffn_gate.weight", (n_ff, n_embd), "random"),
            (p + "ffn_up.weight", (n_ff, n_embd), "random"),
            (p + "ffn_down.weight", (n_embd, n_ff), "random"),
        ]
    tensors.append(("output_norm.weight", (n_embd,), "ones"))
    if not s["tied"]:
        tensors.append(("output.weight", (n_vocab, n_embd), "output"))

    def values(shape_: tuple[int, ...], kind: str) -> np.ndarray:
        n = int(np.prod(shape_))
        # Norms and biases stay float32, as llama.cpp's converter writes them.
        if kind == "ones":
            return np.ones(shape_, dtype=np.float32)
        out = np.empty(n, dtype=np.float16)
        done = 0
        while done < n:
            start = int(rng.integers(0, len(pool) // 2))
            take = min(n - done, len(pool) - start)
            out[done : done + take] = pool[start : start + take]
            done += take
        out = out.reshape(shape_)
        if kind == "output" or (kind == "random" and shape_[0] == n_vocab and s["tied"]):
            out[FIRST_CONTROL:] = 0  # control tokens never win a greedy choice
        if len(shape_) == 1:
            return out.astype(np.float32)
        return out

    for name, shape_, kind in tensors:
        dtype = np.float32 if len(shape_) == 1 else np.float16
        w.add_tensor_info(name, shape_, np.dtype(dtype), int(np.prod(shape_)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape_, kind in tensors:
        w.write_tensor_data(values(shape_, kind))
    w.close()
    return dest


def build(shape: str, folder: Path, vocab: Path = DEFAULT_VOCAB, quant: str = "q4_k_m") -> Path:
    """The quantized model in `folder`, made once (the F16 intermediate is deleted)."""
    sys.path.insert(0, str(REPO))
    from memagent_cli.model.convert.quantize import quantize

    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"random-{shape}-{quant}.gguf"
    if final.is_file():
        return final
    f16 = folder / f"random-{shape}-f16.gguf"
    t0 = time.perf_counter()
    if not f16.is_file():  # written whole (an interrupted one stays .partial)
        partial = f16.with_name(f16.name + ".partial")
        write_f16(shape, partial, vocab)
        partial.rename(f16)
    t1 = time.perf_counter()
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
    args = parser.parse_args(argv)
    print(build(args.shape, args.out, args.vocab, args.quant))
    return 0


if __name__ == "__main__":
    sys.exit(main())
