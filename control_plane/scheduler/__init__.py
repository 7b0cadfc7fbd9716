"""Cron jobs of a profile: stored in its database, run as ordinary sessions, delivered to a chat, a
webhook or a file, once per occurrence across processes. Importing it registers the `schedule` tool."""

from . import tool
from .delivery import DeliveryContext, DeliveryError, Message, TargetKind, register_origin, register_target
from .jobs import JobError, JobStore
from .records import JobRecord, JobSpec, RunRecord
from .schedules import ScheduleError, parse
from .service import Scheduler, profiles_on_disk, wake

__all__ = [
    "DeliveryContext",
    "DeliveryError",
    "JobError",
    "JobRecord",
    "JobSpec",
    "JobStore",
    "Message",
    "RunRecord",
    "ScheduleError",
    "Scheduler",
    "TargetKind",
    "parse",
    "profiles_on_disk",
    "register_origin",
    "register_target",
    "tool",
    "wake",
]
