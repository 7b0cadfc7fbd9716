"""`hermetic config`, `hermetic model` and `hermetic persona`: settings without opening a file."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..config import editor
from ..config.settings import Settings, load_settings
from ..memory.persona import ensure_soul, load_persona, soul_path
from .listing_json import AsJson, print_json

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)

config_app = typer.Typer(
    help="The profile's config.yaml: show, get, set, unset, edit, path.", no_args_is_help=True
)
model_app = typer.Typer(help="The model the agent uses: list, set, current.", no_args_is_help=True)
persona_app = typer.Typer(help="The persona (SOUL.md in the profile home): show, edit.", no_args_is_help=True)

KeyArg = Annotated[
    str, typer.Argument(help="A dotted settings key, e.g. sandbox.memory or limits.max_iterations")
]


def _settings() -> Settings:
    return load_settings()


def _refuse(exc: Exception) -> typer.Exit:
    err.print(f"[red]{escape(str(exc))}[/]")
    return typer.Exit(2)


@config_app.command("path")
def config_path() -> None:
    """Where this profile's config.yaml is."""
    typer.echo(editor.config_path(_settings()))


@config_app.command("show")
def config_show(
    effective: Annotated[
        bool, typer.Option(help="Every setting in force (env > file > default), as JSON")
    ] = False,
) -> None:
    """The file as written (comments kept), or with --effective every setting in force (keys masked)."""
    settings = _settings()
    if effective:
        typer.echo(settings.model_dump_json(indent=2))
        return
    path = editor.config_path(settings)
    if not path.exists():
        err.print(
            f"[dim]{path} does not exist yet: defaults apply (hermetic setup, or hermetic config set)[/]"
        )
        return
    typer.echo(path.read_text(), nl=False)


@config_app.command("get")
def config_get(
    key: KeyArg,
    describe: Annotated[bool, typer.Option(help="Also say what the setting is and what it takes")] = False,
) -> None:
    """The value in force for KEY (environment over config.yaml over default)."""
    try:
        value = editor.effective(_settings(), key)
        doc = editor.field(key).describe()
    except editor.ConfigError as exc:
        raise _refuse(exc) from None
    typer.echo(json.dumps(value) if not isinstance(value, str) else value)
    if describe:
        err.print(f"[dim]{escape(doc)}[/]")


@config_app.command("set")
def config_set(
    key: KeyArg, value: Annotated[str, typer.Argument(help="The value, as YAML: 4g, true, [a, b]")]
) -> None:
    """Set KEY in config.yaml, checked against the settings model; the rest of the file is kept as is."""
    settings = _settings()
    path = editor.config_path(settings)
    try:
        stored = editor.set_value(path, key, value)
    except editor.ConfigError as exc:
        raise _refuse(exc) from None
    console.print(f"{escape(key)} = {escape(json.dumps(stored))} [dim]({path})[/]")
    _warn_if_env_overrides(key)


@config_app.command("unset")
def config_unset(key: KeyArg) -> None:
    """Remove KEY from config.yaml (the environment or the default applies again)."""
    path = editor.config_path(_settings())
    try:
        removed = editor.unset_value(path, key)
    except editor.ConfigError as exc:
        raise _refuse(exc) from None
    console.print(f"{escape(key)} {'removed' if removed else 'was not set'} [dim]({path})[/]")


@config_app.command("edit")
def config_edit() -> None:
    """Open config.yaml in $EDITOR, then check that it still loads."""
    settings = _settings()
    path = editor.config_path(settings)
    if not path.exists():
        path.write_text("# Hermetic settings: see `hermetic config get KEY --describe`\n")
    _edit(path)
    try:
        load_settings(settings.profile)
    except Exception as exc:  # a hand edit can break the file in any way: say how, keep the edit
        err.print(f"[red]{path} does not load now:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None
    console.print(f"[green]{path} loads[/]")


@model_app.command("current")
def model_current() -> None:
    """The primary model (and its server, for a local one)."""
    model = _settings().model
    if not model.name:
        raise _refuse(RuntimeError("no model is set: hermetic model set NAME (or hermetic setup)"))
    typer.echo(model.name + (f" at {model.api_base}" if model.api_base else ""))


@model_app.command("list")
def model_list(as_json: AsJson = False) -> None:
    """The configured models in the order they are tried: the primary, then the fallbacks."""
    model = _settings().model
    if as_json:  # never a key: the name, the server and the role of each
        print_json(
            {"name": e.name, "api_base": e.api_base, "role": "primary" if i == 0 else f"fallback {i}"}
            for i, e in enumerate(model.chain)
        )
        return
    table = Table("", "model", "server", "role")
    for position, endpoint in enumerate(model.chain):
        table.add_row(
            "*" if position == 0 else "",
            endpoint.name,
            endpoint.api_base or "",
            "primary" if position == 0 else f"fallback {position}",
        )
    if not model.chain:
        err.print("[dim]no model is configured: hermetic model set NAME[/]")
        return
    console.print(table)


@model_app.command("set")
def model_set(
    name: Annotated[
        str, typer.Argument(help="litellm model id, e.g. anthropic/claude-sonnet-4-5 or openai/qwen3")
    ],
    api_base: Annotated[
        str | None, typer.Option(help="Server URL for a local OpenAI-compatible model")
    ] = None,
) -> None:
    """Make NAME the primary model (written to config.yaml; a fallback of that name moves up)."""
    settings = _settings()
    path = editor.config_path(settings)
    try:
        switch_model(path, settings, name, api_base)
    except editor.ConfigError as exc:
        raise _refuse(exc) from None
    console.print(
        f"model: {escape(name)}" + (f" at {escape(api_base)}" if api_base else "") + f" [dim]({path})[/]"
    )
    _warn_if_env_overrides("model.name")


def switch_model(path: Path, settings: Settings, name: str, api_base: str | None) -> None:
    """Write NAME as the primary; a configured fallback's server comes along unless one is given."""
    fallback = next((f for f in settings.model.fallbacks if f.name == name), None)
    base = api_base or (fallback.api_base if fallback else None)
    editor.set_value(path, "model.name", name)
    if base:
        editor.set_value(path, "model.api_base", base)
    elif name != settings.model.name:
        editor.unset_value(path, "model.api_base")  # the old model's server is not the new one's


@persona_app.command("show")
def persona_show() -> None:
    """The persona as the agent gets it (withheld lines replaced), and where the file is."""
    home = _settings().home
    persona = load_persona(home)
    if persona is None:
        err.print(f"[dim]no persona: {soul_path(home)} is missing or empty (hermetic persona edit)[/]")
        return
    for problem in persona.problems(soul_path(home)):
        err.print(f"[yellow]{escape(problem)}[/]")
    typer.echo(persona.text)


@persona_app.command("edit")
def persona_edit() -> None:
    """Open SOUL.md in $EDITOR (created from the default first)."""
    path = ensure_soul(_settings().home)
    _edit(path)
    persona = load_persona(path.parent)
    for problem in persona.problems(path) if persona else []:
        err.print(f"[yellow]{escape(problem)}[/]")


def _edit(path: Path) -> None:
    program = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        subprocess.run([*shlex.split(program), str(path)], check=False)
    except FileNotFoundError:
        raise _refuse(
            RuntimeError(f"editor {program!r} not found: set EDITOR, or edit {path} yourself")
        ) from None


def _warn_if_env_overrides(key: str) -> None:
    variable = "HERMETIC_" + key.upper().replace(".", "__")
    if variable in os.environ:
        err.print(f"[yellow]{variable} is set in the environment and wins over config.yaml[/]")
