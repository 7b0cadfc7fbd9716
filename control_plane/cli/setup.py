"""`hermetic setup`: the first run. Choose a model and check it with one real request, store its key in
the profile's .env (0600), choose a backend from what this machine has, check the sandbox image, and
write config.yaml. Re-runnable: what is configured is the default of every question, and config.yaml is
edited key by key (comments and other settings kept), never replaced.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.prompt import Confirm, Prompt

from backends import BackendUnavailable, create_backend

from ..config import editor
from ..config.keys import read_env_file, write_key
from ..config.settings import ModelSettings, Settings, load_settings
from ..memory.persona import ensure_soul
from ..models.router import ModelError, Router

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


@dataclass(frozen=True)
class Provider:
    model: str
    """The default model id (litellm)."""
    key_variable: str | None
    """Where litellm looks for the key; None: a local server, whose key (if any) is the model's own."""


PROVIDERS = {
    "anthropic": Provider("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    "openai": Provider("openai/gpt-4.1", "OPENAI_API_KEY"),
    "gemini": Provider("gemini/gemini-2.5-pro", "GEMINI_API_KEY"),
    "openrouter": Provider("openrouter/anthropic/claude-sonnet-4.5", "OPENROUTER_API_KEY"),
    "local": Provider("openai/qwen3", None),
}
LOCAL_KEY = "HERMETIC_MODEL__API_KEY"
"""A local server's key (most need none) goes in the .env under the settings' own variable."""


def setup(
    non_interactive: Annotated[
        bool, typer.Option("--non-interactive", help="Take every answer from the options and the environment")
    ] = False,
    provider: Annotated[str | None, typer.Option(help=f"One of {', '.join(PROVIDERS)}")] = None,
    model: Annotated[str | None, typer.Option(help="litellm model id (default: the provider's)")] = None,
    api_base: Annotated[str | None, typer.Option(help="URL of a local OpenAI-compatible server")] = None,
    api_key: Annotated[
        str | None,
        typer.Option(help="The key (else the provider's variable in the environment)", show_default=False),
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="local, docker, ssh or modal (default: detected)")
    ] = None,
    skip_check: Annotated[bool, typer.Option(help="Do not send the test request")] = False,
    skip_image: Annotated[bool, typer.Option(help="Do not build or check the sandbox image")] = False,
) -> None:
    """Set up this profile: model and key (checked), backend, sandbox image, config.yaml and .env."""
    settings = load_settings()
    ask = not non_interactive
    console.print(f"[bold]Hermetic setup[/] for profile [cyan]{settings.profile}[/] in {settings.home}")

    name = _choose_provider(settings, provider, api_base, ask)
    chosen = PROVIDERS[name]
    model = model or _ask(ask, "Model (litellm id)", settings.model.name or chosen.model)
    if name == "local":
        api_base = api_base or _ask(ask, "Server URL", settings.model.api_base or "http://127.0.0.1:11434/v1")
    variable = chosen.key_variable or LOCAL_KEY
    key = _choose_key(settings, variable, api_key, ask, required=chosen.key_variable is not None)
    if not skip_check:
        _check_model(model, api_base, key, ask)

    backend = backend or _choose_backend(settings, ask)
    if backend == "docker" and not skip_image:
        _check_image()
    ssh = _ask_ssh(settings) if backend == "ssh" and settings.ssh is None and ask else {}

    path = editor.config_path(settings)
    try:
        editor.set_value(path, "model.name", model)
        if api_base:
            editor.set_value(path, "model.api_base", api_base)
        editor.set_value(path, "backend", backend)
        if ssh:  # one value: host and user are only valid together
            editor.set_value(path, "ssh", json.dumps(ssh))
    except editor.ConfigError as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from None
    if key and read_env_file(settings.home).get(variable) != key:
        env_file = write_key(settings.home, variable, key)
        console.print(f"key: {variable} in {env_file} (mode 600)")
    soul = ensure_soul(settings.home)
    console.print(f"wrote {path}; persona in {soul} (hermetic persona edit)")
    console.print("[green]ready:[/] hermetic chat")


def _ask(ask: bool, question: str, default: str) -> str:
    return Prompt.ask(question, default=default, console=console) if ask else default


def _choose_provider(settings: Settings, given: str | None, api_base: str | None, ask: bool) -> str:
    current = settings.model.name or ""
    guess = (
        "local"
        if (api_base or settings.model.api_base)
        else next((name for name, p in PROVIDERS.items() if current.startswith(name + "/")), "anthropic")
    )
    if given is not None:
        if given not in PROVIDERS:
            err.print(f"[red]unknown provider {given!r}: one of {', '.join(PROVIDERS)}[/]")
            raise typer.Exit(2)
        return given
    if not ask:
        return guess
    return Prompt.ask("Provider", choices=list(PROVIDERS), default=guess, console=console)


def _choose_key(
    settings: Settings, variable: str, given: str | None, ask: bool, *, required: bool
) -> str | None:
    existing = os.environ.get(variable) or read_env_file(settings.home).get(variable)
    if given:
        return given
    if not ask:
        if required and not existing:
            err.print(f"[red]no key: pass --api-key or set {variable}[/]")
            raise typer.Exit(2)
        return existing
    hint = " (Enter keeps the one set)" if existing else (" (Enter for none)" if not required else "")
    while True:
        entered = Prompt.ask(
            f"{variable}{hint}", password=True, default="", show_default=False, console=console
        )
        if entered or existing or not required:
            return entered or existing
        err.print("[yellow]a key is needed for this provider[/]")


def _check_model(model: str, api_base: str | None, key: str | None, ask: bool) -> None:
    """One real request; a failure shows the provider's message, then (interactively) a choice."""
    console.print(f"checking {escape(model)} with one request…")
    check = ModelSettings(name=model, api_base=api_base, api_key=key, retries=0, timeout=30, max_tokens=8)
    try:
        asyncio.run(
            Router(check).complete([{"role": "user", "content": "Reply with the word OK."}], stream=False)
        )
    except ModelError as exc:
        err.print(f"[red]the model did not answer:[/] {escape(str(exc))}")
        if not ask or not Confirm.ask("Save these settings anyway?", default=False, console=console):
            raise typer.Exit(1) from None
        return
    console.print("[green]the model answered[/]")


def _choose_backend(settings: Settings, ask: bool) -> str:
    found = []
    try:
        create_backend("docker")
        found.append("docker")
    except BackendUnavailable:
        pass
    if shutil.which("bwrap"):
        found.append("local")
    if settings.ssh is not None:
        found.append("ssh")
    console.print("found: " + (", ".join(found) or "no dockerd, no bubblewrap"))
    choices = [*found, *(name for name in ("docker", "local", "ssh", "modal") if name not in found)]
    default = settings.backend or (found[0] if found else "local")
    if not ask:
        return default
    return Prompt.ask("Sandbox backend", choices=choices, default=default, console=console)


def _ask_ssh(settings: Settings) -> dict[str, str]:
    """Where the ssh backend connects (its other settings keep their defaults: hermetic config set ssh.*)."""
    answers = {
        "host": Prompt.ask("SSH host", console=console),
        "user": Prompt.ask("SSH user", default=os.environ.get("USER", "root"), console=console),
    }
    key_file = Prompt.ask("Private key file (Enter: the ssh-agent's keys)", default="", console=console)
    return answers | ({"key_file": key_file} if key_file else {})


def _check_image() -> None:
    from images.build import ImageBuildError, ensure_image
    from images.progress import progress_bar

    console.print("sandbox image: checking (the first build takes a few minutes)")
    with progress_bar(console) as report:  # stages, packages, bytes imported; nothing when it exists
        try:
            tag = ensure_image("slim", report=report)
        except ImageBuildError as exc:
            err.print(f"[red]the sandbox image could not be built:[/] {escape(str(exc))}")
            raise typer.Exit(1) from None
    console.print(f"sandbox image: {tag}")
