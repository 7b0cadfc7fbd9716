"""`hermetic run`, `chat`, `sessions`, `serve` and `token`: the agent from the terminal."""

from __future__ import annotations

import asyncio
import datetime
import enum
import ipaddress
import signal
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..agent.agent import Agent
from ..agent.commands import run_command
from ..agent.loop import Conversation
from ..config.settings import Settings, load_settings
from ..events import Event, EventAdapter, TurnEnd
from ..scheduler import tool as _schedule_tool  # noqa: F401 (registers the schedule toolset in TOOLS)
from ..tools import TOOLS
from .answers import TerminalAnswers
from .listing_json import AsJson, print_json
from .render import EventPrinter
from .sandbox import BackendOption

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)
EXIT_CODES = {"done": 0, "error": 1, "budget": 3, "interrupted": 130}

ModelOption = Annotated[str | None, typer.Option("--model", "-m", help="litellm model id (overrides config)")]
ApiBaseOption = Annotated[
    str | None,
    typer.Option(
        "--api-base",
        help="URL of the model's server, e.g. http://localhost:11434/v1 for Ollama (overrides config)",
    ),
]
ToolsetsOption = Annotated[
    str | None,
    typer.Option("--toolsets", help=f"Comma-separated, of: {', '.join(sorted(TOOLS.toolsets))}"),
]


def agent_settings(
    model: str | None = None,
    backend: str | None = None,
    toolsets: str | None = None,
    api_base: str | None = None,
    **overrides: Any,
) -> Settings:
    """Settings with the command line's choices on top; exits with the fix when no model is set."""
    chosen = {"name": model, "api_base": api_base}
    if any(chosen.values()):  # merged into the configured model: --api-base alone keeps its name
        overrides["model"] = {key: value for key, value in chosen.items() if value}
    if backend:
        overrides["backend"] = backend
    if toolsets:
        overrides["toolsets"] = toolsets
    settings = load_settings(**overrides)
    if not settings.model.name:
        from ..models.router import ModelNotConfigured

        err.print(f"[red]{escape(str(ModelNotConfigured()))}[/]")
        raise typer.Exit(2)
    return settings


async def drive(conversation: Conversation, text: str, emit: Any) -> TurnEnd:
    """One turn; the first Ctrl-C interrupts it (the session lives on), a second one quits. Questions
    are answered at the terminal; without one, they get no answer."""
    loop = asyncio.get_running_loop()
    presses = 0

    def on_sigint() -> None:
        nonlocal presses
        presses += 1
        if presses > 1:
            raise KeyboardInterrupt
        err.print("\n[yellow]interrupting… (Ctrl-C again to quit)[/]")
        conversation.interrupt()

    answers = TerminalAnswers(conversation, err)

    def emit_and_answer(event: Event) -> None:
        emit(event)
        answers(event)

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        return await conversation.run(text, emit_and_answer)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        answers.close()


def finish(conversation: Conversation, agent: Agent) -> None:
    """End the session; a learning review still running is let finish (the reply is already out)."""
    conversation.close()
    if agent.background.busy:
        err.print("[dim]finishing the background review (memory)…[/]")
    agent.close()


def _json_line(event: Event) -> None:
    print(EventAdapter.dump_json(event).decode(), flush=True)


def run(
    task: Annotated[str, typer.Argument(help="What the agent should do")],
    model: ModelOption = None,
    api_base: ApiBaseOption = None,
    backend: BackendOption = None,
    toolsets: ToolsetsOption = None,
    max_iterations: Annotated[int | None, typer.Option(help="Most model calls for this task")] = None,
    keep_sandbox: Annotated[bool, typer.Option(help="Leave the sandbox running afterwards")] = False,
    json_events: Annotated[bool, typer.Option("--json", help="Print the events as JSON lines")] = False,
) -> None:
    """Run one task to completion, streaming the reply and the tool calls."""
    overrides: dict[str, Any] = {"keep_sandbox": keep_sandbox} if keep_sandbox else {}
    if max_iterations:
        overrides["limits"] = {"max_iterations": max_iterations}
    settings = agent_settings(model, backend, toolsets, api_base, **overrides)
    agent = Agent(settings)
    conversation = agent.new_conversation(title=task[:80])
    err.print(f"[dim]{escape(agent.status().line())}[/]")
    emit = _json_line if json_events else EventPrinter(console)
    try:
        end = asyncio.run(drive(conversation, task, emit))
    finally:
        finish(conversation, agent)
    if not json_events:
        err.print(f"[dim]session {conversation.id}[/]")
    raise typer.Exit(EXIT_CODES[end.reason])


def chat(
    resume: Annotated[str | None, typer.Option("--resume", "-r", help="Continue this session")] = None,
    last: Annotated[bool, typer.Option("--continue", "-c", help="Continue the most recent session")] = False,
    model: ModelOption = None,
    api_base: ApiBaseOption = None,
    backend: BackendOption = None,
    toolsets: ToolsetsOption = None,
) -> None:
    """An interactive conversation; Ctrl-C interrupts a run, Ctrl-D (or /exit) leaves."""
    settings = agent_settings(model, backend, toolsets, api_base)
    agent = Agent(settings)
    if last and not resume:
        recent = agent.store.list_sessions(settings.profile, limit=1)
        resume = recent[0].id if recent else None
    try:
        conversation = agent.resume(resume) if resume else agent.new_conversation(source="chat")
    except KeyError:
        err.print(f"[red]no session {resume} in profile {settings.profile}[/] (hermetic sessions list)")
        raise typer.Exit(2) from None
    err.print(f"[dim]{escape(agent.status().line())}[/]")
    if resume:
        turns = sum(1 for m in conversation.history if m["role"] == "user")
        err.print(f"[dim]resumed session {conversation.id} ({turns} earlier message(s))[/]")
    printer = EventPrinter(console)
    try:
        while True:
            try:
                text = console.input("[bold green]› [/]").strip()
            except (EOFError, KeyboardInterrupt):
                break
            if text in ("/exit", "/quit"):
                break
            command = run_command(agent, conversation, text, source="chat")
            if command is not None:
                console.print(command.text, markup=False, highlight=False)
                conversation = command.conversation or conversation
            elif text:
                asyncio.run(drive(conversation, text, printer))
    finally:
        finish(conversation, agent)
        err.print(f"[dim]session {conversation.id}: hermetic chat --resume {conversation.id}[/]")


# -- sessions ----------------------------------------------------------------------------------

sessions_app = typer.Typer(help="Past sessions: list, show, search, reindex.", no_args_is_help=True)


class SearchModeOption(enum.StrEnum):
    hybrid = "hybrid"
    keyword = "keyword"
    semantic = "semantic"


def _when(timestamp: float | None) -> str:
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else ""


def _store(*, semantic: bool = False, background: bool = True) -> tuple[Settings, Any]:
    from ..store.configured import open_store

    settings = load_settings()
    return settings, open_store(settings, semantic=semantic, background=background)


@sessions_app.command("list")
def sessions_list(limit: Annotated[int, typer.Option(help="How many")] = 20, as_json: AsJson = False) -> None:
    """The latest sessions of this profile."""
    settings, store = _store()
    records = store.list_sessions(settings.profile, limit=limit)
    if as_json:
        print_json(
            {
                "id": r.id,
                "title": r.title,
                "source": r.source,
                "model": r.model,
                "created_at": r.created_at,
                "updated_at": r.updated_at,
                "message_count": r.message_count,
                "prompt_tokens": r.prompt_tokens or 0,
                "completion_tokens": r.completion_tokens or 0,
                "cost": r.cost or 0.0,
            }
            for r in records
        )
        return
    table = Table("id", "last activity", "messages", "tokens", "cost", "title", box=None)
    for record in records:
        tokens = (record.prompt_tokens or 0) + (record.completion_tokens or 0)
        table.add_row(
            record.id,
            _when(record.updated_at),
            str(record.message_count),
            f"{tokens:,}",
            f"${record.cost:.4f}" if record.cost else "",
            escape(record.title or ""),
        )
    console.print(table)


@sessions_app.command("show")
def sessions_show(session_id: str) -> None:
    """A session's messages and tool calls."""
    settings, store = _store()
    record = store.get_session(session_id, settings.profile)
    if record is None:
        err.print(f"[red]no session {session_id} in profile {settings.profile}[/]")
        raise typer.Exit(2)
    console.print(f"[bold]{escape(record.title or record.id)}[/]  [dim]{_when(record.created_at)}[/]")
    for message in store.messages(session_id):
        if message.role == "system":
            continue
        style = {"user": "bold green", "assistant": "bold", "tool": "dim"}.get(message.role, "")
        label = f"{message.role} {message.name}" if message.name else message.role
        if message.content:
            console.print(f"[{style}]{label}:[/] {escape(message.content)}")
        for call in message.tool_calls or []:
            fn = call.get("function", {})
            console.print(
                f"[cyan]▸ {escape(fn.get('name', '?'))} {escape(str(fn.get('arguments', ''))[:300])}[/]"
            )


@sessions_app.command("reindex")
def sessions_reindex() -> None:
    """Embed every message not yet embedded by the configured model, with a progress bar; after a model
    change this re-embeds everything. Safe to stop at any point: a second run resumes."""
    from .reindex import reindex

    settings, store = _store(semantic=True, background=False)
    if store.indexer is None:
        err.print("semantic recall is off (memory.embeddings.model: off): nothing to embed")
        raise typer.Exit(2)
    try:
        reindex(store.indexer, console)
    finally:
        store.close()


@sessions_app.command("search")
def sessions_search(
    query: str,
    limit: Annotated[int, typer.Option(help="Most sessions")] = 10,
    window: Annotated[int, typer.Option(help="Messages shown either side of each match")] = 0,
    mode: Annotated[
        SearchModeOption,
        typer.Option(help="hybrid: words and meaning; keyword: every word; semantic: meaning"),
    ] = SearchModeOption.hybrid,
) -> None:
    """The sessions of this profile best matching the query (as the session_search tool sees them)."""
    from ..store import StoreError

    settings, store = _store(semantic=mode != SearchModeOption.keyword)
    try:
        found = store.recall(settings.profile, query, limit=limit, window=window, edges=1, mode=mode.value)
    except StoreError as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from None
    if not found:
        err.print("no matches")
        raise typer.Exit(1)
    for session in found:
        snippet = escape(session.snippet).replace(">>>", "[bold yellow]").replace("<<<", "[/]")
        console.print(
            f"[cyan]{session.session_id}[/] [dim]{_when(session.session_created_at)}[/] "
            f"[bold]{escape(session.session_title or '')}[/]"
        )
        console.print(f"  [dim]#{session.message_id} {session.role}:[/] {snippet}")
        if session.first:
            opening = " ".join((session.first[0].content or "").split())[:160]
            console.print(f"  [dim]began: {escape(opening)}[/]")
        for message in session.window:
            if message.id != session.message_id:
                text = " ".join((message.content or "").split())[:160]
                console.print(f"  [dim]#{message.id} {message.role}: {escape(text)}[/]")


# -- serve and tokens --------------------------------------------------------------------------

token_app = typer.Typer(help="API bearer tokens, each bound to a profile.", no_args_is_help=True)


@token_app.command("create")
def token_create(name: Annotated[str, typer.Option(help="A label for the token")] = "") -> None:
    """A new token for the current profile (--profile); printed once."""
    from ..store.tokens import TokenStore

    settings = load_settings()
    print(TokenStore(settings.root).create(settings.profile, name))


@token_app.command("list")
def token_list(as_json: AsJson = False) -> None:
    """Every token: its id (what `revoke` takes), profile, creation time and label; never the token."""
    from ..store.tokens import TokenStore

    entries = TokenStore(load_settings().root).list()
    if as_json:
        print_json({key: entry.get(key) for key in ("id", "profile", "created", "name")} for entry in entries)
        return
    for entry in entries:
        console.print(
            f"{entry['id']}  {entry['profile']}  {_when(entry['created'])}  {escape(entry['name'])}"
        )


@token_app.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(help="The id shown by `token list`")]) -> None:
    from ..store.tokens import TokenStore

    if not TokenStore(load_settings().root).revoke(token_id):
        err.print(f"[red]no single token matches {token_id}[/]")
        raise typer.Exit(2)


def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8765)")] = None,
    open_console: Annotated[
        bool, typer.Option("--open", help="Open the web console in a browser once the server listens")
    ] = False,
) -> None:
    """Serve the HTTP API (OpenAPI at /docs) and the web console at /. Creates a first token when
    there is none."""
    from ..store.serve_lock import DatabaseInUse, serving

    settings = load_settings()
    host = host or settings.api.host
    port = port or settings.api.port
    try:
        with serving(str(settings.database_url), f"{host}:{port}"):
            _serve(settings, host, port, open_console)
    except DatabaseInUse as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(3) from None


def _serve(settings: Settings, host: str, port: int, open_console: bool) -> None:
    import uvicorn

    from ..api.app import create_app
    from ..store.tokens import TokenStore

    tokens = TokenStore(settings.root)
    if not tokens.list():
        if not _loopback(host):  # a first token printed to a console is for a local user, not a network
            err.print(f"refusing to listen on {host} with no API token: run `hermetic token create` first")
            raise typer.Exit(2)
        err.print(f"created an API token for profile {settings.profile} (shown once):")
        print(tokens.create(settings.profile, "first"), flush=True)
    address = f"http://{f'[{host}]' if ':' in host else host}:{port}"  # where other replicas reach this one
    config = uvicorn.Config(create_app(settings.root, replica_address=address), host=host, port=port)
    server_class = _opening(config) if open_console else uvicorn.Server
    if settings.gateway.in_serve and settings.gateway.platforms:  # the chat gateway beside the API
        from .gateway import serve_beside

        serve_beside(settings, config, server_class)
    else:
        server_class(config).run()


def _opening(config: Any) -> type[Any]:
    """A uvicorn server that opens the console in the user's browser ($BROWSER or the system's)
    once its socket listens, so the first page load cannot race the bind."""
    import webbrowser

    import uvicorn

    host = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
    url = f"http://{f'[{host}]' if ':' in host else host}:{config.port}/"

    class Opening(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                err.print(f"console: {url}")
                webbrowser.open(url)

    return Opening


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(chat)
    app.command()(serve)
    app.add_typer(sessions_app, name="sessions")
    app.add_typer(token_app, name="token")
