"""The `hermetic` command."""

from __future__ import annotations

import gc
import logging
import os
from typing import Annotated

import typer

from ..config.keys import KeyFileError
from ..safety.log_redaction import redact_log_handlers
from . import a2a as a2a_cli
from . import acp as acp_cli
from . import agent as agent_cli
from . import (
    batch,
    cron,
    demo,
    dev,
    docs,
    doctor,
    evals,
    export,
    mcp,
    network,
    sandbox_stats,
    sandbox_watch,
    skill_sources,
)
from . import config as config_cli
from . import gateway as gateway_cli
from . import sandbox as sandbox_cli
from . import setup as setup_cli
from . import skills as skills_cli
from . import snapshots as snapshots_cli

app = typer.Typer(
    help="Hermetic: a self-improving agent whose tools run sealed.",
    epilog="The manual: `hermetic docs` serves it on 127.0.0.1 (its pages are docs/ in the repository).",
    no_args_is_help=True,
)
app.add_typer(sandbox_app := sandbox_cli.app, name="sandbox")
agent_cli.register(app)
network.register(app, sandbox_app)
sandbox_watch.register(sandbox_app)
sandbox_stats.register(sandbox_app)
app.command("demo")(demo.demo)
app.command("doctor")(doctor.doctor)
app.command("docs")(docs.docs)
app.add_typer(dev.app, name="dev")
app.add_typer(skills_cli.app, name="skills")
app.command("setup")(setup_cli.setup)
app.add_typer(config_cli.config_app, name="config")
app.add_typer(config_cli.model_app, name="model")
app.add_typer(config_cli.persona_app, name="persona")
app.add_typer(gateway_cli.app, name="gateway")
skill_sources.register(skills_cli.app)
app.add_typer(mcp.app, name="mcp")
app.command("acp")(acp_cli.acp)
app.add_typer(a2a_cli.app, name="a2a")
app.add_typer(cron.app, name="cron")
app.add_typer(batch.app, name="batch")
app.add_typer(evals.app, name="eval")
agent_cli.sessions_app.command("export")(export.export_sessions)
app.add_typer(snapshots_cli.app, name="snapshot")
image_app = typer.Typer(help="Sandbox images.", no_args_is_help=True)
app.add_typer(image_app, name="image")


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug details")] = False,
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="Use this profile's home (same as HERMETIC_PROFILE)")
    ] = None,
) -> None:
    if profile:
        os.environ["HERMETIC_PROFILE"] = profile  # every command and what it starts sees the same profile
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    redact_log_handlers()


@image_app.command("build")
def image_build(
    variant: Annotated[str, typer.Option(help="slim, or browser (with Chromium and Playwright)")] = "slim",
    force: Annotated[bool, typer.Option(help="Rebuild even when cached")] = False,
) -> None:
    """Build the sandbox image offline (debootstrap + docker import), cached by content hash."""
    from images.build import ensure_image

    typer.echo(ensure_image(variant, force=force))


def run() -> None:
    """The console script: the app, with a broken key file said in one line instead of a traceback."""
    try:
        app(prog_name="hermetic")
    except KeyFileError as exc:
        typer.echo(f"hermetic: {exc}", err=True)
        raise SystemExit(2) from None
    finally:
        # Everything is closed by now; freezing the heap spares the interpreter's final collection
        # of the imported libraries' object graph (some 0.5 s of CPU at every exit, 2-4 s under load,
        # which an editor waiting on `hermetic acp` to exit sees as a hang).
        gc.freeze()


__all__ = ["app", "run", "sandbox_app"]
