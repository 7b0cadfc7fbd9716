"""Built-in tools. Importing this package registers every tool module into TOOLS."""

from . import browser, clarify, delegate, files, memory, network, session_search, skills, terminal, todo
from .registry import TOOLS, Registry, Tool, ToolContext, ToolResult, invoke, tool

__all__ = [
    "TOOLS",
    "Registry",
    "Tool",
    "ToolContext",
    "ToolResult",
    "browser",
    "clarify",
    "delegate",
    "files",
    "invoke",
    "memory",
    "network",
    "session_search",
    "skills",
    "terminal",
    "todo",
    "tool",
]
