"""Record llama.cpp's own safetensors -> GGUF conversion, and transformers' logits, as a test oracle.

    python3 -m venv /tmp/oracle-venv
    /tmp/oracle-venv/bin/pip install torch==2.13.0 transformers==4.57.6 numpy sentencepiece safetensors \
        'protobuf>=4.21.0,<5.0.0' -e LLAMA_CPP/gguf-py
    /tmp/oracle-venv/bin/python tests/data/make_convert_reference.py --llama-cpp LLAMA_CPP

LLAMA_CPP is the llama.cpp folder vendored in llama-cpp-python's source distribution (the version
memagent pins): `pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`, untar,
`.../vendor/llama.cpp`. This script runs with the oracle venv (torch, transformers, llama.cpp's
gguf-py); llama.cpp itself is run through the project venv's llama_cpp (`--llama-python`,
default .venv/bin/python). Neither torch nor transformers is ever a dependency of memagent.

For three tiny checkpoints written by tests/hfcheckpoint.py (a qwen2, a qwen3 and a qwen3moe, seed
1234, BF16, two shards, the real Qwen2.5 tokenizer) it records, in convert-reference.json:

- the sha256 of each safetensors file and of each tensor's raw bytes (so a test can tell whether
  NumPy generated different bytes, and so whether the rest of the record applies);
- what llama.cpp's convert_hf_to_gguf.py writes with `--outtype f16`: every KV pair (type name and
  value; arrays longer than 64 as length, element type and sha256 of their canonical JSON) and
  every tensor (GGUF name, ggml type, shape in ggml order, byte count, sha256 of its data), in
  file order; the same for `--outtype f32`;
- the max abs difference between llama.cpp's logits (on its own f32 conversion) and transformers'
  (float32), and whether their argmaxes agree: the tolerance llama.cpp itself achieves, with its
  default f16 KV cache and with an f32 one (`*_kv_f32`);
- for the mixture of experts, how close transformers' routing came to a tie: per prompt, the
  smallest gap, over every token and layer, between the router logits of the last expert chosen
  and the first one not chosen (a gap below llama.cpp's error could flip an expert choice);

and, in convert-logits.npz, per model and prompt: token ids, transformers' and llama.cpp's
full-vocab argmax per position, transformers' float32 logits at every position for a fixed subset
of 4096 vocabulary ids (`vocab_subset`), and per position the max abs difference (full vocabulary)
between llama.cpp's logits and transformers'.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parents[1]))  # the repository: testkit, the checkpoint writer

from testkit import hfcheckpoint  # noqa: E402

SEED = 1234
DTYPE = "BF16"
SHARDS = 2
SUBSET = 4096
ARRAY_INLINE = 64  # arrays longer than this are recorded as length, element type and sha256
PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Document 1:\nreport.pdf\nThe 2019 amendment was signed by Ada.",
    "问题：谁签署了修正案？ 🚀",
]
MODELS = {
    "qwen2": hfcheckpoint.TINY,
    # Qwen3's transformers config takes hfcheckpoint's config.json as it is (head_dim stated).
    "qwen3": hfcheckpoint.Shape(architecture="Qwen3ForCausalLM", head_dim=32),
    # Qwen3-30B-A3B's (QwenLong-L1.5's) architecture at tiny size: 8 experts, 2 per token.
    "qwen3moe": hfcheckpoint.TINY_MOE,
}

# Run by the project venv's python: llama.cpp (through llama-cpp-python) on an f32 GGUF.
LLAMA_EVAL = textwrap.dedent("""
    import json, sys
    import numpy as np
    from llama_cpp import Llama
    model, prompts_json, out, kv = sys.argv[1:5]
    prompts = json.load(open(prompts_json))
    extra = {"type_k": 0, "type_v": 0} if kv == "f32" else {}  # 0: GGML_TYPE_F32; default f16
    llm = Llama(model_path=model, n_ctx=256, logits_all=True, n_threads=2, verbose=False, **extra)
    arrays = {}
    for i, p in enumerate(prompts):
        llm.reset()
        llm.eval(p["ids"])
        arrays[f"logits_{i}"] = np.array(llm.scores[:len(p["ids"])], dtype=np.float32)
        arrays[f"tokens_{i}"] = np.array(llm.tokenize(p["text"].encode(), add_bos=False, special=False))
    np.savez(out, **arrays)
""")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def checkpoint_hashes(folder: Path) -> dict:
    files, tensors = {}, {}
    for path in sorted(folder.glob("*.safetensors")):
        raw = path.read_bytes()
        files[path.name] = sha256(raw)
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + n])
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            start, end = meta["data_offsets"]
            tensors[name] = {
                "file": path.name,
                "dtype": meta["dtype"],
                "shape": meta["shape"],
                "sha256": sha256(raw[8 + n + start : 8 + n + end]),
            }
    other = {p.name: sha256(p.read_bytes()) for p in sorted(folder.iterdir()) if p.suffix == ".json"}
    return {"files": files, "json_files": other, "tensors": tensors}


def convert(llama_cpp: Path, folder: Path, outtype: str, out: Path) -> list[str]:
    cmd = [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(folder), "--outtype", outtype, "--outfile", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return cmd


def gguf_record(path: Path) -> dict:
    from gguf import GGUFReader, GGUFValueType

    reader = GGUFReader(path)
    header, kvs = {}, []
    for name, field in reader.fields.items():
        value = field.contents()
        if name.startswith("GGUF."):
            header[name[5:]] = value
            continue
        entry = {"key": name, "type": field.types[0].name}
        if field.types[0] == GGUFValueType.ARRAY:
            entry["element_type"] = field.types[-1].name
            entry["length"] = len(value)
            if len(value) > ARRAY_INLINE:
                canonical = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
                entry["sha256"] = sha256(canonical.encode("utf-8"))
            else:
                entry["value"] = value
        else:
            entry["value"] = value
        kvs.append(entry)
    tensors = []
    for t in reader.tensors:
        tensors.append(
            {
                "name": t.name,
                "type": t.tensor_type.name,
                "shape": [int(d) for d in t.shape],
                "n_bytes": int(t.n_bytes),
                "offset": int(t.data_offset - reader.data_offset),
                "sha256": sha256(np.ascontiguousarray(t.data).tobytes()),
            }
        )
    raw = path.read_bytes()
    return {
        "header": header,
        "alignment": int(reader.alignment),
        "data_offset": int(reader.data_offset),
        "file_size": len(raw),
        "file_sha256": sha256(raw),
        "kv": kvs,
        "tensors": tensors,
    }


def transformers_logits(folder: Path) -> tuple[list[list[int]], list[np.ndarray], dict, list[float]]:
    """Token ids, float32 logits and classes per prompt, and (for a mixture of experts) per prompt
    the smallest router-logit gap between the k-th and (k+1)-th expert over all tokens and layers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(folder)
    model, info = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, output_loading_info=True)
    model.eval()
    problems = {k: sorted(v) for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"transformers did not load every tensor of {folder}: {problems}")
    top_k = getattr(model.config, "num_experts_per_tok", 0)
    gaps: list[float] = []

    def router_gap(module, inputs, output) -> None:
        ranked = torch.sort(output.to(torch.float32), dim=-1, descending=True).values
        gaps.append(float((ranked[..., top_k - 1] - ranked[..., top_k]).min()))

    routers = [m for n, m in model.named_modules() if n.endswith(".mlp.gate")] if top_k else []
    hooks = [m.register_forward_hook(router_gap) for m in routers]
    ids, logits, margins = [], [], []
    with torch.no_grad():
        for prompt in PROMPTS:
            enc = tok(prompt, add_special_tokens=False)["input_ids"]
            assert enc == tok(prompt)["input_ids"], "the tokenizer adds special tokens"
            gaps.clear()
            out = model(torch.tensor([enc])).logits[0].to(torch.float32).numpy()
            ids.append(list(enc))
            logits.append(out)
            if routers:
                assert len(gaps) == len(routers)
                margins.append(min(gaps))
    for hook in hooks:
        hook.remove()
    meta = {
        "tokenizer_class": type(tok).__name__,
        "model_class": type(model).__name__,
        "config_class": type(model.config).__name__,
    }
    return ids, logits, meta, margins


def llama_logits(
    python: str, gguf: Path, ids: list[list[int]], work: Path, kv: str = "default"
) -> tuple[list[np.ndarray], list[list[int]]]:
    prompts = work / "prompts.json"
    prompts.write_text(json.dumps([{"text": t, "ids": i} for t, i in zip(PROMPTS, ids)]))
    out = work / f"llama-logits-{kv}.npz"
    subprocess.run([python, "-c", LLAMA_EVAL, str(gguf), str(prompts), str(out), kv], check=True)
    with np.load(out) as npz:
        return ([npz[f"logits_{i}"] for i in range(len(ids))], [npz[f"tokens_{i}"].tolist() for i in range(len(ids))])


def versions(llama_cpp: Path, llama_python: str) -> dict:
    from importlib.metadata import version

    import gguf
    import torch
    import transformers

    llama_cpp_python = subprocess.run(
        [llama_python, "-c", "import llama_cpp; print(llama_cpp.__version__)"], check=True, capture_output=True, text=True
    ).stdout.strip()
    sdist = next((p.name for p in llama_cpp.parents if p.name.startswith("llama_cpp_python-")), str(llama_cpp))
    return {
        "llama_cpp_python_sdist": sdist,
        "llama_cpp_python_runtime": llama_cpp_python,
        "gguf_py": version("gguf"),
        "gguf_py_path": str(Path(gguf.__file__).parent),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": version("tokenizers"),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp folder (convert_hf_to_gguf.py)")
    parser.add_argument("--out", type=Path, default=HERE, help="where to write the json and npz (tests/data)")
    parser.add_argument(
        "--llama-python",
        default=str(REPO / ".venv" / "bin" / "python"),
        help="a python with llama_cpp (llama-cpp-python) installed",
    )
    args = parser.parse_args()
    llama_cpp = args.llama_cpp.resolve()

    record: dict = {
        "made_with": {
            "command": "python tests/data/make_convert_reference.py --llama-cpp LLAMA_CPP",
            "convert_command": "python LLAMA_CPP/convert_hf_to_gguf.py FOLDER --outtype {f16,f32} --outfile OUT",
            "versions": versions(llama_cpp, args.llama_python),
            "checkpoint": {
                "seed": SEED,
                "dtype": DTYPE,
                "shards": SHARDS,
                "tokenizer": "../shared/fixtures/hf/qwen2.5 (hfcheckpoint.QWEN25_TOKENIZER)",
                "folder_name": "the model key (qwen2 / qwen3 / qwen3moe): "
                "the converter derives general.name from the folder name",
            },
            "llama_eval": "Llama(model_path, n_ctx=256, logits_all=True, n_threads=2, verbose=False); "
            "reset(); eval(ids); scores[:len(ids)]. *_kv_f32: the same with type_k=type_v=0 "
            "(GGML_TYPE_F32) instead of the default f16 KV cache",
            "transformers_eval": "AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval(), "
            "no_grad; ids = AutoTokenizer(folder)(prompt, add_special_tokens=False), "
            "no chat template",
            "prompts": PROMPTS,
        },
    }
    vocab = hfcheckpoint.TINY.vocab_size
    subset = np.sort(np.random.default_rng(0).choice(vocab, SUBSET, replace=False)).astype(np.int32)
    arrays: dict[str, np.ndarray] = {"vocab_subset": subset}

    with tempfile.TemporaryDirectory() as tmp:
        for key, shape in MODELS.items():
            t0 = time.time()
            work = Path(tmp) / f"work-{key}"
            work.mkdir()
            folder = hfcheckpoint.write_checkpoint(
                Path(tmp) / key, shape, seed=SEED, dtype=DTYPE, shards=SHARDS, tokenizer=hfcheckpoint.QWEN25_TOKENIZER
            )
            assert shape.vocab_size == vocab
            entry: dict = {
                "shape": shape.record(),
                "config_json": hfcheckpoint.config_json(shape, "bfloat16"),
                "checkpoint": checkpoint_hashes(folder),
            }
            for outtype in ("f16", "f32"):
                out = work / f"{key}-{outtype}.gguf"
                convert(llama_cpp, folder, outtype, out)
                entry[f"gguf_{outtype}"] = gguf_record(out)

            ids, hf, meta, margins = transformers_logits(folder)
            ll, ll_tokens = llama_logits(args.llama_python, work / f"{key}-f32.gguf", ids, work)
            # The same with an f32 KV cache: llama.cpp's default f16 cache is most of the difference.
            ll32, _ = llama_logits(args.llama_python, work / f"{key}-f32.gguf", ids, work, kv="f32")
            prompts = []
            worst = worst32 = 0.0
            all_agree = all_agree32 = True
            for i, (pid, a, b, c) in enumerate(zip(ids, hf, ll, ll32)):
                assert a.shape == b.shape == (len(pid), vocab), (a.shape, b.shape)
                diff = float(np.max(np.abs(a - b)))
                worst = max(worst, diff)
                am_hf, am_ll = a.argmax(-1).astype(np.int32), b.argmax(-1).astype(np.int32)
                agree = bool(np.array_equal(am_hf, am_ll))
                all_agree &= agree
                diff32 = float(np.max(np.abs(a - c)))
                worst32 = max(worst32, diff32)
                agree32 = bool(np.array_equal(am_hf, c.argmax(-1)))
                all_agree32 &= agree32
                p = f"{key}_p{i}_"
                arrays[p + "ids"] = np.array(pid, dtype=np.int32)
                arrays[p + "argmax_hf"] = am_hf
                arrays[p + "argmax_llama"] = am_ll
                arrays[p + "logits_hf"] = a[:, subset].astype(np.float32)
                # llama.cpp's logits are not kept (the file stays small): only how far they are.
                arrays[p + "maxdiff_llama"] = np.max(np.abs(a - b), axis=-1).astype(np.float32)
                prompts.append(
                    {
                        "text": PROMPTS[i],
                        "ids": pid,
                        "n_tokens": len(pid),
                        "llama_tokenize_matches": ll_tokens[i] == pid,
                        "max_abs_diff": diff,
                        "argmax_agree": agree,
                        "max_abs_diff_kv_f32": diff32,
                        "argmax_agree_kv_f32": agree32,
                        "max_abs_logit_hf": float(np.max(np.abs(a))),
                        "mean_abs_diff": float(np.mean(np.abs(a - b))),
                    }
                )
            entry["transformers"] = meta
            if margins:
                for prompt, margin in zip(prompts, margins):
                    prompt["min_router_gap"] = margin
            entry["logits"] = {
                "max_abs_diff_llama_f32_vs_transformers": worst,
                "argmax_agree": all_agree,
                "max_abs_diff_kv_f32": worst32,
                "argmax_agree_kv_f32": all_agree32,
                "prompts": prompts,
            }
            if margins:
                entry["logits"]["min_router_gap"] = min(margins)
            record[key] = entry
            print(
                f"{key}: max |llama.cpp f32 - transformers| = {worst:.3e}, argmax agree: {all_agree}; "
                f"with an f32 KV cache {worst32:.3e}, argmax agree: {all_agree32} ({time.time() - t0:.0f}s)",
                flush=True,
            )

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "convert-reference.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    np.savez_compressed(args.out / "convert-logits.npz", **arrays)
    for name in ("convert-reference.json", "convert-logits.npz"):
        print(f"wrote {args.out / name} ({(args.out / name).stat().st_size} bytes)")


if __name__ == "__main__":
    main()
