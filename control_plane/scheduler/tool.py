"""The `schedule` tool: the agent creates, lists, pauses, resumes and removes the profile's jobs, so
"remind me every Monday" works from chat. Its toolset, `schedule`, is off unless the operator adds it.

What the model asks for is untrusted: its jobs may deliver to files under deliveries/, to the chat the
conversation came from (`here`, the default when there is one) and no other chat, and to webhooks only
under the prefixes the operator lists in scheduler.tool_webhooks.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..tools.registry import TOOLS, ToolContext, ToolResult
from .delivery import CHAT_KINDS, origin_of
from .jobs import JobError, JobStore
from .records import CatchUp, JobRecord, JobSpec
from .schedules import Schedule
from .service import wake

TOOLSET = "schedule"


class ScheduleArgs(BaseModel):
    action: Literal["add", "list", "remove", "pause", "resume"]
    schedule: str | None = Field(
        None, description="add: a cron expression ('0 9 * * 1'), 'every 2h', 'in 30m' or an ISO time"
    )
    prompt: str | None = Field(None, description="add: what the agent should do at each run")
    name: str | None = Field(None, description="add: a short name for the job")
    deliver: list[str] | None = Field(
        None,
        description="add: where each result goes: 'here' (this chat; the default in a chat), 'file:NAME', "
        "'webhook:URL'. A reply of exactly [SILENT] delivers nothing ('tell me only if something is wrong').",
    )
    catch_up: CatchUp = Field(
        "once", description="add: after downtime, run missed occurrences once, all, none"
    )
    job_id: str | None = Field(None, description="remove, pause, resume: the job's id (from list)")


def _line(job: JobRecord) -> str:
    schedule = Schedule(job.kind, job.expr, job.tz, job.anchor).describe()  # type: ignore[arg-type]
    state = "paused" if job.paused else "active"
    return f"{job.id} [{state}] {job.name!r}: {schedule}; deliver: {', '.join(job.deliver) or 'nowhere'}"


def _targets(asked: list[str] | None, session_id: str, webhooks: list[str]) -> list[str]:
    """The model's targets made safe: 'here' is this conversation's chat, no other chat is allowed, and
    webhooks only under the operator's prefixes. Nothing asked: this chat, when there is one."""
    origin = origin_of(session_id)
    if asked is None:
        return [origin] if origin else []
    targets = []
    for target in asked:
        kind = target.partition(":")[0]
        if target == "here":
            if origin is None:
                raise ValueError("this conversation is not in a chat: name a target (file:NAME)")
            target = origin
        elif target.startswith("webhook:") and not any(target[8:].startswith(p) for p in webhooks):
            raise ValueError(f"{target} is not a webhook the operator allows (scheduler.tool_webhooks)")
        elif kind in CHAT_KINDS and target != origin:
            raise ValueError(f"{target}: a job may deliver to this chat ('here'), not to another one")
        targets.append(target)
    return targets


@TOOLS.tool("schedule", toolset=TOOLSET)
def schedule(ctx: ToolContext, args: ScheduleArgs) -> ToolResult:
    """Manage scheduled jobs of this profile: each run is a new session that does `prompt` and delivers
    its reply. Actions: add (schedule, prompt, deliver), list, remove, pause, resume (job_id)."""
    if ctx.store is None or ctx.settings is None:
        return ToolResult("error: the schedule tool needs the profile's database", ok=False)
    jobs = JobStore(ctx.store)
    settings = ctx.settings
    try:
        if args.action == "list":
            found = jobs.all(ctx.profile)
            return ToolResult("\n".join(_line(job) for job in found) or "no scheduled jobs")
        if args.action == "add":
            if not args.schedule or not args.prompt:
                return ToolResult("error: add needs schedule and prompt", ok=False)
            try:
                targets = _targets(args.deliver, ctx.session_id, settings.scheduler.tool_webhooks)
            except ValueError as exc:
                return ToolResult(f"error: {exc}", ok=False)
            spec = JobSpec(
                schedule=args.schedule,
                prompt=args.prompt,
                name=args.name,
                deliver=targets,
                catch_up=args.catch_up,
            )
            job = jobs.add(
                ctx.profile, spec, tz=settings.scheduler.timezone, created_by=f"agent:{ctx.session_id}"
            )
            wake(ctx.profile)
            return ToolResult("scheduled " + _line(job))
        if not args.job_id:
            return ToolResult(f"error: {args.action} needs job_id", ok=False)
        if args.action == "remove":
            if not jobs.remove(ctx.profile, args.job_id):
                return ToolResult(f"error: no job {args.job_id}", ok=False)
            return ToolResult(f"removed {args.job_id}")
        job = jobs.set_paused(ctx.profile, args.job_id, args.action == "pause")
        wake(ctx.profile)
        return ToolResult(_line(job))
    except (JobError, ValueError) as exc:
        return ToolResult(f"error: {exc}", ok=False)
