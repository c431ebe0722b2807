"""`memagent mcp`: memagent as a Model Context Protocol server, for hosts such as Claude Desktop,
Claude Code, VS Code and Cursor (docs/MCP.md).

The layer sits between the CLI (which parses the command's options into `ServerSettings`) and
the run layer (memagent_cli/runs: the one loaded model, what a call may read): server_settings.py
holds what a server is started with and the bounds of one call, calls.py a call's runs on the
engine, tools.py what each tool does, results.py what ask and resume return, excerpt.py the passage
of the document each piece of evidence cites, texts.py what the host's model reads about the
tools, and server.py the tools, resource and transports, built on the official MCP SDK (imported
only when a server starts).
"""
