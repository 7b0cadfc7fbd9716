"""`hermetic mcp`: serve the sandboxes and the agent to MCP clients."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from ..settings import load_settings

app = typer.Typer(
    help="MCP: the sandboxes and the agent as tools for other agents and IDEs.", no_args_is_help=True
)
err = Console(stderr=True, highlight=False)


@app.command("serve")
def serve(
    http: Annotated[
        bool, typer.Option(help="Streamable HTTP at /mcp (bearer token) instead of stdio")
    ] = False,
    host: Annotated[str | None, typer.Option(help="HTTP: address to listen on (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP: port (default 8766)")] = None,
) -> None:
    """Serve MCP: over stdio (for Claude Code, Cursor, ...), or streamable HTTP with --http."""
    from ..agent.agent import Agent
    from ..api.tokens import TokenStore
    from ..mcp.server import McpSurface
    from ..mcp.transports import http_app, serve_stdio

    settings = load_settings()
    tokens = TokenStore(settings.root)
    if http and not any(entry["profile"] == settings.profile for entry in tokens.list()):
        err.print(f"no API token for profile {settings.profile}: create one (hermetic token create) first")
        raise typer.Exit(2)
    agent = Agent(settings)
    surface = McpSurface(agent)
    try:
        if http:
            import uvicorn

            host = host or settings.mcp.host
            uvicorn.run(
                http_app(surface, tokens, host), host=host, port=settings.mcp.port if port is None else port
            )
        else:
            asyncio.run(serve_stdio(surface))
    finally:
        agent.close()
