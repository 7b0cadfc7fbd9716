"""The `hermetic` command (typer + rich): a surface that turns commands into calls on the core."""
