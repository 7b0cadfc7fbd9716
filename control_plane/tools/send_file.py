"""send_file: a sandbox file to the user's chat. Offered where the surface has a chat (the gateway adds
its toolset); the surface passes the way to the chat for each turn (`ToolContext.send_file`)."""

from __future__ import annotations

import tempfile

from pydantic import BaseModel, Field

from backends.errors import SandboxError

from .registry import ToolContext, ToolResult, tool

TOOLSET = "gateway"


class SendFileArgs(BaseModel):
    path: str = Field(description="The file in the sandbox, relative to the workspace or absolute.")


@tool("send_file", toolset=TOOLSET)
def send_file(ctx: ToolContext, args: SendFileArgs) -> ToolResult:
    """Send a file from the sandbox to the user's chat (a report, an image, an archive you made)."""
    if ctx.send_file is None:
        return ToolResult("error: this session has no chat to send files to", ok=False)
    with tempfile.TemporaryDirectory(prefix="hermetic-send-") as tmp:
        try:
            local = ctx.sandbox.download(args.path, tmp)
        except SandboxError as exc:
            return ToolResult(f"error: cannot read {args.path}: {exc}", ok=False)
        if not local.is_file():
            return ToolResult(f"error: {args.path} is a directory; send one file (or an archive)", ok=False)
        try:
            ctx.send_file(local)
        except Exception as exc:  # the platform's refusal, whatever its client raises: the model is told
            return ToolResult(f"error: the chat refused the file: {exc}", ok=False)
    return ToolResult(f"sent {local.name} to the chat")
