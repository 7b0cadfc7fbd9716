"""Three `hermetic serve` replicas on one PostgreSQL database: a session runs on one replica at a time
(its lease), any replica serves any request for it (forwarded to the owner, or read from the database),
events are followed from any replica, and a replica killed mid-turn has its sessions taken over."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from haproxy import LocalHAProxy, start_haproxy
from ngircd import free_port
from postgres import LocalPostgres
from replica_set import Cluster, running_cluster, until
from sse_events import events_of


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres: LocalPostgres) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("replicas"), postgres) as started:
        yield started


@pytest.fixture(scope="module")
def balancer(cluster: Cluster) -> Iterator[LocalHAProxy]:
    proxy = start_haproxy(free_port(), [replica.port for replica in cluster.replicas])
    try:
        proxy.wait_serving()
        yield proxy
    finally:
        proxy.stop()


def follow(
    cluster: Cluster, index: int, session_id: str, after: int, into: list[dict[str, Any]]
) -> threading.Thread:
    """Follow the session's events on replica `index` until its next turn_end, in a thread."""
    opened = threading.Event()

    def read() -> None:
        with cluster.client(index) as client:
            url = f"/sessions/{session_id}/events?after={after}&until_turn_end=true"
            with client.stream("GET", url) as response:
                opened.set()
                into.extend(events_of(response))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    opened.wait(60)
    return thread


def roles(history: dict[str, Any]) -> list[str]:
    return [message["role"] for message in history["messages"] if message["role"] != "system"]


def test_two_messages_posted_to_two_replicas_at_once_run_one_after_the_other(cluster: Cluster) -> None:
    session = cluster.new_session(0)
    cluster.model.load(
        [
            {"text": "first answer", "delay": 0.5, "match": "at once"},
            {"text": "second answer", "match": "at once"},
        ]
    )
    answers: list[dict[str, Any]] = []

    def post(index: int, text: str) -> None:
        with cluster.client(index) as client:
            response = client.post(f"/sessions/{session}/messages", json={"content": text})
            answers.append({"code": response.status_code, **response.json()})

    events: list[dict[str, Any]] = []
    follower = follow(cluster, 2, session, 0, events)
    posts = [threading.Thread(target=post, args=(i, f"at once {i}")) for i in (1, 2)]
    for thread in posts:
        thread.start()
    for thread in posts:
        thread.join(60)
    follower.join(60)

    assert [answer["code"] for answer in answers] == [202, 202]
    assert {answer["status"] for answer in answers} <= {"started", "steered"}
    until(
        lambda: roles(cluster.history(1, session)) == ["user", "assistant", "user", "assistant"], "both turns"
    )
    contents = [m["content"] for m in cluster.history(2, session)["messages"]]
    assert contents.count("first answer") == 1 and contents.count("second answer") == 1
    assert len(cluster.model.requests) == 2  # each message answered once, by one replica


def test_events_history_and_questions_reach_the_owner_from_any_replica(cluster: Cluster) -> None:
    session = cluster.new_session(0)  # held by replica 0
    cluster.model.load(
        [
            {
                "tool_calls": [{"name": "clarify", "arguments": {"question": "Which colour?"}}],
                "match": "paint",
            },
            {"text": "painted it teal", "match": "paint"},
        ]
    )
    events: list[dict[str, Any]] = []
    follower = follow(cluster, 2, session, 0, events)
    with cluster.client(1) as client:
        assert (
            client.post(f"/sessions/{session}/messages", json={"content": "paint the shed"}).status_code
            == 202
        )
        until(lambda: any(e["event"] == "question" for e in events), "the question, on replica 2")
        question = next(e["data"] for e in events if e["event"] == "question")
        assert client.get(f"/sessions/{session}/questions").json()[0]["id"] == question["id"]
        answered = client.post(f"/sessions/{session}/questions/{question['id']}", json={"answer": "teal"})
        assert answered.status_code == 200, answered.text
    follower.join(60)

    assert events[-1]["event"] == "turn_end" and events[-1]["data"]["content"] == "painted it teal"
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    tool_result = cluster.model.requests[-1]["messages"][-1]
    assert tool_result["role"] == "tool" and "teal" in tool_result["content"]
    detail = cluster.history(2, session)
    assert roles(detail) == ["user", "assistant", "tool", "assistant"] and detail["running"] is False


def test_a_v1_conversation_is_served_by_whichever_replica_its_request_lands_on(cluster: Cluster) -> None:
    cluster.model.load(
        [{"text": f"chat answer {n}", "match": "<v1-chat>"} for n in range(3)]
        + [{"text": f"responses answer {n}", "match": "<v1-responses>"} for n in range(2)]
    )
    chat = [{"role": "user", "content": "<v1-chat> hello"}]

    def complete(index: int, messages: list[dict[str, str]], **headers: str) -> httpx.Response:
        with cluster.client(index) as client:
            body = {"model": "hermetic", "messages": messages}
            return client.post("/v1/chat/completions", json=body, headers=headers)

    opened = complete(0, chat)  # a new conversation: replica 0 holds its session
    assert opened.status_code == 200, opened.text
    session = opened.headers["x-hermetic-session"]
    chat += [{"role": "assistant", "content": "chat answer 0"}, {"role": "user", "content": "and again"}]
    by_key = complete(1, chat)  # the whole history, as a chat front end sends it: by its conversation key
    assert by_key.status_code == 200, by_key.text
    assert by_key.headers["x-hermetic-session"] == session
    assert by_key.json()["choices"][0]["message"]["content"] == "chat answer 1"
    by_header = complete(2, [{"role": "user", "content": "once more"}], **{"X-Hermetic-Session": session})
    assert (
        by_header.status_code == 200
        and by_header.json()["choices"][0]["message"]["content"] == "chat answer 2"
    )
    assert roles(cluster.history(1, session)) == ["user", "assistant"] * 3  # one session, on one replica

    with cluster.client(0) as client:
        first = client.post("/v1/responses", json={"model": "hermetic", "input": "<v1-responses> hi"}).json()
    with cluster.client(1) as client:
        body = {"model": "hermetic", "input": "go on", "previous_response_id": first["id"]}
        followed = client.post("/v1/responses", json=body)
    assert followed.status_code == 200, followed.text
    assert followed.json()["output"][0]["content"][0]["text"] == "responses answer 1"
    assert len(cluster.model.requests) == 5


def test_a_replica_killed_mid_turn_has_its_session_taken_over_and_the_turn_interrupted(
    cluster: Cluster,
) -> None:
    session = cluster.new_session(0)  # held by replica 0, which is killed below
    cluster.model.load(
        [
            {
                "tool_calls": [{"name": "terminal", "arguments": {"command": "echo one > kept.txt"}}],
                "match": "k1",
            },
            {"text": "never sent", "delay": 300, "match": "k1"},  # the replica dies while waiting for it
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo alive"}}], "match": "k1"},
            {"text": "going on", "match": "k1"},
        ]
    )
    events: list[dict[str, Any]] = []
    follower = follow(cluster, 1, session, 0, events)  # a follower on a replica that lives
    with cluster.client(0) as client:
        assert (
            client.post(f"/sessions/{session}/messages", json={"content": "k1: write it"}).status_code == 202
        )
    until(lambda: len(cluster.model.requests) == 2, "the turn's second model call")
    saved = ["user", "assistant", "tool"]  # the steps saved by then (writes are queued, not instant)
    until(lambda: roles(cluster.history(1, session)) == saved, "the finished step to be saved")
    cluster.replicas[0].kill()
    follower.join(60)  # the follower sees the turn end, sent by the replica that took the session over
    try:
        assert [e["data"]["reason"] for e in events if e["event"] == "turn_end"] == ["interrupted"]
        assert any(e["event"] == "notice" and "interrupted" in e["data"]["message"] for e in events)
        kept = cluster.history(2, session)
        assert roles(kept) == ["user", "assistant", "tool"] and kept["running"] is False

        after = events[-1]["id"]
        more: list[dict[str, Any]] = []
        follower = follow(cluster, 2, session, after, more)
        with cluster.client(2) as client:
            posted = client.post(f"/sessions/{session}/messages", json={"content": "go on"})
            assert posted.status_code == 202, posted.text
        follower.join(60)
        ends = [e["data"] for e in more if e["event"] == "turn_end"]
        assert ends == [{**ends[0], "reason": "done", "content": "going on"}]
        tool_end = next(e["data"] for e in more if e["event"] == "tool_end")
        assert "alive" in tool_end["result"]  # a fresh sandbox on the new owner
        history = cluster.history(1, session)
        assert roles(history) == ["user", "assistant", "tool", "user", "assistant", "tool", "assistant"]
        assert [m["content"] for m in history["messages"]].count("going on") == 1
    finally:
        cluster.replicas[0].start().wait_healthy()  # restarted on its port: a new replica


def test_a_replica_frozen_past_its_lease_saves_and_publishes_nothing_of_the_turn_it_lost(
    cluster: Cluster,
) -> None:
    """Alive but silent past its lease (SIGSTOP), a replica has its session taken over and the turn ended
    interrupted by another; woken, the reply it then reads from the model is neither saved nor sent to
    followers (fenced: the lease is not its own any more), and the next turn is answered once."""
    session = cluster.new_session(1)
    cluster.model.load(
        [{"text": "stale reply", "delay": 1.0, "match": "f1"}, {"text": "fresh reply", "match": "f1"}]
    )
    events: list[dict[str, Any]] = []
    follower = follow(cluster, 2, session, 0, events)
    with cluster.client(1) as client:
        assert client.post(f"/sessions/{session}/messages", json={"content": "f1: go"}).status_code == 202
    until(lambda: any("f1" in json.dumps(r["messages"]) for r in cluster.model.requests), "the model asked")
    frozen = cluster.replicas[1]
    frozen.freeze()
    try:
        follower.join(60)  # taken over by a replica that renews: it ends the turn for the followers
        assert [e["data"]["reason"] for e in events if e["event"] == "turn_end"] == ["interrupted"]
    finally:
        frozen.thaw()
    ended = f"session {session}: its turn here ended after another replica took the session over"
    until(lambda: ended in "".join(frozen.said), "the woken replica's turn to end")

    more: list[dict[str, Any]] = []
    follower = follow(cluster, 0, session, events[-1]["id"], more)
    with cluster.client(0) as client:
        assert client.post(f"/sessions/{session}/messages", json={"content": "f1: again"}).status_code == 202
    follower.join(60)
    assert [(e["data"]["reason"], e["data"]["content"]) for e in more if e["event"] == "turn_end"] == [
        ("done", "fresh reply")
    ]  # the stale turn's own end (done, with its reply) never reached the stream
    said = [(m["role"], m["content"]) for m in cluster.history(2, session)["messages"][1:]]
    assert said == [("user", "f1: go"), ("user", "f1: again"), ("assistant", "fresh reply")]


class Conversation:
    """One client's session through the balancer: each message posted once (again only after its turn
    was interrupted by the replica's death; a post whose outcome it could not see goes again under the
    same Idempotency-Key), its events followed to the turn's end across reconnects."""

    def __init__(self, client: httpx.Client, tag: str) -> None:
        self.client, self.tag = client, tag
        self.session = self._created()
        self.last = 0  # the last event number seen: a reconnect (or the next turn) follows from here
        self.ends: list[str] = []
        self.reconnects = 0
        self.refusals: list[int] = []

    def _created(self) -> str:
        while True:
            try:
                response = self.client.post("/sessions", json={"title": self.tag})
            except httpx.TransportError:
                continue  # nothing was created, or one more empty session: not this conversation's
            if response.status_code == 201:
                return str(response.json()["id"])

    def say(self, text: str) -> None:
        while True:
            self._post(text)
            reason = self._turn_end()
            self.ends.append(reason)
            if reason == "done":
                return

    def _post(self, text: str) -> None:
        key = uuid.uuid4().hex  # one per message sent: posted again, the server knows it took it
        while True:
            try:
                response = self.client.post(
                    f"/sessions/{self.session}/messages",
                    json={"content": text},
                    headers={"Idempotency-Key": key},
                )
                if response.status_code == 202:
                    return  # started, steered, or a duplicate of the post a dead replica had taken
                self.refusals.append(response.status_code)
            except httpx.TransportError:
                pass  # the replica died with the request: taken or not, the same key again tells
            time.sleep(0.2)  # a 502/503/429 says try again: not at once, from 30 clients on 2 cores

    def _turn_end(self) -> str:
        url = f"/sessions/{self.session}/events?until_turn_end=true"
        while True:
            try:
                with self.client.stream("GET", f"{url}&after={self.last}") as response:
                    for event in events_of(response):
                        self.last = event["id"]
                        if event["event"] == "turn_end":
                            return str(event["data"]["reason"])
            except httpx.TransportError:
                pass
            self.reconnects += 1  # the stream's replica died: on through another


@pytest.mark.timeout(900)  # 30 sessions and a replica's restart on 2 shared, busy cores
def test_thirty_sessions_through_haproxy_survive_a_replica_killed_and_restarted(
    cluster: Cluster, balancer: LocalHAProxy
) -> None:
    tags = [f"<c{n:02d}>" for n in range(30)]
    conversations: dict[str, Conversation] = {}
    failures: list[BaseException] = []
    created, go = threading.Barrier(len(tags) + 1), threading.Event()

    def converse(tag: str) -> None:
        try:
            with httpx.Client(base_url=balancer.url, headers=cluster.headers, timeout=60) as client:
                conversations[tag] = conversation = Conversation(client, tag)
                created.wait(120)
                go.wait(120)
                for n in (1, 2):
                    conversation.say(f"{tag} message {n}")
        except BaseException as exc:  # noqa: BLE001 (reported by the test's thread, below)
            failures.append(exc)

    threads = [threading.Thread(target=converse, args=(tag,), daemon=True) for tag in tags]
    for thread in threads:
        thread.start()
    created.wait(120)
    victim = cluster.replicas[1]
    held = cluster.sessions_held_by(victim)
    slow = {tag for tag, conversation in conversations.items() if conversation.session in held}
    assert slow, "none of the 30 sessions was created on the victim"  # random routing: p = (2/3)^30
    # the victim's first turns wait 5 s for the model, so the kill lands while one does
    cluster.model.load(
        {"text": f"{tag} reply {i}", "delay": 5.0 if tag in slow and i == 0 else 0.3, "match": tag}
        for tag in tags
        for i in range(6)
    )
    go.set()
    until(lambda: any(tag in json.dumps(r["messages"]) for r in cluster.model.requests for tag in slow),
          "a turn of the victim's to ask the model", timeout=120)  # fmt: skip
    victim.kill()
    victim.start().wait_healthy()
    for thread in threads:
        thread.join(300)
    assert not failures, failures
    stuck = [tag for tag, thread in zip(tags, threads, strict=True) if thread.is_alive()]
    assert not stuck, _stuck(cluster, [conversations[tag] for tag in stuck if tag in conversations])

    interrupted = sum(c.ends.count("interrupted") for c in conversations.values())
    for tag, conversation in conversations.items():
        history = cluster.history(0, conversation.session)["messages"][1:]
        answers = [m["content"] for m in history if m["role"] == "assistant"]
        assert len(answers) == 2 == len(set(answers)), _stuck(cluster, [conversation])  # each answered once
        said = [m["content"] for m in history if m["role"] == "user"]
        assert sorted(set(said)) == [f"{tag} message {n}" for n in (1, 2)], (tag, history)
        for earlier, later in zip(history, history[1:], strict=False):
            assert not (earlier["role"] == later["role"] == "assistant"), (tag, history)
    assert 60 <= len(cluster.model.requests) <= 60 + interrupted
    assert interrupted > 0  # the kill did land mid-turn
    assert sum(c.reconnects for c in conversations.values()) > 0  # streams were followed across it


def _stuck(cluster: Cluster, stuck: list[Conversation]) -> str:
    """What a failure needs to be understood: the conversations' events and histories, the replicas' logs."""
    lines = []
    for conversation in stuck:
        told = [
            (m["role"], (m["content"] or "")[:16], round(m["created_at"] % 1000, 2))
            for m in cluster.history(0, conversation.session)["messages"]
        ]
        lines.append(
            f"{conversation.tag} {conversation.session}: ends {conversation.ends}, last event "
            f"{conversation.last}, reconnects {conversation.reconnects}, refused {conversation.refusals}, "
            f"history {told}"
        )
    for n, replica in enumerate(cluster.replicas):
        lines.append(f"--- replica {n}:\n" + "".join(replica.said[-40:]))
    return "\n".join(lines)


def test_each_cron_occurrence_runs_once_across_the_replicas(cluster: Cluster) -> None:
    cluster.model.load([{"text": "tick done", "match": "<cron-tick>"}] * 40)
    with cluster.client(0) as client:
        job = client.post(
            "/cron/jobs", json={"schedule": "every 1s", "prompt": "<cron-tick> say done"}
        ).json()
        history = f"/cron/jobs/{job['id']}/history"

        def finished() -> list[dict[str, Any]]:
            return [run for run in client.get(history).json() if run["status"] != "running"]

        until(lambda: len(finished()) >= 6, "six occurrences run", timeout=120)
        assert client.post(f"/cron/jobs/{job['id']}/pause").status_code == 200
        until(lambda: all(run["status"] != "running" for run in client.get(history).json()), "the last run")
        runs = client.get(history).json()
    occurrences = [run["scheduled_for"] for run in runs]
    assert len(occurrences) == len(set(occurrences))  # three schedulers, one run per occurrence
    assert all(run["status"] == "ok" for run in runs), runs
    asked = [r for r in cluster.model.requests if "<cron-tick>" in json.dumps(r["messages"])]
    assert len(asked) == len(runs)  # and one model turn per run
