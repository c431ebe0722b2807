"""memagent: answer questions about documents of any length with MemAgent's bounded memory."""

__version__ = "0.1.0"
