"""Models: GGUF files (reading, and `convert/` writing them from safetensors), tokenizers, chat
templates, the `Engine` protocol (`engine`) with its llama.cpp (`llama`) and served (`served/`)
implementations, the llama.cpp runtime (`runtime`), model memory sizing (`memory`) and GPU planning (`gpu`)."""

from .runtime import share_cxx_runtime

share_cxx_runtime()  # before any module here imports llama_cpp: see its docstring
