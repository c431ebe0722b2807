"""One variant of what preceded the SIGSEGV seen in llama_model_load_from_file on the CUDA build
(session 5): each loads the model with every layer on the GPU after a different preparation, and
prints OK when it survives. `python3 crash.py VARIANT MODEL`."""

import faulthandler
import sys

faulthandler.enable()
variant, model = sys.argv[1], sys.argv[2]

from memagent_cli.model.gguf import read_gguf  # noqa: E402
from memagent_cli.model.tokenizer import load_tokenizer  # noqa: E402

info = read_gguf(model)
tok = load_tokenizer(info)
if variant in ("encode_then_llama", "encode_then_engine"):
    print(len(tok.encode("The quick brown fox jumps over the lazy dog. " * 200)), "tokens", flush=True)
if variant == "encode_in_thread_while_engine":  # what `ask` does: the ingest thread tokenizes during the load
    import threading

    def spin() -> None:
        for _ in range(200):
            tok.encode("The quick brown fox jumps over the lazy dog. " * 200)

    threading.Thread(target=spin, daemon=True).start()
if variant.endswith("_llama"):
    import llama_cpp

    llama_cpp.Llama(model_path=model, n_gpu_layers=-1, n_ctx=8192, verbose=False)
else:
    from memagent_cli.model.chat_template import ChatFormat
    from memagent_cli.model.llama import EmbeddedOptions, LlamaEngine

    LlamaEngine(info, tok, ChatFormat.from_gguf(info), n_ctx=8192, options=EmbeddedOptions(gpu_layers=-1))
print("OK", variant, flush=True)
