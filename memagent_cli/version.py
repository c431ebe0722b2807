"""The version memagent reports (`memagent --version`, traces, answer keys, the MCP server): on the
ground floor, so that any layer reads it without reaching up to the package's facade."""

__version__ = "0.1.0"
