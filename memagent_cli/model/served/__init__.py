"""OpenAI-compatible servers (vLLM, SGLang, llama-server) as an `Engine` (`engine`, with the HTTP
client and its retries), and the server's own tokenize endpoints (`tokenizer`)."""
