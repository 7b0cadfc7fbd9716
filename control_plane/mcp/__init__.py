"""MCP both ways: `hermetic mcp serve` offers the sandboxes and the agent to MCP clients (server.py)."""
