"""Published safetensors checkpoints made into GGUF models here, with nothing else installed.

- `checkpoint`: reads and checks a Hugging Face checkpoint folder (config, tokenizer, shards).
- `metadata`: the GGUF header llama.cpp's converter would write (general.*, hyperparameters, vocabulary).
- `writer`: streams the tensors into a GGUF of f32, f16 or bf16 in bounded memory.
- `quantize`: llama.cpp's own quantizer, through llama-cpp-python.

No torch, transformers or llama.cpp checkout is needed: the `gguf` package (llama.cpp's own writer,
tensor-name tables and special-vocabulary reader) and numpy do the work.
"""
