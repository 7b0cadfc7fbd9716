"""`hermetic dev ...`: tools for developing and testing Hermetic without a hosted model."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer

from ..models.fake_llm import FakeLLM, ScriptError, load_script

app = typer.Typer(help="Tools for developing and testing Hermetic.", no_args_is_help=True)


@app.command("fake-llm")
def fake_llm(
    script: Annotated[Path, typer.Option(help="YAML or JSON list of turns (text, tool_calls, error, delay)")],
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port)")] = 8788,
) -> None:
    """Serve a scripted OpenAI-compatible model: one turn of the script per request, until Ctrl-C."""
    try:
        turns = load_script(script)
        server = FakeLLM(turns, host=host, port=port)
    except ScriptError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    except OSError as exc:
        typer.echo(f"cannot listen on {host}:{port}: {exc}", err=True)
        raise typer.Exit(2) from exc
    server.start()
    typer.echo(f"Serving {len(turns)} scripted turns at {server.url} (Ctrl-C stops). To use it:")
    typer.echo(f"  export HERMETIC_MODEL__NAME=openai/scripted HERMETIC_MODEL__API_BASE={server.url}")
    typer.echo("  export HERMETIC_MODEL__API_KEY=test")
    try:
        threading.Event().wait()  # until Ctrl-C
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    typer.echo(f"Stopped after {len(server.requests)} requests.")
