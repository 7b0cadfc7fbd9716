"""When a job runs: a cron expression (croniter), `every 2h`, a one-off `in 30m`, or an ISO time.

`parse(text, tz, now)` checks the text once and gives a `Schedule`; `Schedule.next_after(t)` is the first
occurrence strictly after `t` (None when a one-off is past). Times are epoch seconds; the time zone only
matters for cron expressions and ISO times without an offset (the profile's zone).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(
    r"^(\d+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hr|hrs|hours?|d|days?|w|weeks?)$", re.IGNORECASE
)
Kind = Literal["cron", "every", "once"]


class ScheduleError(ValueError):
    """A schedule that cannot be understood; the message says what forms are accepted."""


@dataclass(frozen=True)
class Schedule:
    kind: Kind
    expr: str
    """cron: the expression; every: seconds between runs; once: the epoch second of the run."""
    tz: str
    anchor: float
    """every: the first run's time (runs fall at anchor + k * interval)."""

    def next_after(self, after: float) -> float | None:
        if self.kind == "once":
            at = float(self.expr)
            return at if at > after else None
        if self.kind == "every":
            interval = float(self.expr)
            if after < self.anchor:
                return self.anchor
            steps = int((after - self.anchor) // interval) + 1
            return self.anchor + steps * interval
        start = dt.datetime.fromtimestamp(after, ZoneInfo(self.tz))
        return float(croniter(self.expr, start).get_next(float))

    def nth_latest(self, n: int, before: float) -> float | None:
        """The n-th latest occurrence at or before `before` (n=1: the latest); None when there are fewer."""
        if self.kind == "once":
            return None
        if self.kind == "every":
            interval = float(self.expr)
            latest = self.anchor + ((before - self.anchor) // interval) * interval
            found = latest - (n - 1) * interval
            return found if found >= self.anchor else None
        walk = croniter(self.expr, dt.datetime.fromtimestamp(before + 1e-6, ZoneInfo(self.tz)))
        found = before
        for _ in range(n):
            found = float(walk.get_prev(float))
        return found if found >= self.anchor else None

    def describe(self) -> str:
        if self.kind == "cron":
            return f"cron {self.expr} ({self.tz})"
        if self.kind == "every":
            return f"every {_duration_text(float(self.expr))}"
        return "once at " + dt.datetime.fromtimestamp(float(self.expr), ZoneInfo(self.tz)).isoformat()


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r}: use an IANA name such as Europe/Paris or UTC"
        ) from None


def parse(text: str, tz: str, now: float) -> Schedule:
    """The schedule `text` means, in time zone `tz`, as of `now`. Raises ScheduleError."""
    zone(tz)
    words = " ".join(text.split())
    lowered = words.lower()
    if lowered.startswith("every "):
        return Schedule("every", repr(_seconds(words[6:])), tz, now + _seconds(words[6:]))
    if lowered.startswith("in "):
        return Schedule("once", repr(now + _seconds(words[3:])), tz, now)
    if lowered.startswith("at "):
        words = words[3:]
    if croniter.is_valid(words) and len(words.split()) in (5, 6):
        try:
            croniter(words, dt.datetime.fromtimestamp(now, ZoneInfo(tz))).get_next(float)
        except (CroniterBadCronError, CroniterBadDateError) as exc:
            raise ScheduleError(f"cron expression {words!r} never fires: {exc}") from None
        return Schedule("cron", words, tz, now)
    try:
        when = dt.datetime.fromisoformat(words)
    except ValueError:
        raise ScheduleError(
            f"cannot read the schedule {text!r}: use a cron expression ('0 9 * * 1'), 'every 2h', "
            "'in 30m', or an ISO time ('2026-12-24T09:00', the profile's time zone unless it has an offset)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=ZoneInfo(tz))
    at = when.timestamp()
    if at <= now:
        raise ScheduleError(f"{words} is in the past")
    return Schedule("once", repr(at), tz, now)


def _seconds(text: str) -> float:
    match = _DURATION.match(text.strip())
    if not match or int(match.group(1)) <= 0:
        raise ScheduleError(
            f"cannot read the duration {text!r}: a positive number and a unit (30s, 15m, 2h, 1d)"
        )
    return float(int(match.group(1)) * UNITS[match.group(2)[0].lower()])


def _duration_text(seconds: float) -> str:
    for unit, size in sorted(UNITS.items(), key=lambda item: -item[1]):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
