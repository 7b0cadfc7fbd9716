"""The tool registry: each tool module registers its tools here; toolsets select what a run exposes.

A tool's arguments are a pydantic model, which gives both the JSON schema the model sees and the
validation that turns a malformed call into a readable result instead of an exception.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_type_hints

from pydantic import BaseModel, ValidationError

from backends import SandboxError

if TYPE_CHECKING:
    from backends import Sandbox

    from ..config.settings import Limits, Settings
    from ..events import Event, TodoItem, ToolImage
    from ..memory.store import Memory
    from ..skills.library import SkillLibrary
    from ..store import Store

Args = TypeVar("Args", bound=BaseModel)
SendFile = Callable[[Path], None]


class Interrupt(threading.Event):
    """A turn's interrupt flag that also calls back when set: a handler blocked on something the
    sandbox's interrupt does not reach (a remote agent's task) learns of it at once, without polling."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._keys = itertools.count()
        self._guard = threading.Lock()

    def set(self) -> None:
        super().set()
        with self._guard:
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` once when the flag is set (at once if it is), from the interrupting thread:
        it must be quick. Returns what unregisters it."""
        with self._guard:
            now = self.is_set()
            key = next(self._keys)
            if not now:
                self._callbacks[key] = callback
        if now:
            callback()

        def forget() -> None:
            with self._guard:
                self._callbacks.pop(key, None)

        return forget


@dataclass
class ToolResult:
    content: str
    ok: bool = True
    exit_code: int | None = None
    images: list[ToolImage] = field(default_factory=list)
    """Images beside the text (tools/images.py bounds them); `content` says where each is kept."""


@dataclass(frozen=True)
class ToolOutcome:
    """A call run through the agent's one path (agent/tool_call.py): what the model would have seen."""

    content: str
    """Redacted and clipped, notices first."""
    ok: bool
    exit_code: int | None
    duration_ms: float
    spent: bool = False
    """Not run: the turn's tool-call budget is spent."""
    images: tuple[ToolImage, ...] = ()


@dataclass
class ToolContext:
    """What a handler may use: the session's sandbox (created on first use), limits, progress output."""

    session_id: str
    call_id: str
    limits: Limits
    get_sandbox: Callable[[], Sandbox]
    progress: Callable[[str], None] = lambda text: None
    cancelled: Interrupt = field(default_factory=Interrupt)
    """Set when the user interrupts the turn (`on_set` calls back then)."""
    profile: str = "default"
    store: Store | None = None
    """The sessions database (recall tools)."""
    notify: Callable[[str], None] = lambda message: None
    """Tell the user something (a Notice on the event stream), e.g. memory nearly full."""
    turn_state: dict[str, Any] = field(default_factory=dict)
    """Scratch state shared by the calls of one user turn; the loop starts each turn with a new one."""
    memory: Memory | None = None
    """The profile's curated memory (the memory tool)."""
    skills: SkillLibrary | None = None
    """The profile's skill library (the skills tools)."""
    proposer: str = "agent"
    """Who a skill change is recorded as proposed by: the agent, or a background review."""
    ask: Callable[..., str | None] = lambda **question: None
    """Put a question to the user and wait (agent/questions.py `Questions.ask` without `emit`):
    kind, prompt, choices, timeout, detail. None means no answer; with no surface to ask, always None."""
    emit: Callable[[Event], None] = lambda event: None
    """Put an event on the session's stream (from the handler's thread)."""
    todo: list[TodoItem] = field(default_factory=list)
    """The session's plan (the todo tool), kept by the conversation across turns."""
    delegate: Callable[[Any], ToolResult] | None = None
    """Run a delegate call's child agents (agent/delegation.py); None where delegation is not possible."""
    call_tool: Callable[[str, dict[str, Any]], ToolOutcome] | None = None
    """Run another call (tool name, arguments) through the agent's one path, counted in the turn's
    budget (execute_code's inner calls); None where nothing runs such calls (MCP)."""
    ask_model: Callable[..., str | None] | None = None
    """Ask the session's model one question outside the conversation: (system prompt, user text,
    images=[data URLs]) -> its answer, None when the turn's budget is spent or the model failed
    (web_extract's summaries, vision_analyze)."""
    tools: dict[str, Tool[Any]] = field(default_factory=dict)
    """The tools this conversation offers (what call_tool may reach)."""
    send_file: SendFile | None = None
    """Send a host file to the user's chat and wait until the chat took it (raises when it refused):
    passed for each turn by a surface that has a chat (the gateway); None elsewhere."""
    settings: Settings | None = None
    """The agent's settings (the schedule tool reads the profile's time zone and delivery policy; the
    network tools read network.* and write the profile's allowlist)."""

    @property
    def sandbox(self) -> Sandbox:
        return self.get_sandbox()


@dataclass(frozen=True)
class Tool(Generic[Args]):
    name: str
    description: str
    args: type[Args]
    handler: Callable[[ToolContext, Args], ToolResult | str]
    toolset: str
    parallel_safe: bool = False
    """Safe to run at the same time as other parallel-safe calls of the same step (reads, lookups)."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema."""
        parameters = copy.deepcopy(_parameters(self.args))
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


@functools.cache
def _parameters(args: type[BaseModel]) -> dict[str, Any]:
    """An arguments model's JSON schema, made once: pydantic takes milliseconds per model, and every new
    conversation lists every tool (a copy is handed out, so no caller can change the cached one)."""
    parameters = args.model_json_schema()
    parameters.pop("title", None)
    for prop in parameters.get("properties", {}).values():
        prop.pop("title", None)
    return parameters


class Registry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool[Any]] = {}

    def register(self, tool: Tool[Any]) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool

    def tool(
        self, name: str, *, toolset: str, parallel_safe: bool = False
    ) -> Callable[
        [Callable[[ToolContext, Args], ToolResult | str]], Callable[[ToolContext, Args], ToolResult | str]
    ]:
        """Register a handler; its description is its docstring, its arguments its annotated model."""

        def decorate(
            handler: Callable[[ToolContext, Args], ToolResult | str],
        ) -> Callable[[ToolContext, Args], ToolResult | str]:
            model = get_type_hints(handler)["args"]
            description = " ".join((handler.__doc__ or "").split())
            self.register(Tool(name, description, model, handler, toolset, parallel_safe))
            return handler

        return decorate

    @property
    def toolsets(self) -> set[str]:
        return {tool.toolset for tool in self._tools.values()}

    def select(self, toolsets: list[str]) -> dict[str, Tool[Any]]:
        """The tools of these toolsets. Raises ValueError naming an unknown toolset."""
        unknown = set(toolsets) - self.toolsets
        if unknown:
            raise ValueError(
                f"unknown toolset(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(self.toolsets))}"
            )
        return {name: tool for name, tool in self._tools.items() if tool.toolset in toolsets}

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)


def invoke(tool: Tool[Any] | None, name: str, raw_arguments: str, ctx: ToolContext) -> ToolResult:
    """Run one tool call; every failure becomes a result the model can read and act on."""
    if tool is None:
        return ToolResult(f"error: there is no tool named {name!r}", ok=False)
    try:
        decoded = json.loads(raw_arguments) if raw_arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolResult(
            f"error: the arguments of {name} are not valid JSON ({exc.msg} at position {exc.pos}); "
            "send a JSON object matching the tool's schema",
            ok=False,
        )
    try:
        args = tool.args.model_validate(decoded)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
        )
        return ToolResult(f"error: invalid arguments for {name}: {problems}", ok=False)
    try:
        result = tool.handler(ctx, args)
    except SandboxError as exc:
        return ToolResult(f"error: {exc}", ok=False)
    return result if isinstance(result, ToolResult) else ToolResult(result)


TOOLS = Registry()
"""Every built-in tool; the modules of this package register into it when imported."""
tool = TOOLS.tool
