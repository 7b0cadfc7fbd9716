"""`hermetic gateway run | status | pair CODE`: the chat platforms of the profile's config.yaml."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from ..api.replicas import replicated
from ..config.chat import PLATFORMS
from ..config.settings import Settings, load_settings
from ..gateway.records import GatewayLocked, GatewayStore
from ..gateway.status import platform_reports

if TYPE_CHECKING:
    import uvicorn

    from ..gateway import Gateway

app = typer.Typer(
    help=f"The messaging gateway: one agent reached from {', '.join(PLATFORMS)} (config.yaml's gateway:).",
    no_args_is_help=True,
)
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def gateway_settings() -> Settings:
    """The settings, or an exit naming each bad field of config.yaml."""
    try:
        settings = load_settings()
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            err.print(f"[red]config: {escape(where)}: {escape(error['msg'])}[/]")
        raise typer.Exit(2) from None
    if not settings.gateway.platforms:
        err.print(
            "[red]no chat platform is configured[/]: add `gateway: telegram: token: "
            f"${{TELEGRAM_BOT_TOKEN}}` (or `webhook:`) to {settings.home / 'config.yaml'}"
        )
        raise typer.Exit(2)
    return settings


@app.command("run")
def run() -> None:
    """Serve the configured platforms in the foreground (logs on stderr; Ctrl-C stops cleanly)."""
    settings = gateway_settings()
    if not settings.model.name:
        from ..models.router import ModelNotConfigured

        err.print(f"[red]{escape(str(ModelNotConfigured()))}[/]")
        raise typer.Exit(2)
    logging.getLogger("hermetic").setLevel(logging.INFO)
    try:
        asyncio.run(serve_gateway(settings))
    except GatewayLocked as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(3) from None


async def serve_gateway(
    settings: Settings, until: asyncio.Event | None = None, standby: bool = False
) -> None:
    """Run the gateway until SIGINT/SIGTERM (or, when given, until `until` is set), then stop it cleanly.
    `standby` (replicas of `hermetic serve`): while another gateway holds a bot token, wait and take over
    once its lock lapses, instead of GatewayLocked."""
    stop = until or asyncio.Event()
    if until is None:  # before anything starts: a Ctrl-C while starting stops cleanly too
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
    from ..gateway import create_gateway  # the adapters' clients (aiohttp and more): for this command only

    gateway: Gateway = await asyncio.to_thread(create_gateway, settings)
    try:
        while True:
            try:
                await gateway.start()
                break
            except GatewayLocked as exc:
                if not standby:
                    raise
                err.print(f"gateway: standing by ({exc})")
            with contextlib.suppress(TimeoutError):  # the lock's renewal period: a lapse is seen within it
                await asyncio.wait_for(stop.wait(), settings.gateway.lock_ttl / 3)
                return
        err.print(f"gateway: serving {', '.join(gateway.adapters)} for profile {settings.profile}")
        await stop.wait()
        err.print("gateway: stopping")
    finally:
        await gateway.stop()
        await asyncio.to_thread(gateway.agent.close)
        gateway.store.close()


def serve_beside(settings: Settings, config: uvicorn.Config, base: type[uvicorn.Server]) -> None:
    """`hermetic serve` with `gateway.in_serve`: the API and the gateway in one process and event loop;
    Ctrl-C (or SIGTERM) ends both, the gateway cleanly (its turns interrupted, its locks released).
    `base`: uvicorn.Server or a subclass of it (one that opens the console)."""

    class Server(base):  # type: ignore[valid-type,misc]
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own re-raises the signal once it has shut down, which would cut the gateway's
            # stop short; here the signal only asks both to stop.
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    server = Server(config)

    async def both() -> None:
        stop = asyncio.Event()
        standby = replicated(str(settings.database_url))  # replicas: each one's gateway ready to take over
        gateway = asyncio.create_task(serve_gateway(settings, until=stop, standby=standby))
        api = asyncio.create_task(server.serve())
        done, _ = await asyncio.wait({gateway, api}, return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        server.should_exit = True
        await asyncio.gather(gateway, api, return_exceptions=True)
        for task in done:
            task.result()  # a gateway that could not start (GatewayLocked) is said, below

    try:
        asyncio.run(both())
    except GatewayLocked as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(3) from None


@app.command("status")
def status() -> None:
    """Each platform's connection, last message and latest errors."""
    for report in platform_reports(gateway_settings()):
        console.print(f"[bold]{report.platform}[/]: {report.state} since {_when(report.since)}")
        console.print(
            f"  last message {_when(report.last_message_at) if report.last_message_at else 'never'}; "
            f"{report.received} received, {report.answered} answered, {report.waiting} waiting"
        )
        for error in report.errors:
            console.print(f"  [red]{escape(error)}[/]")


@app.command("pair")
def pair(code: Annotated[str, typer.Argument(help="The code the user was given in the chat")]) -> None:
    """Admit the user who was given this pairing code."""
    settings = load_settings()
    store = GatewayStore(str(settings.database_url))
    try:
        admitted = store.redeem(code.strip().upper())
    finally:
        store.close()
    if admitted is None:
        err.print("[red]no such pairing code (or it expired, or was used)[/]")
        raise typer.Exit(2)
    name = f" ({admitted.name})" if admitted.name else ""
    console.print(f"admitted {admitted.platform} user {admitted.user}{escape(name)}")


def _when(timestamp: float | None) -> str:
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S") if timestamp else "-"
