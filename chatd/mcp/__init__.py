"""MCP (Model Context Protocol) servers as tool sources on the worker."""
