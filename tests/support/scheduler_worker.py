"""A control-plane process for the scheduler's exactly-once test: runs the profile's scheduler on the given
database until its standard input closes, then prints what it claimed as one JSON line.

python tests/support/scheduler_worker.py ROOT DATABASE_URL MODEL_URL [LEASE_SECONDS]
"""

from __future__ import annotations

import asyncio
import json
import sys

from control_plane.config.settings import load_settings
from control_plane.scheduler import Scheduler
from control_plane.scheduler.jobs import JobStore


class CountingJobs(JobStore):
    """Counts this process's claims: won (the UPDATE changed the row) and lost (another process had it)."""

    won = 0
    lost = 0

    def claim(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        found = super().claim(*args, **kwargs)
        if found is None:
            CountingJobs.lost += 1
        else:
            CountingJobs.won += 1
        return found


async def main(root: str, url: str, model_url: str, lease: str = "60") -> None:
    settings = load_settings(
        root=root,
        database_url=url,
        model={"name": "openai/scripted", "api_base": model_url, "api_key": "k-123456", "retries": 0},
        backend="local",
        learning={"enabled": False},
        scheduler={"poll_seconds": 0.2, "lease_seconds": float(lease)},
    )
    scheduler = Scheduler(settings)
    scheduler.jobs = scheduler.runner.jobs = CountingJobs(scheduler.store)
    await scheduler.start()
    print(json.dumps({"ready": scheduler.owner}), flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the test closes our stdin
    await scheduler.stop()
    stats = {"owner": scheduler.owner, "won": CountingJobs.won, "lost": CountingJobs.lost}
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
