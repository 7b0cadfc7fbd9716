"""The scheduler end to end: jobs in the real database (SQLite and PostgreSQL), runs as real sessions
with the scripted model, deliveries to a real HTTP receiver and to files, the lease between processes."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from postgres import LocalPostgres

from control_plane.agent.agent import Agent
from control_plane.config.settings import Settings, load_settings
from control_plane.scheduler import JobError, JobSpec, JobStore, ScheduleError, Scheduler, parse
from control_plane.scheduler.delivery import SIGNATURE_HEADER, TIMESTAMP_HEADER
from control_plane.scheduler.jobs import process_id
from control_plane.scheduler.service import webhook_secret
from control_plane.store import Store

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "support" / "scheduler_worker.py"


def cron_settings(root: Path, model_url: str, **overrides: Any) -> Settings:
    get_backend("local")
    model = {"name": "openai/scripted", "api_base": model_url, "api_key": "k-123456", "retries": 0}
    overrides.setdefault("learning", {"enabled": False})
    return load_settings(root=root, model=model, backend="local", **overrides)


class Receiver:
    """A webhook endpoint on 127.0.0.1 that records every POST (headers and body); made with hold=True it
    answers none until `released` is set."""

    def __init__(self, status: int = 200, hold: bool = False) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.status = status
        self.arrived = threading.Condition()
        self.released = threading.Event()
        if not hold:
            self.released.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.arrived:
                    receiver.posts.append((dict(self.headers), body))
                    receiver.arrived.notify_all()
                receiver.released.wait(60)
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(self, count: int, timeout: float = 60) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.posts) >= count, timeout)

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


# -- schedules -------------------------------------------------------------------------------


def test_schedules_read_cron_intervals_one_offs_and_iso_times_in_the_profile_zone() -> None:
    now = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC).timestamp()  # a Tuesday
    monday_nine = parse("0 9 * * 1", "Europe/Paris", now)
    # 09:00 in Paris (UTC+1 in December) on Monday the 7th
    assert monday_nine.next_after(now) == dt.datetime(2026, 12, 7, 8, 0, tzinfo=dt.UTC).timestamp()
    every = parse("every 2h", "UTC", now)
    assert every.next_after(now) == now + 7200 and every.next_after(now + 7200) == now + 14400
    once = parse("in 30m", "UTC", now)
    assert once.next_after(now) == now + 1800 and once.next_after(now + 1800) is None
    iso = parse("2026-12-24T09:00", "Asia/Tokyo", now)
    assert iso.next_after(now) == dt.datetime(2026, 12, 24, 0, 0, tzinfo=dt.UTC).timestamp()
    for bad in ("every 0m", "every fortnight", "61 * * * *", "yesterday", "2020-01-01T00:00"):
        with pytest.raises(ScheduleError):
            parse(bad, "UTC", now)
    with pytest.raises(ScheduleError, match="time zone"):
        parse("every 1h", "Mars/Olympus", now)


# -- the lease -------------------------------------------------------------------------------


def test_an_occurrence_is_claimed_by_exactly_one_of_many_racing_claimers(store: Store) -> None:
    jobs = JobStore(store)
    job = jobs.add("default", JobSpec(schedule="every 1m", prompt="p"), tz="UTC", now=1000.0)
    due = jobs.due("default", 1061.0)
    assert [j.id for j in due] == [job.id]
    owners = [process_id() for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:  # eight claimers, each on its own connection, the same due row
        claims = list(pool.map(lambda owner: jobs.claim(due[0], 1061.0, owner, 30), owners))
    won = [c for c in claims if c is not None]
    assert len(won) == 1 and won[0].scheduled_for == 1060.0
    after = jobs.get("default", job.id)
    assert after is not None and after.next_run_at == 1120.0 and after.lease_owner in owners
    assert jobs.due("default", 1090.0) == []  # leased: nobody else may run it meanwhile


def test_a_lease_left_by_a_dead_process_is_reaped_and_its_run_marked_abandoned(store: Store) -> None:
    jobs = JobStore(store)
    job = jobs.add("default", JobSpec(schedule="every 1m", prompt="p"), tz="UTC", now=1000.0)
    claim = jobs.claim(jobs.due("default", 1061.0)[0], 1061.0, "dead:1:x", lease=30)
    assert claim is not None
    run_id = jobs.start_run(job.id, claim.scheduled_for, 0, "dead:1:x")
    assert jobs.reap("default", 1080.0) == 0  # still within the lease
    assert jobs.reap("default", 1092.0) == 1
    [run] = jobs.history("default", job.id)
    assert run.id == run_id and run.status == "abandoned"
    assert [j.id for j in jobs.due("default", 1200.0)] == [job.id]  # free again
    with pytest.raises(JobError, match="already ran"):  # the unique occurrence is the second wall
        jobs.start_run(job.id, claim.scheduled_for, 0, "other:2:y")
    freed = jobs.get("default", job.id)
    assert freed is not None and freed.retry_for == claim.scheduled_for and freed.retry_attempt == 1
    assert freed.retry_at == 1092.0 + 30.0, "retried after the job's backoff, as a failed attempt is"
    retry = jobs.claim(freed, 1200.0, "other:2:y", lease=30)
    assert retry is not None and (retry.scheduled_for, retry.attempt) == (claim.scheduled_for, 1)


def test_an_abandoned_attempt_without_retries_left_is_not_run_again(store: Store) -> None:
    jobs = JobStore(store)
    spec = JobSpec(schedule="every 1m", prompt="p", max_retries=0)
    job = jobs.add("default", spec, tz="UTC", now=1000.0)
    claim = jobs.claim(jobs.due("default", 1061.0)[0], 1061.0, "dead:1:x", lease=30)
    assert claim is not None
    jobs.start_run(job.id, claim.scheduled_for, 0, "dead:1:x")
    assert jobs.reap("default", 1092.0) == 1
    freed = jobs.get("default", job.id)
    assert freed is not None and freed.retry_at is None and freed.last_status == "abandoned"
    assert jobs.due("default", 1100.0) == [], "its next occurrence is the next one on the schedule"


def test_jobs_refuse_bad_schedules_targets_and_toolsets_and_save_nothing(store: Store) -> None:
    jobs = JobStore(store)
    cases = [
        (JobSpec(schedule="whenever", prompt="p"), "cannot read the schedule"),
        (JobSpec(schedule="every 1h", prompt="p", deliver=["file:../../config.yaml"]), "without '..'"),
        (JobSpec(schedule="every 1h", prompt="p", deliver=["ftp:x"]), "unknown kind"),
        (JobSpec(schedule="every 1h", prompt="p", deliver=["webhook:file:///etc/passwd"]), "http"),
        (JobSpec(schedule="every 1h", prompt="p", toolsets=["nope"]), "unknown toolset"),
        (JobSpec(schedule="every 1h", prompt="p", workspace="/etc"), "workspace"),
    ]
    for spec, message in cases:
        with pytest.raises(JobError, match=message):
            jobs.add("default", spec, tz="UTC", known_toolsets={"terminal"})
    assert jobs.all("default") == []
    jobs.add("default", JobSpec(schedule="every 1h", prompt="p", deliver=["telegram:12345"]), tz="UTC")
    assert len(jobs.all("default")) == 1  # a gateway chat is accepted before the gateway runs


# -- runs ------------------------------------------------------------------------------------


def test_a_job_every_second_runs_as_cron_sessions_and_delivers_to_a_signed_webhook_and_a_file(
    tmp_path: Path, fake_llm: Any, receiver: Receiver
) -> None:
    fake_llm.load([{"text": f"build #{i} is green"} for i in range(20)])
    settings = cron_settings(tmp_path, fake_llm.url)
    scheduler = Scheduler(settings)
    spec = JobSpec(
        schedule="every 1s", prompt="check the build", deliver=[f"webhook:{receiver.url}", "file:b.md"]
    )
    job = scheduler.jobs.add(settings.profile, spec, tz="UTC")

    async def main() -> None:
        await scheduler.start()
        try:
            assert await asyncio.to_thread(receiver.wait_for, 3)
        finally:
            await scheduler.stop()

    asyncio.run(main())
    runs = [r for r in scheduler.jobs.history(settings.profile, job.id) if r.status == "ok"][::-1]
    assert len(runs) >= 3
    # each run is an occurrence of the schedule, a session of its own from source cron
    assert all((r.scheduled_for - job.anchor) % 1.0 == 0 for r in runs)
    assert len({r.scheduled_for for r in runs}) == len(runs)
    assert all(r.duration_ms is not None and r.duration_ms > 0 for r in runs)
    sessions = [scheduler.store.get_session(r.session_id or "", settings.profile) for r in runs]
    assert all(s is not None and s.source == "cron" and s.ended_at for s in sessions)
    assert len({r.session_id for r in runs}) == len(runs)
    # the webhook: the reply as JSON, signed over timestamp and body with the profile's key
    secret = webhook_secret(settings)
    for headers, body in receiver.posts[:3]:
        expected = hmac.new(secret, headers[TIMESTAMP_HEADER].encode() + b"." + body, hashlib.sha256)
        assert headers[SIGNATURE_HEADER] == "sha256=" + expected.hexdigest()
        message = json.loads(body)
        assert message["job_id"] == job.id and message["status"] == "ok"
        assert message["text"].startswith("build #") and message["session_id"].startswith("s-")
    delivered = (settings.home / "deliveries" / "b.md").read_text()
    assert delivered.count(f"({job.id})") >= 3 and "build #0 is green" in delivered
    assert all(d["ok"] for r in runs[:3] for d in r.deliveries)


def test_a_run_stopped_while_it_delivers_finishes_its_deliveries_then_ends(
    tmp_path: Path, fake_llm: Any
) -> None:
    fake_llm.load([{"text": "all green"}])
    settings = cron_settings(tmp_path, fake_llm.url)
    scheduler = Scheduler(settings)
    receiver = Receiver(hold=True)
    spec = JobSpec(schedule="every 1h", prompt="check", deliver=[f"webhook:{receiver.url}", "file:b.md"])
    job = scheduler.jobs.add(settings.profile, spec, tz="UTC")
    claim = scheduler.jobs.claim_now(job, time.time(), scheduler.owner, 60)
    assert claim is not None

    async def main() -> None:
        run = asyncio.create_task(scheduler.runner.run(claim))
        assert await asyncio.to_thread(receiver.wait_for, 1)  # the webhook has the post; its answer waits
        run.cancel()  # as the scheduler's stop does
        receiver.released.set()
        with pytest.raises(asyncio.CancelledError):
            await run

    try:
        asyncio.run(main())
    finally:
        receiver.close()
        asyncio.run(scheduler.stop())
    assert "all green" in (settings.home / "deliveries" / "b.md").read_text()
    (run,) = scheduler.jobs.history(settings.profile, job.id)
    assert run.status == "ok" and [d["ok"] for d in run.deliveries] == [True, True]


def test_silent_delivers_nothing_and_a_failing_run_is_retried_then_its_failure_delivered(
    tmp_path: Path, fake_llm: Any, receiver: Receiver
) -> None:
    settings = cron_settings(tmp_path, fake_llm.url)
    scheduler = Scheduler(settings)
    targets = [f"webhook:{receiver.url}", "file:alerts.md"]
    quiet = scheduler.jobs.add(
        settings.profile, JobSpec(schedule="every 1h", prompt="all well?", deliver=targets), tz="UTC"
    )
    flaky = scheduler.jobs.add(
        settings.profile,
        JobSpec(schedule="every 1h", prompt="x", deliver=targets, max_retries=2, retry_backoff=0.05),
        tz="UTC",
    )

    async def main() -> None:
        try:
            fake_llm.load([{"text": "  [SILENT]\n"}])
            silent = await scheduler.run_now(quiet.id)
            assert silent is not None and silent.status == "silent"
            fake_llm.load([{"error": 500, "message": "down"}] * 3)
            failed = await scheduler.run_now(flaky.id)
            assert failed is not None and failed.status == "failed"
        finally:
            await scheduler.stop()

    asyncio.run(main())
    [silent_run] = scheduler.jobs.history(settings.profile, quiet.id)
    assert silent_run.status == "silent" and silent_run.deliveries == []
    attempts = scheduler.jobs.history(settings.profile, flaky.id)[::-1]
    assert [r.attempt for r in attempts] == [0, 1, 2] and {r.status for r in attempts} == {"failed"}
    assert len(fake_llm.requests) == 3 and len({r.session_id for r in attempts}) == 3
    # only the failure arrived, once, after the last attempt
    assert len(receiver.posts) == 1
    message = json.loads(receiver.posts[0][1])
    assert message["status"] == "failed" and "after 3 attempt(s)" in message["text"]
    text = (settings.home / "deliveries" / "alerts.md").read_text()
    assert "failed after 3 attempt(s)" in text and "SILENT" not in text
    assert attempts[-1].deliveries and all(d["ok"] for d in attempts[-1].deliveries)


def test_pause_stops_runs_and_resume_starts_from_the_next_occurrence(tmp_path: Path, fake_llm: Any) -> None:
    settings = cron_settings(tmp_path, fake_llm.url)
    scheduler = Scheduler(settings)
    job = scheduler.jobs.add(settings.profile, JobSpec(schedule="every 1m", prompt="p"), tz="UTC", now=1000.0)
    scheduler.jobs.set_paused(settings.profile, job.id, True)
    assert scheduler.tick(5000.0) == []  # far past due, but paused
    resumed = scheduler.jobs.set_paused(settings.profile, job.id, False, now=5000.0)
    assert resumed.next_run_at == 5020.0  # what fell due while paused does not run
    assert scheduler.tick(5010.0) == []
    [claim] = scheduler.tick(5021.0)
    assert claim.scheduled_for == 5020.0 and not claim.skip


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("once", [1060.0]), ("all", [1060.0, 1120.0, 1180.0]), ("none", [])],
)
def test_runs_missed_while_everything_was_down_follow_the_catch_up_policy(
    tmp_path: Path, fake_llm: Any, policy: str, expected: list[float]
) -> None:
    """The job was saved by a process that then stopped; a new one starts at 1200 (three occurrences
    missed) and runs them once, all, or none."""
    settings = cron_settings(tmp_path, fake_llm.url)
    with Store(str(settings.database_url)) as store:
        job = JobStore(store).add(
            settings.profile, JobSpec(schedule="every 1m", prompt="p", catch_up=policy), tz="UTC", now=1000.0
        )
    fake_llm.load([{"text": "caught up"}] * 5)
    scheduler = Scheduler(settings)  # the process coming back

    async def main() -> None:
        try:
            for _ in range(5):
                for claim in scheduler.tick(1200.5):
                    await scheduler.runner.run(claim)
        finally:
            await scheduler.stop()

    asyncio.run(main())
    runs = scheduler.jobs.history(settings.profile, job.id)[::-1]
    assert [r.scheduled_for for r in runs if r.status == "ok"] == expected
    assert len(fake_llm.requests) == len(expected)
    assert all(r.status == "skipped" for r in runs if r.status != "ok")
    assert (policy == "none") == (len(runs) == 1 and runs[0].status == "skipped")
    after = scheduler.jobs.get(settings.profile, job.id)
    assert after is not None and after.next_run_at == 1240.0 and after.lease_owner is None


def _worker(root: Path, url: str, model_url: str, lease: float = 60) -> subprocess.Popen[str]:
    """tests/support/scheduler_worker.py: a scheduler process on `url`; ready once it printed its first
    line."""
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), url, model_url, str(lease)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert worker.stdout is not None and "ready" in worker.stdout.readline()
    return worker


def test_two_processes_on_one_postgresql_never_run_an_occurrence_twice(
    tmp_path: Path, fake_llm: Any, postgres: LocalPostgres
) -> None:
    name = postgres.create_database()
    url = postgres.url(name)
    fake_llm.load([{"text": "done"}] * 200)
    workers = [_worker(tmp_path / f"p{i}", url, fake_llm.url) for i in range(2)]
    try:
        with Store(url) as store:
            jobs = JobStore(store)
            made = [
                jobs.add("default", JobSpec(schedule="every 1s", prompt=f"job {i}"), tz="UTC")
                for i in range(3)
            ]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(fake_llm.requests) < 12:
                time.sleep(0.1)
            for job in made:
                jobs.set_paused("default", job.id, True)
            while any(j.lease_owner for j in jobs.all("default")) and time.monotonic() < deadline:
                time.sleep(0.1)
            runs = [r for job in made for r in jobs.history("default", job.id)]
        stats = []
        for worker in workers:
            out, _ = worker.communicate(timeout=60)
            stats.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        postgres.drop_database(name)
    occurrences = [(r.job_id, r.scheduled_for) for r in runs]
    assert len(runs) >= 12 and len(occurrences) == len(set(occurrences))  # none ran twice
    assert {r.status for r in runs} == {"ok"}
    assert len(fake_llm.requests) == len(runs)  # one model call per run: nothing ran unrecorded
    assert sum(s["won"] for s in stats) == len(runs)
    assert {r.owner for r in runs} <= {s["owner"] for s in stats}


def test_a_run_killed_by_kill_9_is_retried_by_the_next_process_and_delivered_once(
    tmp_path: Path, fake_llm: Any, postgres: LocalPostgres, receiver: Receiver
) -> None:
    name = postgres.create_database()
    url = postgres.url(name)
    fake_llm.load(
        [{"text": "a long answer cut off by the kill " * 20, "pace": 0.3}, {"text": "retried, done"}]
    )
    spec = JobSpec(schedule="every 1h", prompt="p", deliver=[f"webhook:{receiver.url}"], retry_backoff=0)
    workers: list[subprocess.Popen[str]] = []
    try:
        with Store(url) as store:
            jobs = JobStore(store)
            job = jobs.add("default", spec, tz="UTC", now=time.time() - 3600)  # due now
            workers.append(_worker(tmp_path / "first", url, fake_llm.url, lease=2))
            deadline = time.monotonic() + 60
            while not fake_llm.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            workers[0].kill()  # SIGKILL mid-run: the lease stops being renewed, the run stays "running"
            workers[0].wait(10)
            workers.append(_worker(tmp_path / "second", url, fake_llm.url, lease=2))
            assert receiver.wait_for(1), "the retry ran and delivered"
            assert workers[1].stdin is not None
            workers[1].stdin.close()
            workers[1].wait(60)
            runs = jobs.history("default", job.id)[::-1]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
        postgres.drop_database(name)
    assert [(r.attempt, r.status) for r in runs] == [(0, "abandoned"), (1, "ok")]
    assert runs[0].scheduled_for == runs[1].scheduled_for, "the same occurrence, the next attempt"
    assert len(fake_llm.requests) == 2 and len(receiver.posts) == 1, "delivered once"
    delivered = json.loads(receiver.posts[0][1])
    assert delivered["text"] == "retried, done" and delivered["run_id"] == runs[1].id


def test_each_run_gets_its_own_sandbox_seeded_from_the_workspace(tmp_path: Path, fake_llm: Any) -> None:
    settings = cron_settings(tmp_path, fake_llm.url)
    (settings.home / "seed").mkdir()
    (settings.home / "seed" / "notes.txt").write_text("seeded\n")
    command = {"name": "terminal", "arguments": {"command": "cat notes.txt; echo $RANDOM > mine; ls"}}
    fake_llm.load([{"tool_calls": [command]}, {"text": "one"}, {"tool_calls": [command]}, {"text": "two"}])
    scheduler = Scheduler(settings)
    job = scheduler.jobs.add(
        settings.profile, JobSpec(schedule="every 1h", prompt="p", workspace="seed"), tz="UTC"
    )

    async def main() -> None:
        try:
            for _ in range(2):
                await scheduler.run_now(job.id)
        finally:
            await scheduler.stop()

    asyncio.run(main())
    runs = scheduler.jobs.history(settings.profile, job.id)
    assert {r.status for r in runs} == {"ok"}
    tool_results = [m["content"] for req in fake_llm.requests for m in req["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 2 and all("seeded" in t for t in tool_results)
    assert all("mine" in t and "notes.txt" in t for t in tool_results)
    calls = [c for r in runs for c in scheduler.store.tool_calls(r.session_id or "")]
    assert len(calls) == 2 and calls[0].sandbox_id != calls[1].sandbox_id


# -- the agent's schedule tool ---------------------------------------------------------------


def test_the_schedule_tool_is_off_by_default_and_when_enabled_adds_lists_and_refuses_webhooks(
    tmp_path: Path, fake_llm: Any
) -> None:
    default = cron_settings(tmp_path, fake_llm.url)
    assert "schedule" not in Agent(default).tools
    settings = cron_settings(
        tmp_path, fake_llm.url, toolsets=["schedule"], scheduler={"timezone": "Europe/Paris"}
    )
    add = {
        "name": "schedule",
        "arguments": {
            "action": "add",
            "schedule": "0 9 * * 1",
            "prompt": "remind me to water the plants",
            "deliver": ["file:reminders.md"],
        },
    }
    hook = {**add, "arguments": {**add["arguments"], "deliver": ["webhook:http://127.0.0.1:9/x"]}}
    listing = {"name": "schedule", "arguments": {"action": "list"}}
    fake_llm.load([{"tool_calls": [add, hook]}, {"tool_calls": [listing]}, {"text": "Every Monday at 9."}])
    agent = Agent(settings)
    conversation = agent.new_conversation()
    end = asyncio.run(conversation.run("remind me every Monday to water the plants", lambda e: None))
    conversation.close()
    agent.close()
    assert end.reason == "done"
    [job] = JobStore(Store(str(settings.database_url))).all(settings.profile)
    assert job.prompt == "remind me to water the plants" and job.tz == "Europe/Paris"
    assert job.deliver == ["file:reminders.md"] and job.created_by == f"agent:{conversation.id}"
    results = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("scheduled " + job.id)
    assert "not a webhook the operator allows" in results[1]
    assert job.id in results[2] and "cron 0 9 * * 1 (Europe/Paris)" in results[2]


def test_a_job_uses_its_own_model_and_a_missing_preloaded_skill_fails_the_run_with_the_reason(
    tmp_path: Path, fake_llm: Any
) -> None:
    settings = cron_settings(tmp_path, fake_llm.url)
    scheduler = Scheduler(settings)
    own = scheduler.jobs.add(
        settings.profile, JobSpec(schedule="every 1h", prompt="p", model="openai/other"), tz="UTC"
    )
    missing = scheduler.jobs.add(
        settings.profile, JobSpec(schedule="every 1h", prompt="p", skills=["nope"], max_retries=0), tz="UTC"
    )
    fake_llm.load([{"text": "from the other model"}])

    async def main() -> None:
        try:
            done = await scheduler.run_now(own.id)
            assert done is not None and done.status == "ok"
            failed = await scheduler.run_now(missing.id)
            assert failed is not None and failed.status == "failed" and "nope" in (failed.error or "")
        finally:
            await scheduler.stop()

    asyncio.run(main())
    assert [r["model"] for r in fake_llm.requests] == [
        "other"
    ]  # the job's model; the failed run asked nothing
    session = scheduler.store.get_session(
        scheduler.jobs.history(settings.profile, own.id)[0].session_id or "", "default"
    )
    assert session is not None and session.model == "openai/other"


def test_a_gateway_plugs_in_a_chat_target_and_the_tool_delivers_back_to_the_chat_it_came_from(
    tmp_path: Path, fake_llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What control_plane/gateway does: register its chat kind and say which chat a session is in."""
    from control_plane.scheduler import delivery

    sent: list[tuple[str, delivery.Message]] = []

    class Chat:
        def check(self, address: str) -> None:
            if not address.lstrip("-").isdigit():
                raise delivery.DeliveryError(f"telegram chat ids are numbers, not {address!r}")

        async def send(self, address: str, message: delivery.Message, ctx: delivery.DeliveryContext) -> str:
            sent.append((address, message))
            return f"sent to chat {address}"

    chat_of: dict[str, str] = {}
    monkeypatch.setitem(delivery._KINDS, "telegram", Chat())
    monkeypatch.setattr(delivery, "_ORIGINS", [])
    delivery.register_origin(chat_of.get)

    settings = cron_settings(tmp_path, fake_llm.url, toolsets=["schedule"])
    remind = {
        "name": "schedule",
        "arguments": {"action": "add", "schedule": "0 9 * * 1", "prompt": "water the plants"},
    }
    elsewhere = {**remind, "arguments": {**remind["arguments"], "deliver": ["telegram:99"]}}
    fake_llm.load(
        [{"tool_calls": [remind, elsewhere]}, {"text": "Every Monday at 9."}, {"text": "Water the plants!"}]
    )
    agent = Agent(settings)
    conversation = agent.new_conversation(source="telegram")
    chat_of[conversation.id] = "telegram:42"
    asyncio.run(conversation.run("remind me every Monday to water the plants", lambda e: None))
    conversation.close()
    agent.close()
    results = [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("scheduled") and "deliver: telegram:42" in results[0]
    assert "not to another one" in results[1]
    scheduler = Scheduler(settings)
    [job] = scheduler.jobs.all(settings.profile)

    async def main() -> None:
        try:
            await scheduler.run_now(job.id)
        finally:
            await scheduler.stop()

    asyncio.run(main())
    assert [(address, m.text) for address, m in sent] == [("42", "Water the plants!")]
    [run] = scheduler.jobs.history(settings.profile, job.id)
    assert run.deliveries == [{"target": "telegram:42", "ok": True, "detail": "sent to chat 42"}]
    with pytest.raises(JobError, match="numbers"):  # the kind's own check runs when a job is saved
        scheduler.jobs.add(
            settings.profile, JobSpec(schedule="every 1h", prompt="p", deliver=["telegram:me"]), tz="UTC"
        )


def test_servers_opening_a_new_postgresql_database_at_once_all_get_the_schema(
    postgres: LocalPostgres,
) -> None:
    """Found by the two-process test: concurrent CREATE ... IF NOT EXISTS collided in pg_type."""
    name = postgres.create_database()
    try:

        def open_both(_: int) -> int:
            with Store(postgres.url(name)) as store:
                return len(JobStore(store).all("default"))

        with ThreadPoolExecutor(6) as pool:
            assert list(pool.map(open_both, range(6))) == [0] * 6
    finally:
        postgres.drop_database(name)


def test_catching_up_all_replays_at_most_the_latest_hundred_missed_occurrences(store: Store) -> None:
    from control_plane.scheduler.jobs import REPLAY_LIMIT

    jobs = JobStore(store)
    spec = JobSpec(schedule="every 1m", prompt="p", catch_up="all")
    job = jobs.add("default", spec, tz="UTC", now=1000.0)  # first at 1060, then every 60 s
    now = 1060.0 + 60 * 500 + 30  # 501 occurrences missed
    claims = []
    for _ in range(REPLAY_LIMIT + 5):
        found = jobs.due("default", now)
        if not found:
            break
        claim = jobs.claim(found[0], now, "me:1:x", lease=30)
        assert claim is not None
        claims.append(claim.scheduled_for)
        jobs.release(job.id, "me:1:x", "ok", now)
    assert len(claims) == REPLAY_LIMIT and claims == sorted(claims)
    assert claims[0] == 1060.0 + 60 * (500 - REPLAY_LIMIT + 1) and claims[-1] == 1060.0 + 60 * 500
    cron = jobs.add("default", JobSpec(schedule="*/5 * * * *", prompt="p", catch_up="all"), tz="UTC", now=0.0)
    claim = jobs.claim(cron, 86400.0 + 10, "me:1:y", lease=30)  # a day down: 288 occurrences missed
    assert claim is not None and claim.scheduled_for == 86400.0 - 300 * (REPLAY_LIMIT - 1)


def test_a_job_removed_after_its_claim_runs_nothing_and_leaves_no_open_session(
    tmp_path: Path, fake_llm: Any
) -> None:
    settings = cron_settings(tmp_path, fake_llm.url)
    scheduler = Scheduler(settings)
    job = scheduler.jobs.add(settings.profile, JobSpec(schedule="every 1m", prompt="p"), tz="UTC", now=1000.0)
    [claim] = scheduler.tick(1061.0)
    assert scheduler.jobs.remove(settings.profile, job.id)

    async def main() -> None:
        try:
            with pytest.raises(JobError, match="was removed"):
                await scheduler.runner.run(claim)
        finally:
            await scheduler.stop()

    asyncio.run(main())
    assert fake_llm.requests == []
    sessions = scheduler.store.list_sessions(settings.profile)
    assert [s.source for s in sessions] == ["cron"] and sessions[0].ended_at is not None


def test_a_pending_retry_is_kept_in_the_database_and_run_by_the_next_process(
    tmp_path: Path, fake_llm: Any
) -> None:
    settings = cron_settings(tmp_path, fake_llm.url)
    first = Scheduler(settings)
    spec = JobSpec(schedule="every 1h", prompt="p", deliver=["file:r.md"], max_retries=1, retry_backoff=600)
    now = time.time()  # the runner schedules the retry on the wall clock
    job = first.jobs.add(settings.profile, spec, tz="UTC", now=now - 3630)  # first occurrence 30 s ago
    due = job.anchor
    fake_llm.load([{"error": 500, "message": "down"}, {"text": "fine now"}])
    [claim] = first.tick(now)

    async def run(scheduler: Scheduler, claim: Any) -> None:
        try:
            await scheduler.runner.run(claim)
        finally:
            await scheduler.stop()

    asyncio.run(run(first, claim))  # the first attempt fails; then this process goes away
    pending = first.jobs.get(settings.profile, job.id)
    assert pending is not None and pending.retry_for == due and pending.retry_attempt == 1
    assert pending.retry_at is not None and pending.lease_owner is None
    assert not (settings.home / "deliveries" / "r.md").exists()  # not the last attempt: nothing said yet
    second = Scheduler(settings)
    assert second.tick(pending.retry_at - 1) == []
    [retry] = second.tick(pending.retry_at + 0.1)
    assert retry.attempt == 1 and retry.scheduled_for == due
    asyncio.run(run(second, retry))
    runs = second.jobs.history(settings.profile, job.id)[::-1]
    assert [(r.attempt, r.status) for r in runs] == [(0, "failed"), (1, "ok")]
    assert "fine now" in (settings.home / "deliveries" / "r.md").read_text()
    after = second.jobs.get(settings.profile, job.id)
    assert after is not None and after.retry_at is None and after.next_run_at == due + 3600


def test_a_run_interrupted_by_a_clean_stop_is_retried_at_once_by_the_next_start(
    tmp_path: Path, fake_llm: Any
) -> None:
    settings = cron_settings(tmp_path, fake_llm.url)
    first = Scheduler(settings)
    now = time.time()
    job = first.jobs.add(settings.profile, JobSpec(schedule="every 1h", prompt="p"), tz="UTC", now=now - 3630)
    fake_llm.load([{"text": "slow " * 200, "pace": 0.05}, {"text": "done on the retry"}])
    [claim] = first.tick(now)

    async def stop_mid_run() -> None:
        running = asyncio.ensure_future(first.runner.run(claim))
        while not fake_llm.requests:
            await asyncio.sleep(0.02)
        running.cancel()  # what Scheduler.stop does to its runs
        await asyncio.gather(running, return_exceptions=True)
        await first.stop()

    asyncio.run(stop_mid_run())
    pending = first.jobs.get(settings.profile, job.id)
    assert pending is not None and pending.retry_for == claim.scheduled_for and pending.retry_attempt == 1
    second = Scheduler(settings)
    [retry] = second.tick(time.time())
    assert (retry.scheduled_for, retry.attempt) == (claim.scheduled_for, 1)
    asyncio.run(second.runner.run(retry))
    asyncio.run(second.stop())
    runs = second.jobs.history(settings.profile, job.id)[::-1]
    assert [(r.attempt, r.status) for r in runs] == [(0, "failed"), (1, "ok")]
    assert runs[0].error == "the scheduler stopped"
