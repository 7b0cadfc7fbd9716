"""The `schedule` tool: the agent creates, lists, pauses, resumes and removes the profile's jobs, so
"remind me every Monday" works from chat. Its toolset, `schedule`, is off unless the operator adds it.

What the model asks for is untrusted: its jobs may deliver to files under deliveries/, to gateway chats,
and to webhooks only under the prefixes the operator lists in scheduler.tool_webhooks.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..tools.registry import TOOLS, ToolContext, ToolResult
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
    deliver: list[str] = Field(
        default_factory=list,
        description="add: where each result goes: 'file:NAME', 'telegram:CHAT', 'webhook:URL'. A reply of "
        "exactly [SILENT] delivers nothing (for 'tell me only if something is wrong').",
    )
    catch_up: CatchUp = Field(
        "once", description="add: after downtime, run missed occurrences once, all, none"
    )
    job_id: str | None = Field(None, description="remove, pause, resume: the job's id (from list)")


def _line(job: JobRecord) -> str:
    schedule = Schedule(job.kind, job.expr, job.tz, job.anchor).describe()  # type: ignore[arg-type]
    state = "paused" if job.paused else "active"
    return f"{job.id} [{state}] {job.name!r}: {schedule}; deliver: {', '.join(job.deliver) or 'nowhere'}"


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
            for target in args.deliver:
                allowed = settings.scheduler.tool_webhooks
                if target.startswith("webhook:") and not any(target[8:].startswith(p) for p in allowed):
                    return ToolResult(
                        f"error: {target} is not a webhook the operator allows (scheduler.tool_webhooks)",
                        ok=False,
                    )
            spec = JobSpec(
                schedule=args.schedule,
                prompt=args.prompt,
                name=args.name,
                deliver=args.deliver,
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
