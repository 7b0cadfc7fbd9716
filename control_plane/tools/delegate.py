"""delegate: hand focused tasks to child agents, each in a sandbox of its own, and get back summaries.

The arguments live here; the children are run by agent/delegation.py, which the agent loop hands
to the handler as `ctx.delegate`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .registry import ToolContext, ToolResult, tool


class Task(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    goal: str = Field(min_length=1, max_length=4000, description="What the child must achieve, concretely.")
    context: str = Field(
        "",
        max_length=20_000,
        description="What the child needs to know: it sees nothing of this conversation but this and the "
        "goal (paths, constraints, what was tried).",
    )
    toolsets: list[str] | None = Field(
        None, description="Only these of your toolsets (e.g. ['terminal', 'files']); default: all of yours."
    )
    max_iterations: int | None = Field(
        None, ge=1, description="Most model calls for the child (default 50; never more than you have left)."
    )
    return_: Literal["summary", "files"] = Field(
        "summary",
        alias="return",
        description="summary: only the child's report comes back; files: also copy its files at `path` into "
        "your workspace under `into`.",
    )
    path: str = Field(
        ".", description="return=files: the file or directory of the child's workspace to copy."
    )
    into: str | None = Field(
        None, description="return=files: the directory in your workspace that receives them (created)."
    )

    @model_validator(mode="after")
    def _files_need_a_destination(self) -> Task:
        if self.return_ == "files" and not (self.into or "").strip("/. "):
            raise ValueError("return=files needs `into`: a directory of your workspace for the child's files")
        return self


class DelegateArgs(BaseModel):
    tasks: list[Task] = Field(
        min_length=1,
        description="One task, or several independent ones to run in parallel (at most agent.max_children, "
        "default 4).",
    )


@tool("delegate", toolset="delegate")
def delegate(ctx: ToolContext, args: DelegateArgs) -> ToolResult:
    """Hand focused, self-contained tasks to child agents. Each child starts with a fresh context (only the
    goal and context you give it), runs in a sandbox of its own (a copy of yours when the backend can fork
    it, else an empty one), and reports back a summary; several tasks run in parallel. You see only each
    child's summary and status (done, failed, out_of_budget, interrupted), never its steps. Use it for
    independent pieces of work (research, a separate module, trying alternatives), not for one quick
    command."""
    if ctx.delegate is None:
        return ToolResult("error: delegation is not available in this session", ok=False)
    return ctx.delegate(args)
