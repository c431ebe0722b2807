"""`memagent mcp`: memagent as a Model Context Protocol server, for hosts such as Claude Desktop,
Claude Code, VS Code and Cursor (docs/MCP.md).

The layer sits between the CLI (which parses the command's options into `ServerSettings`) and
the core it runs: settings.py holds what a server is started with and the bounds of one call,
guard.py what a call may read, runs.py the one loaded model and the runs on it, excerpt.py the
passage of the document each piece of evidence cites, and server.py the tools, resource and
transports, built on the official MCP SDK (imported only when a server starts).
"""
