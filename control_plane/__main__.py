"""`python -m control_plane` is the `hermetic` command."""

from .cli import app

app(prog_name="hermetic")
