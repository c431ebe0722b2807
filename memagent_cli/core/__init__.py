"""MemAgent itself: the protocol's exact strings, chunking, the agent loop over an `Engine`, the
scheduler for many loops, typed events, memory diffs, and the run pipeline (`pipeline`) that wires
sources, tokenizer, engine and loop together; `inspection` is a run's plan without a model call."""
