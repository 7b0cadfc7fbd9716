"""The "network" toolset (off unless the operator lists it): ask for a refused host, expose a port.

Both ask the user first (an approval Question on the run's stream); no answer within
`agent.question_timeout` is no. Also `egress_note`, which the sandbox tools append to their results so the
agent reads which host was refused and how an operator allows it.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from backends import Sandbox
from backends.network import ExposeError, PolicyError
from backends.network.policy import Policy

from ..config.editor import config_path, read, set_value
from .registry import ToolContext, ToolResult, tool

ANSWERS = ["once", "always", "no"]


def egress_note(sandbox: Sandbox) -> str:
    """What the egress proxy refused since the last call, one line each; empty when nothing was."""
    if sandbox.egress is None:
        return ""
    return "".join(f"\n[{line}]" for line in sandbox.egress.take_denials())


class HostRequestArgs(BaseModel):
    host: str = Field(description="The host name the sandbox was refused, e.g. docs.python.org.")
    port: int = Field(443, gt=0, lt=65536, description="Its port (443 for https, 80 for http).")
    reason: str = Field(description="Why the task needs it, in one sentence the user reads.", max_length=500)


@tool("network_request", toolset="network")
def network_request(ctx: ToolContext, args: HostRequestArgs) -> ToolResult:
    """Ask the user to let the sandbox reach a host its allowlist refused (say why). The user answers
    once (this sandbox), always (the profile's allowlist) or no; no answer in time is no."""
    sandbox = ctx.sandbox
    if sandbox.egress is None:
        return ToolResult(
            f"error: this sandbox's network is {sandbox.spec.network!r}, not 'allowlist'; there is no "
            "allowlist to extend",
            ok=False,
        )
    rule = args.host if args.port in (80, 443) else f"{args.host}:{args.port}"
    try:
        Policy([rule])
    except PolicyError as exc:
        return ToolResult(f"error: {exc}", ok=False)
    answer = ctx.ask(
        kind="approval",
        prompt=f"The agent asks to reach {args.host}:{args.port}: {args.reason}",
        choices=ANSWERS,
        detail={"what": "egress", "host": args.host, "port": str(args.port), "sandbox": sandbox.id},
    )
    if answer not in ("once", "always"):
        return ToolResult(f"the user did not allow {args.host}:{args.port}; do without it", ok=False)
    sandbox.egress.allow([rule])
    if answer == "always" and ctx.settings is not None:
        remember(config_path(ctx.settings), rule)
        spec = ctx.settings.sandbox
        if rule not in spec.allow:
            ctx.settings.sandbox = spec.model_copy(update={"allow": [*spec.allow, rule]})
        return ToolResult(f"{rule} is allowed now, and added to the profile's sandbox.allow")
    return ToolResult(f"{rule} is allowed for this sandbox now")


def remember(config: Path, rule: str) -> None:
    """Add `rule` to `sandbox.allow` in a profile's config.yaml, the rest of the file kept as it was."""
    sandbox = read(config).get("sandbox")
    allow = list(sandbox.get("allow") or []) if isinstance(sandbox, dict) else []
    if rule not in allow:
        set_value(config, "sandbox.allow", json.dumps([*allow, rule]))


class ExposeArgs(BaseModel):
    port: int = Field(gt=0, lt=65536, description="The port a program in the sandbox listens on (127.0.0.1).")
    reason: str = Field("", description="What the user will see there, in one sentence.", max_length=500)
    close: bool = Field(False, description="Stop exposing this port instead.")


@tool("expose_port", toolset="network")
def expose_port(ctx: ToolContext, args: ExposeArgs) -> ToolResult:
    """Show the user a port a program in the sandbox listens on (a web server, a notebook): asks the
    user, then makes it reachable on the user's machine and returns the URL. HTTP and WebSocket work."""
    sandbox = ctx.sandbox
    if sandbox.ingress is None:
        return ToolResult(f"error: the {sandbox.backend} backend cannot expose ports", ok=False)
    if args.close:
        closed = sandbox.ingress.unexpose(args.port)
        return ToolResult(f"port {args.port} is {'no longer exposed' if closed else 'not exposed'}")
    network = ctx.settings.network if ctx.settings is not None else None
    answer = ctx.ask(
        kind="approval",
        prompt=f"The agent asks to show you port {args.port} of its sandbox"
        + (f": {args.reason}" if args.reason else ""),
        choices=["yes", "no"],
        detail={"what": "expose", "port": str(args.port), "sandbox": sandbox.id},
    )
    if answer != "yes":
        return ToolResult(f"the user did not want port {args.port} exposed", ok=False)
    try:
        exposure = sandbox.ingress.expose(
            args.port, network.expose_bind if network is not None else "127.0.0.1"
        )
    except ExposeError as exc:
        return ToolResult(f"error: {exc}", ok=False)
    return ToolResult(
        f"port {args.port} is reachable at {exposure.url} until the sandbox ends; tell the user"
    )
