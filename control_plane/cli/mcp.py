"""`hermetic mcp`: serve the sandboxes and the agent to MCP clients."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from ..config.settings import Settings, load_settings
from ..config.surfaces import MCPServerConfig
from . import mcp_npm
from .listing_json import AsJson, print_json

app = typer.Typer(
    help="MCP: the sandboxes and the agent as tools for other agents and IDEs.", no_args_is_help=True
)
err = Console(stderr=True, highlight=False)


@app.command("serve")
def serve(
    http: Annotated[
        bool, typer.Option(help="Streamable HTTP at /mcp (bearer token) instead of stdio")
    ] = False,
    host: Annotated[str | None, typer.Option(help="HTTP: address to listen on (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP: port (default 8766)")] = None,
) -> None:
    """Serve MCP: over stdio (for Claude Code, Cursor, ...), or streamable HTTP with --http."""
    from ..agent.agent import Agent
    from ..mcp.server import McpSurface
    from ..mcp.transports import http_app, serve_stdio
    from ..store.tokens import TokenStore

    settings = load_settings()
    tokens = TokenStore(settings.root)
    if http and not any(entry["profile"] == settings.profile for entry in tokens.list()):
        err.print(f"no API token for profile {settings.profile}: create one (hermetic token create) first")
        raise typer.Exit(2)
    agent = Agent(settings)
    surface = McpSurface(agent)
    try:
        if http:
            import uvicorn

            host = host or settings.mcp.host
            uvicorn.run(
                http_app(surface, tokens, host), host=host, port=settings.mcp.port if port is None else port
            )
        else:
            asyncio.run(serve_stdio(surface))
    finally:
        agent.close()


# -- the MCP servers the agent uses (mcp_servers in the profile's config.yaml) -----------------


def _config_file() -> Path:
    return load_settings().home / "config.yaml"


def _read_config() -> dict[str, Any]:
    path = _config_file()
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    return data if isinstance(data, dict) else {}


def _write_config(data: dict[str, Any]) -> None:
    path = _config_file()
    tmp = path.with_name(".config.yaml.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    os.replace(tmp, path)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    found = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{what} takes NAME=VALUE, not {item!r}")
        found[key] = value
    return found


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The server's name: its tools become mcp_NAME_TOOL")],
    command: Annotated[str | None, typer.Option(help="stdio: the program to run (in a sandbox)")] = None,
    arg: Annotated[list[str] | None, typer.Option(help="stdio: an argument (repeat for more)")] = None,
    url: Annotated[str | None, typer.Option(help="A streamable HTTP server's URL instead")] = None,
    header: Annotated[list[str] | None, typer.Option(help="HTTP: NAME=VALUE sent with each request")] = None,
    env: Annotated[list[str] | None, typer.Option(help="NAME=VALUE the server gets")] = None,
    env_allow: Annotated[
        list[str] | None, typer.Option(help="A variable of this shell passed by name")
    ] = None,
    include: Annotated[list[str] | None, typer.Option(help="Only this tool (repeat for more)")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Not this tool")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per call")] = 60.0,
    host: Annotated[bool, typer.Option(help="Run on this machine, outside any sandbox")] = False,
    mount: Annotated[
        list[str] | None, typer.Option(help="SOURCE:TARGET mounted read-only in its sandbox")
    ] = None,
    pip: Annotated[
        str | None, typer.Option(help="Install this PyPI package for it (run as python3 -m MODULE)")
    ] = None,
    npm: Annotated[
        str | None,
        typer.Option(
            help="Install this npm package for it (run with node, in the hermetic-sandbox:node image)"
        ),
    ] = None,
) -> None:
    """Add (or replace) an MCP server the agent uses. With --pip or --npm, the package is installed into the
    profile home and mounted read-only into the server's sandbox, which has no network."""
    if pip and npm:
        raise typer.BadParameter("--pip or --npm, not both")
    entry: dict[str, Any] = {"command": command, "args": list(arg or []), "url": url}
    entry["headers"] = _pairs(header or [], "--header")
    entry["env"] = _pairs(env or [], "--env")
    entry |= {
        "env_allow": list(env_allow or []),
        "include": list(include or []),
        "exclude": list(exclude or []),
    }
    entry |= {"timeout": timeout, "host": host, "mounts": []}
    for item in mount or []:
        source, sep, target = item.partition(":")
        if not sep:
            raise typer.BadParameter(f"--mount takes SOURCE:TARGET, not {item!r}")
        entry["mounts"].append({"source": os.path.abspath(source), "target": target})
    if pip:
        installed = load_settings().home / "mcp" / name
        err.print(f"installing {pip} into {installed} ...")
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--upgrade", "--target", str(installed), pip],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            err.print(f"[red]pip could not install {pip}:[/red] {done.stderr[-2000:]}")
            raise typer.Exit(1)
        inside = f"/opt/mcp/{name}"
        entry["mounts"].append({"source": str(installed), "target": inside})
        entry["env"].setdefault("PYTHONPATH", inside if not host else str(installed))
        if command is None:
            entry["command"], entry["args"] = (
                "python3",
                ["-m", pip.split("[")[0].replace("-", "_"), *entry["args"]],
            )
    if npm:
        _add_npm(entry, name, npm, command is None, host)
    try:
        checked = Settings(mcp_servers={name: entry}).mcp_servers[name]
    except ValidationError as exc:
        err.print(f"[red]not a valid MCP server:[/red] {exc.errors()[0]['msg']}")
        raise typer.Exit(2) from None
    data = _read_config()
    data.setdefault("mcp_servers", {})[name] = checked.model_dump(exclude_defaults=True)
    _write_config(data)
    if host:
        err.print("[yellow]warning:[/yellow] this server runs on the host, outside any sandbox")
    err.print(f"added MCP server {name}; check it with: hermetic mcp test {name}")


def _add_npm(entry: dict[str, Any], name: str, spec: str, set_command: bool, host: bool) -> None:
    installed = load_settings().home / "mcp" / name
    err.print(f"installing {spec} into {installed} ...")
    try:
        program = mcp_npm.install(spec, installed)
    except mcp_npm.NpmInstallError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None
    inside = f"{mcp_npm.MOUNT_ROOT}/{name}"
    entry["mounts"].append({"source": str(installed), "target": inside})
    if set_command:
        entry["command"], entry["args"] = (
            "node",
            [f"{installed if host else inside}/{program}", *entry["args"]],
        )
    if not host:
        entry["image"] = mcp_npm.NODE_IMAGE


@app.command("remove")
def remove(name: str) -> None:
    """Remove an MCP server (an install made by --pip or --npm stays in the profile home)."""
    data = _read_config()
    if name not in (data.get("mcp_servers") or {}):
        err.print(f"no MCP server {name}")
        raise typer.Exit(1)
    del data["mcp_servers"][name]
    _write_config(data)
    err.print(f"removed MCP server {name}")


@app.command("list")
def list_servers(as_json: AsJson = False) -> None:
    """The MCP servers the agent uses."""
    servers = load_settings().mcp_servers
    if as_json:  # the names of env variables and headers, never their values (they hold secrets)
        print_json(
            {
                "name": name,
                "runs": _runs(config),
                **config.model_dump(mode="json", exclude={"env", "headers"}),
                "env": sorted(config.env),
                "headers": sorted(config.headers),
            }
            for name, config in servers.items()
        )
        return
    if not servers:
        err.print("no MCP servers (add one: hermetic mcp add NAME --command ... | --url ...)")
        return
    table = Table("name", "runs", "what", "tools")
    for name, config in servers.items():
        runs = _runs(config)
        what = config.url or " ".join([config.command or "", *config.args])
        tools = (", ".join(config.include) or "all") + (
            f" except {', '.join(config.exclude)}" if config.exclude else ""
        )
        table.add_row(name, runs, what, tools)
    Console().print(table)


def _runs(config: MCPServerConfig) -> str:
    return "http" if config.url else "host" if config.host else "sandbox"


@app.command("test")
def test(name: str) -> None:
    """Start the server as the agent would and list what it offers (tools, resources, prompts)."""
    from ..sandbox_manager import SandboxManager
    from ..tools.mcp_client import McpServers, tool_name

    settings = load_settings()
    if name not in settings.mcp_servers:
        err.print(f"no MCP server {name}")
        raise typer.Exit(1)
    settings = settings.model_copy(update={"mcp_servers": {name: settings.mcp_servers[name]}})
    sandboxes = SandboxManager(settings)
    hub = McpServers(settings, sandboxes)
    try:
        offered = hub.servers[name].describe()
    except Exception as exc:
        err.print(f"[red]MCP server {name} does not work:[/red] {exc}")
        raise typer.Exit(1) from None
    finally:
        hub.close()
        sandboxes.close_all()
    for kind, names in offered.items():
        shown = [tool_name(name, n) for n in names] if kind == "tools" else names
        print(f"{kind}: {', '.join(shown) or '(none)'}")
