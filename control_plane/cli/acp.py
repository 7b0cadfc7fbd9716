"""`hermetic acp`: the agent for editors (Zed, JetBrains, Neovim) over the Agent Client Protocol."""

from __future__ import annotations

import asyncio

import typer

from ..config.settings import load_settings


def acp() -> None:
    """Serve the Agent Client Protocol over stdio, for an editor to start (see docs/protocols-acp-a2a.md)."""
    from ..acp.server import HermeticAcp
    from ..acp.stdio import serve_stdio
    from ..agent.agent import Agent

    agent = Agent(load_settings())
    try:
        asyncio.run(serve_stdio(HermeticAcp(agent)))
    except ValueError as exc:  # asyncio's pipe transports refuse a file or a terminal
        typer.echo(f"hermetic acp: stdin and stdout must be pipes (an editor starts it): {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        agent.close()
