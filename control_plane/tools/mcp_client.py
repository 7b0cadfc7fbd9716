"""The MCP servers an agent uses: each server's tools join the agent's tools as mcp_<server>_<tool>.

Every connection lives on one event-loop thread of its own (the `mcp` SDK is async; tool handlers run
in worker threads). A stdio server runs sealed in a sandbox of its own (mcp_stdio.py) unless marked
`host`; an HTTP server is reached from here with its headers. A server gets only its `env` and the
names in its `env_allow`. A call that fails (the server crashed, hung past its timeout, or answered
garbage) is a readable tool error, and the server is restarted on its next use.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import BaseModel, ConfigDict

from backends import Sandbox, SandboxError

from ..config.settings import MCPServerConfig, Settings
from ..events import ToolImage
from ..sandbox_manager import SandboxManager, base_spec
from .images import MAX_IMAGES, ImageError, tool_image
from .mcp_stdio import sandbox_stdio
from .registry import Tool, ToolContext, ToolResult

log = logging.getLogger(__name__)


class Arguments(BaseModel):
    """Whatever the model sends: the MCP server validates against its own schema."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class McpTool(Tool[Arguments]):
    """A tool of an MCP server, with the server's own input schema."""

    input_schema: dict[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        parameters = self.input_schema or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


def tool_name(server: str, tool: str) -> str:
    """mcp_<server>_<tool> in the characters and length model APIs accept."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", f"mcp_{server}_{tool}")[:64]


class McpServers:
    """The configured servers of one agent. `tools()` connects to each and lists its tools."""

    def __init__(self, settings: Settings, sandboxes: SandboxManager) -> None:
        self.settings = settings
        self.sandboxes = sandboxes
        self.servers = {name: _Server(name, config, self) for name, config in settings.mcp_servers.items()}
        self.problems: list[str] = []
        """Servers that could not be reached at startup (their tools are missing, the reason here)."""
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="mcp-clients", daemon=True).start()
        return self._loop

    def run(self, work: Any, timeout: float) -> Any:
        """Run a coroutine on the clients' loop from a worker thread; raises its error or TimeoutError."""
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def tools(self) -> dict[str, Tool[Any]]:
        found: dict[str, Tool[Any]] = {}
        for server in self.servers.values():
            try:
                listed = server.list_tools()
            except Exception as exc:  # one server down leaves the agent and the others working
                problem = f"MCP server {server.name}: {_reason(exc)}; its tools are not available"
                log.warning("%s", problem)
                self.problems.append(problem)
                continue
            for tool in listed:
                name = tool_name(server.name, tool.name)
                found[name] = McpTool(
                    name,
                    (tool.description or tool.name)[:1024],
                    Arguments,
                    server.handler(tool.name),
                    f"mcp_{server.name}",
                    input_schema=tool.input_schema,
                )
        return found

    def close(self) -> None:
        if self._loop is None:
            return
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                self.run(server.stop(), timeout=15)
        self._loop.call_soon_threadsafe(self._loop.stop)
        for server in self.servers.values():
            server.release_sandbox()


class _Server:
    """One server: its connection (started on demand, restarted after a failure) and its sandbox."""

    def __init__(self, name: str, config: MCPServerConfig, hub: McpServers) -> None:
        self.name = name
        self.config = config
        self.hub = hub
        self.client: Client | None = None
        self.sandbox: Sandbox | None = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        if config.host and config.command:
            log.warning("MCP server %s runs on the host, outside any sandbox (host: true)", name)

    # -- from worker threads ---------------------------------------------------------------

    def list_tools(self) -> list[types.Tool]:
        def listing(client: Client) -> Any:
            return client.list_tools()

        result = self._with_client(listing)
        return [t for t in result.tools if self._offered(t.name)]

    def describe(self) -> dict[str, list[str]]:
        """What the server offers: its tools (after include/exclude), and its resources and prompts
        when it has them."""

        async def listing(client: Client) -> dict[str, list[str]]:
            tools = [t.name for t in (await client.list_tools()).tools if self._offered(t.name)]
            offered: dict[str, list[str]] = {"tools": tools}
            capabilities = client.server_capabilities
            if capabilities.resources is not None:
                offered["resources"] = [str(r.uri) for r in (await client.list_resources()).resources]
            if capabilities.prompts is not None:
                offered["prompts"] = [p.name for p in (await client.list_prompts()).prompts]
            return offered

        return dict(self._with_client(listing))

    def handler(self, tool: str) -> Any:
        def call(ctx: ToolContext, args: Arguments) -> ToolResult:
            try:
                result = self._with_client(lambda client: client.call_tool(tool, args.model_dump()))
            except Exception as exc:
                return ToolResult(
                    f"error: MCP server {self.name} failed on {tool}: {_reason(exc)}; "
                    "it is restarted on the next call",
                    ok=False,
                )
            return ToolResult(_text(result), ok=not result.is_error, images=_images(result, self.name))

        return call

    def _offered(self, tool: str) -> bool:
        included = not self.config.include or tool in self.config.include
        return included and tool not in self.config.exclude

    def _with_client(self, use: Any) -> Any:
        """Connect if needed, then run `use(client)`; any failure stops the connection (next use restarts)."""
        timeout = self.config.timeout
        with self._lock:
            try:
                if self.client is None:
                    self.hub.run(self.start(), self.config.start_timeout)
                assert self.client is not None
                return self.hub.run(use(self.client), timeout)
            except MCPError as exc:
                if exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                    raise  # the server answered with an error: it is alive, keep it
                self._restart_later()
                raise
            except BaseException:
                self._restart_later()
                raise

    def _restart_later(self) -> None:
        with contextlib.suppress(Exception):
            self.hub.run(self.stop(), timeout=15)

    def release_sandbox(self) -> None:
        if self.sandbox is not None:
            with contextlib.suppress(SandboxError):
                self.sandbox.close()
            self.sandbox = None

    # -- on the clients' loop --------------------------------------------------------------

    async def start(self) -> None:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._holder = asyncio.ensure_future(self._hold(ready, self._stop))
        self.client = await ready

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Owns the connection: the SDK's task groups must be left by the task that entered them."""
        try:
            async with self._transport() as streams, Client(_Streams(streams), mode="auto") as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError(str(exc)))
            if not isinstance(exc, Exception):
                raise

    async def stop(self) -> None:
        self.client = None
        if self._stop is not None:
            self._stop.set()
        if self._holder is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._holder), 10)
            except Exception:
                self._holder.cancel()
        self._holder = self._stop = None

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        config = self.config
        env = {**{n: os.environ[n] for n in config.env_allow if n in os.environ}, **config.env}
        if config.url is not None:
            async with (
                httpx2.AsyncClient(headers=config.headers, timeout=config.timeout) as http,
                streamable_http_client(config.url, http_client=http) as streams,
            ):
                yield streams
        elif config.host:
            params = StdioServerParameters(command=config.command or "", args=config.args, env=env)
            async with stdio_client(params) as streams:
                yield streams
        else:
            sandbox = await asyncio.to_thread(self._sandbox)
            command = [config.command or "", *config.args]
            async with sandbox_stdio(sandbox, command, env, f"MCP server {self.name}") as streams:
                yield streams

    def _sandbox(self) -> Sandbox:
        """The server's own long-lived sandbox (recreated when it vanished)."""
        if self.sandbox is not None and not self.sandbox.responsive():
            self.release_sandbox()
        if self.sandbox is None:
            spec = base_spec(self.hub.settings)
            spec = spec.model_copy(
                update={
                    "mounts": [*spec.mounts, *self.config.mounts],
                    "labels": {**spec.labels, "org.hermetic.mcp-server": self.name},
                    "image": self.config.image or spec.image,
                }
            )
            self.sandbox = self.hub.sandboxes.backend.create(spec)
        return self.sandbox


class _Streams:
    """Already-open streams as the async context manager the SDK's Client takes for a transport."""

    def __init__(self, streams: tuple[Any, Any]) -> None:
        self.streams = streams

    async def __aenter__(self) -> tuple[Any, Any]:
        return self.streams

    async def __aexit__(self, *exc: object) -> None:
        return None


def _text(result: types.CallToolResult) -> str:
    parts = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        else:
            parts.append(block.model_dump_json(by_alias=True, exclude_none=True))
    if result.structured_content is not None and not parts:
        parts.append(str(result.structured_content))
    return "\n".join(parts) or "(no output)"


def _images(result: types.CallToolResult, server: str) -> list[ToolImage]:
    """The result's image blocks, checked and bounded like any tool's (the server is outside the seal)."""
    images: list[ToolImage] = []
    for block in result.content:
        if isinstance(block, types.ImageContent) and len(images) < MAX_IMAGES:
            try:
                images.append(tool_image(base64.b64decode(block.data), f"an image from MCP server {server}"))
            except (ImageError, ValueError) as exc:  # ValueError: not base64
                log.warning("MCP server %s sent an image that cannot be read: %s", server, exc)
    return images


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer within the timeout"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
