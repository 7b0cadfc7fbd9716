"""`python -m control_plane` is the `hermetic` command."""

from .cli.main import run

run()
