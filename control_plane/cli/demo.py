"""`hermetic demo`: the agent at work with no model service, by replaying a recorded session.

The model's turns come from `demo_session.yaml` through the scripted model server (real HTTP, real
litellm); every tool call really runs in a sandbox, in the separate `demo` profile.
"""

from __future__ import annotations

import asyncio
import shutil
from importlib import resources
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.panel import Panel

from ..agent.agent import Agent
from ..config.settings import load_settings
from ..events import Event, ToolEnd
from ..models.fake_llm import FakeLLM
from .agent import EXIT_CODES, BackendOption, drive
from .render import EventPrinter

console = Console(highlight=False)
PROFILE = "demo"
NEXT = """[bold]Next:[/] look at what was recorded, then give the agent a real model:

  hermetic --profile demo sessions show {session}
  export ANTHROPIC_API_KEY=...     # or OPENAI_API_KEY, ... (any litellm provider)
  hermetic run -m anthropic/claude-sonnet-4-5 "find the largest file under /usr/share and explain it"
  # a local OpenAI-compatible server (Ollama, vLLM):
  hermetic run -m openai/qwen3 --api-base http://localhost:11434/v1 "..." """


def demo(
    backend: BackendOption = None,
    quiet: Annotated[bool, typer.Option(help="Only the summary")] = False,
) -> None:
    """Watch the agent write a program in a sandbox, hit an error, fix it and report: a recorded
    model session replayed offline; the tool calls run for real."""
    recorded = yaml.safe_load(resources.files(__package__).joinpath("demo_session.yaml").read_text())
    console.print(
        Panel(
            "[bold]REPLAY[/]: the model's turns are a recorded session served by the scripted model "
            "server (no model service is used). Every tool call below really runs in a sealed sandbox.",
            border_style="yellow",
        )
    )
    ends: list[ToolEnd] = []
    printer = EventPrinter(console, show_user=True)

    def show(event: Event) -> None:
        if isinstance(event, ToolEnd):
            ends.append(event)
        if not quiet:
            printer(event)

    with FakeLLM(recorded["turns"]) as server:
        overrides = {"backend": backend} if backend else {}
        settings = load_settings(
            PROFILE,
            model={"name": "openai/hermetic-replay", "api_base": server.url, "api_key": "replay"},
            **overrides,
        )
        for name in ("MEMORY.md", "USER.md"):  # each demo starts from an empty memory and library
            (settings.home / name).unlink(missing_ok=True)
        shutil.rmtree(settings.home / "skills", ignore_errors=True)
        agent = Agent(settings)
        conversation = agent.new_conversation(title="demo: primes below 50", source="demo")
        try:
            end = asyncio.run(drive(conversation, recorded["task"], show))
            conversation.close()
            skills = [
                f"  {s.name} v{s.version} [{s.status}]: {s.description}" for s in agent.skills.list_skills()
            ]
            console.print("[dim]the learning loop reviews the turn in the background…[/]")
        finally:
            agent.close()  # lets the review finish
    learned = agent.memory.read("memory").message
    runs = [e for e in ends if e.name == "terminal"]
    if end.reason != "done" or [e.ok for e in runs] != [False, True]:
        console.print(
            "[red]the sandbox did not behave as the recording expects (first run fails, the fixed "
            "one succeeds); see the tool results above[/]"
        )
        raise typer.Exit(EXIT_CODES[end.reason] or 1)
    backend_name = agent.sandboxes.backend.name
    console.print(
        f"[green]✓[/] replay finished on the [bold]{backend_name}[/] backend: the first run failed "
        f"(exit {runs[0].exit_code}), the fix worked, {len(ends)} tool calls in session {conversation.id}"
    )
    console.print(f"[bold]What the agent learned[/] (the background review wrote MEMORY.md):\n{learned}")
    console.print(
        "[bold]Its skills[/] (verified by the gate in a throwaway sandbox; "
        "hermetic --profile demo skills list):\n" + ("\n".join(skills) or "  none")
    )
    console.print(NEXT.format(session=conversation.id))
