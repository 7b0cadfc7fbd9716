"""`hermetic docs`: the documentation site of this checkout, built with MkDocs when its sources changed,
served on loopback with the standard library's HTTP server (the site needs nothing from the network)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..config.settings import load_settings

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "mkdocs.yml"
STAMP = ".hermetic-sources"  # in the built site: the newest source time it was built from
SOURCES = ("docs", "control_plane", "backends")  # the pages, and the code the references come from


def docs(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port)")] = 8000,
    site: Annotated[
        Path | None, typer.Option(help="Where the built site goes (default: ROOT/docs-site)")
    ] = None,
    serve: Annotated[bool, typer.Option(help="Serve the site; --no-serve builds it and prints where")] = True,
    strict: Annotated[bool, typer.Option(help="Fail on a broken link or a missing page")] = False,
) -> None:
    """Build (when the sources changed) and serve this checkout's documentation on loopback."""
    if not CONFIG.is_file():
        typer.echo("this install has no documentation sources: read docs/ in Hermetic's repository", err=True)
        raise typer.Exit(1)
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        typer.echo(
            f"the documentation is Markdown in {REPO / 'docs'}; to build the site: pip install -e '.[dev]'"
        )
        raise typer.Exit(1 if serve else 0)
    site = (site or load_settings().root / "docs-site").resolve()
    if _stale(site) or strict:
        build(site, strict)
    if not serve:
        typer.echo(site)
        return
    handler = functools.partial(_Quiet, directory=str(site))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        typer.echo(
            f"cannot listen on 127.0.0.1:{port} ({exc.strerror}): try --port N (0: any free port)", err=True
        )
        raise typer.Exit(1) from None
    with server:
        typer.echo(f"http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C stops)")
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()


def build(site: Path, strict: bool = False) -> None:
    """`mkdocs build` of this checkout into `site`; raises typer.Exit with MkDocs' own message on failure."""
    newest = _newest()
    command = [sys.executable, "-m", "mkdocs", "build", "-f", str(CONFIG), "-d", str(site)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material 9.7+ prints an end-of-life notice
    done = subprocess.run(
        [*command, *(["--strict"] if strict else [])], capture_output=True, text=True, env=env
    )
    if done.returncode:
        typer.echo(done.stdout + done.stderr, err=True)
        raise typer.Exit(done.returncode)
    (site / STAMP).write_text(repr(newest))


def _newest() -> float:
    found = (p for d in SOURCES for p in (REPO / d).rglob("*") if "__pycache__" not in p.parts)
    paths = [CONFIG, *(p for p in found if p.is_file())]
    return max(p.stat().st_mtime for p in paths)


def _stale(site: Path) -> bool:
    try:
        return float((site / STAMP).read_text()) < _newest()
    except (OSError, ValueError):
        return True


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass
