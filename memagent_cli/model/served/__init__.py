"""OpenAI-compatible servers (vLLM, SGLang, llama-server) as an `Engine` (`engine`), the server's own
tokenize endpoints (`tokenizer`), and the HTTP both speak: client, retries, faults (`http`)."""
