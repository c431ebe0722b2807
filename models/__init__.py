"""The catalog of known MemAgent GGUF builds (catalog.toml), installed as memagent_cli.models."""
