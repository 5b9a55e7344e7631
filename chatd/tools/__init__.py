"""Built-in tools: the public API to define them, the registry, and the default set."""

from chatd.tools.base import MediaOutput, Tool, ToolContext, ToolOutput, ToolRegistry

__all__ = ["MediaOutput", "Tool", "ToolContext", "ToolOutput", "ToolRegistry"]
