"""The `hermetic` command."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from . import dev_cli, sandbox_cli

app = typer.Typer(help="Hermetic: a self-improving agent whose tools run sealed.", no_args_is_help=True)
app.add_typer(sandbox_app := sandbox_cli.app, name="sandbox")
app.command("demo")(sandbox_cli.demo)
app.add_typer(dev_cli.app, name="dev")
image_app = typer.Typer(help="Sandbox images.", no_args_is_help=True)
app.add_typer(image_app, name="image")


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug details")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@image_app.command("build")
def image_build(
    variant: Annotated[str, typer.Option(help="slim, or browser (with Chromium and Playwright)")] = "slim",
    force: Annotated[bool, typer.Option(help="Rebuild even when cached")] = False,
) -> None:
    """Build the sandbox image offline (debootstrap + docker import), cached by content hash."""
    from images.build import ensure_image

    typer.echo(ensure_image(variant, force=force))


__all__ = ["app", "sandbox_app"]
