"""The run layer, under every front end (the CLI, the MCP server, the page): what a run is made with,
planning it against the trace store (its answer key; reused, continued or read; resumed), its
recorder, a conversation's turn, one loaded model serving runs in threads; and a watched folder's
state (folder.py) and what its paths hold (finding.py)."""
