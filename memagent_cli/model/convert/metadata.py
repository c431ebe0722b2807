"""The GGUF header of a converted checkpoint: general.*, the architecture's hyperparameters and
the tokenizer, with the keys and values llama.cpp's own converter (convert_hf_to_gguf.py) writes.

Three parts, each done the way the converter does it, without torch or transformers:

- `general.*`: gguf's `Metadata` (the converter's own code) reads the model card and config.
- hyperparameters: read from config.json, key for key as the converter's `TextModel` writes them
  for qwen2 and qwen3, and its `Qwen2MoeModel` (which `Qwen3MoeModel` is) for qwen3moe.
- the vocabulary: tokens and token types are built from tokenizer.json (transformers' AutoTokenizer
  would give the same list: the model's vocab, the added tokens, `[PAD{id}]` for ids no token has);
  merges, special ids, add_bos/eos and the chat template come from gguf's `SpecialVocab`, the class
  the converter itself calls.

`tests/test_convert.py` checks every key against the converter's output for Qwen2.5's real
tokenizer files (../shared/fixtures/qwen2.5-vocab-llamacpp.gguf) and for tiny checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from ...errors import MemagentError
from .checkpoint import MOE_ARCHITECTURES, Checkpoint

if TYPE_CHECKING:
    from gguf import GGUFWriter

# llama.cpp token types (llama_token_type)
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5

# The pre-tokenizer regexes llama.cpp implements, by the `tokenizer.ggml.pre` name it knows them by.
# The converter identifies a tokenizer by hashing its output on a test string; a byte-level BPE
# tokenizer's pre-tokenization is its Split regex, so comparing the regex says the same thing.
_PRE_TOKENIZERS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
}


def _fail(message: str, hint: str | None = None) -> MemagentError:
    return MemagentError(message, hint or "memagent converts byte-level BPE tokenizers such as Qwen2's")


def pre_tokenizer(tokenizer: dict[str, Any]) -> str:
    """llama.cpp's name for the tokenizer's pre-tokenizer, or a refusal saying what it is."""
    pre = tokenizer.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    kinds = [s.get("type") for s in steps if isinstance(s, dict)]
    if "ByteLevel" not in kinds:
        raise _fail(f"tokenizer.json's pre-tokenizer ({' + '.join(map(str, kinds)) or 'none'}) is not byte-level BPE")
    regexes = [s.get("pattern", {}).get("Regex") for s in steps if isinstance(s, dict) and s.get("type") == "Split"]
    if len(regexes) == 1 and regexes[0] in _PRE_TOKENIZERS:
        return _PRE_TOKENIZERS[regexes[0]]
    raise _fail("tokenizer.json's pre-tokenizer is not one memagent knows how to name for llama.cpp")


def _looks_special(token: str) -> bool:
    # The converter treats added tokens in <|...|> brackets (ASCII or full-width bars) as control
    # tokens even when tokenizer.json does not mark them special.
    return (token.startswith("<|") and token.endswith("|>")) or (token.startswith("<｜") and token.endswith("｜>"))


@overload
def vocabulary(
    folder: Path, vocab_size: int | None, *, with_post_processor: Literal[False] = False
) -> tuple[list[str], list[int], str]: ...


@overload
def vocabulary(
    folder: Path, vocab_size: int | None, *, with_post_processor: Literal[True]
) -> tuple[list[str], list[int], str, Any]: ...


@overload
def vocabulary(
    folder: Path, vocab_size: int | None, *, with_post_processor: bool
) -> tuple[list[str], list[int], str] | tuple[list[str], list[int], str, Any]: ...


def vocabulary(
    folder: Path, vocab_size: int | None, *, with_post_processor: bool = False
) -> tuple[list[str], list[int], str] | tuple[list[str], list[int], str, Any]:
    """(tokens, token types, pre-tokenizer name) as the converter's get_vocab_base makes them
    (and tokenizer.json's post-processor, with_post_processor)."""
    path = folder / "tokenizer.json"
    try:
        tokenizer = json.loads(path.read_text(encoding="utf-8"))
        model = tokenizer["model"]
        vocab: dict[str, int] = model["vocab"]
        added = tokenizer.get("added_tokens") or []
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise _fail(
            f"{path} cannot be read ({type(exc).__name__}: {str(exc)[:120]})", "Download the checkpoint's tokenizer.json again"
        ) from None
    if model.get("type") != "BPE":
        raise _fail(f"tokenizer.json holds a {model.get('type')} model, not BPE")
    pre = pre_tokenizer(tokenizer)
    by_id: dict[int, str] = {i: t for t, i in vocab.items()}
    added_by_id = {int(t["id"]): t for t in added}
    for i, token in added_by_id.items():
        by_id[i] = token["content"]
    size = vocab_size if vocab_size is not None else len(by_id)
    if by_id and max(by_id) >= size:
        raise _fail(
            f"tokenizer.json has token id {max(by_id)}, but config.json's vocab_size is {size}",
            "The tokenizer does not belong to this checkpoint",
        )
    tokens: list[str] = []
    types: list[int] = []
    for i in range(size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
        elif i in added_by_id:
            if added_by_id[i].get("special") or _looks_special(token):
                types.append(CONTROL)
            else:
                token = token.replace("\u2581", " ")  # llama.cpp expects user-defined spaces pre-normalized
                types.append(USER_DEFINED)
            tokens.append(token)
        else:
            tokens.append(token)
            types.append(NORMAL)
    if with_post_processor:
        return tokens, types, pre, tokenizer.get("post_processor")
    return tokens, types, pre


def add_vocabulary(writer: GGUFWriter, folder: Path, config: dict[str, Any]) -> None:
    import gguf

    tokens, types, pre, post_processor = vocabulary(folder, config.get("vocab_size"), with_post_processor=True)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(folder, load_merges=True)
    if not special.merges:
        raise _fail("tokenizer.json has no BPE merges", "Download the checkpoint's tokenizer.json again")
    if "ByteLevel" in _step_types(post_processor):
        # llama.cpp's converter (its newer gguf-py than PyPI's) reads a ByteLevel post-processor as
        # "adds neither bos nor eos" and writes both flags false; do the same.
        special.add_special_token.setdefault("bos", False)
        special.add_special_token.setdefault("eos", False)
    special.add_to_gguf(writer, quiet=True)


def _step_types(step: object) -> list[str]:
    if not isinstance(step, dict):
        return []
    inner = step.get("processors") or step.get("pretokenizers") or []
    return [str(step.get("type"))] + [t for s in inner for t in _step_types(s)]


def _find(config: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in config:
            return config[key]
    return None


def add_hyperparameters(writer: GGUFWriter, checkpoint: Checkpoint, file_type: int) -> None:
    """The architecture's keys, as the converter's TextModel.set_gguf_parameters writes them."""
    import gguf

    config = checkpoint.config
    need = {"num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads"}
    missing = sorted(need - config.keys())
    if missing:
        raise MemagentError(f"config.json lacks {', '.join(missing)}", "Download the checkpoint's config.json again")
    writer.add_block_count(config["num_hidden_layers"])
    if (n_ctx := _find(config, "max_position_embeddings", "n_ctx", "n_positions", "max_length")) is not None:
        writer.add_context_length(n_ctx)
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    if (n_kv := _find(config, "num_key_value_heads", "n_kv_heads")) is not None:
        writer.add_head_count_kv(n_kv)
    rope = config.get("rope_parameters", config.get("rope_scaling")) or {}
    rope_type = rope.get("rope_type", rope.get("type"))
    factor = rope.get("factor")
    if rope_type == "linear" and factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(factor)
    elif rope_type == "yarn" and factor is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(factor)
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    elif rope_type not in (None, "default"):
        raise MemagentError(
            f"config.json asks for {rope_type} RoPE scaling, which memagent cannot convert",
            "Remove rope_scaling from config.json to convert at the native context",
        )
    if (theta := rope.get("rope_theta", config.get("rope_theta"))) is not None:
        writer.add_rope_freq_base(theta)
    if (eps := _find(config, "rms_norm_eps", "norm_eps")) is not None:
        writer.add_layer_norm_rms_eps(eps)
    if (n_experts := _find(config, "num_local_experts", "num_experts", "n_routed_experts")) is not None:
        writer.add_expert_count(n_experts)
    if (n_used := _find(config, "num_experts_per_tok", "num_experts_per_token", "top_k_experts")) is not None:
        writer.add_expert_used_count(n_used)
    if (head_dim := config.get("head_dim")) is not None:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_file_type(file_type)
    if checkpoint.architecture in MOE_ARCHITECTURES:
        # Qwen2MoeModel.set_gguf_parameters adds these after TextModel's keys, so after the file type.
        if (n_ff_exp := config.get("moe_intermediate_size")) is not None:
            writer.add_expert_feed_forward_length(n_ff_exp)
        if (n_ff_shexp := config.get("shared_expert_intermediate_size")) is not None:
            writer.add_expert_shared_feed_forward_length(n_ff_shexp)


def add_general(writer: GGUFWriter, checkpoint: Checkpoint) -> None:
    """general.* from the model card and config, through the converter's own Metadata class.

    The parameter counts are the writer's, from the tensors already added to it, as the converter
    counts them: an expert tensor counts once per expert in the size label ("8x…")."""
    import gguf

    total, shared, expert, n_experts = writer.get_total_parameter_count()
    metadata = gguf.Metadata.load(None, checkpoint.folder, None, total)
    if metadata.name is None:
        metadata.name = checkpoint.folder.name
    if metadata.size_label is None and total > 0:
        metadata.size_label = gguf.size_label(total, shared, expert, n_experts)
    writer.add_type(gguf.GGUFType.MODEL)
    metadata.set_gguf_meta_model(writer)


def add_header(writer: GGUFWriter, checkpoint: Checkpoint, file_type: int) -> None:
    """Every key of the GGUF, in the order llama.cpp's converter writes them (so files match to the byte).
    The tensors are added to `writer` first: general.size_label counts them."""
    import gguf

    add_general(writer, checkpoint)
    add_hyperparameters(writer, checkpoint, file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_vocabulary(writer, checkpoint.folder, checkpoint.config)
