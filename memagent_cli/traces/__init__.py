"""Every run recorded: the SQLite store and its migrations, the recorder that saves each step as
it completes, and exports (JSONL, Markdown, HTML)."""
