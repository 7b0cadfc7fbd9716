"""Memory and skill-library writes across replicas: each is taken under the profile's PostgreSQL advisory
lock (replicas on several machines share a database, not a file lock), so concurrent writes through two
replicas lose nothing, and a write waits while another holder has the lock."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import psycopg
import pytest
from replica_set import Cluster, until

from control_plane.store.profile_lock import advisory_key


def _add(cluster: Cluster, index: int, text: str) -> int:
    with cluster.client(index) as client:
        body = {"ops": [{"op": "add", "text": text}]}
        return client.post("/memory/memory", json=body).status_code


def _entries(cluster: Cluster) -> list[str]:
    with cluster.client(2) as client:
        files = client.get("/memory").json()["files"]
    return [entry["text"] for file in files if file["target"] == "memory" for entry in file["entries"]]


def test_memory_writes_through_two_replicas_at_once_lose_nothing(cluster: Cluster) -> None:
    texts = [f"replica {n % 2} noted fact number {n}." for n in range(16)]
    codes: list[int] = []
    writers = [
        threading.Thread(target=lambda n=n: codes.append(_add(cluster, n % 2, texts[n]))) for n in range(16)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    assert codes == [200] * 16
    assert set(texts) <= set(_entries(cluster))


def _waiting_on(conn: psycopg.Connection, key: int) -> bool:
    """Whether another backend waits for the advisory lock `key` (pg_locks splits it in two halves)."""
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
        (unsigned >> 32, unsigned & 0xFFFFFFFF),
    ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize(
    ("what", "write"),
    [
        (
            "memory",
            lambda client: client.post("/memory/memory", json={"ops": [{"op": "add", "text": "held."}]}),
        ),
        ("skills", lambda client: client.post("/skills/curation/apply", json={"changes": []})),
    ],
    ids=["memory", "skills"],
)
def test_a_write_waits_for_the_profiles_advisory_lock(
    cluster: Cluster, what: str, write: Callable[[httpx.Client], httpx.Response]
) -> None:
    key = advisory_key("default", what)
    answered: list[httpx.Response] = []
    with psycopg.connect(
        cluster.database.replace("postgresql+psycopg", "postgresql"), autocommit=True
    ) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))  # as another replica in its write
        with cluster.client(1) as client:
            writer = threading.Thread(target=lambda: answered.append(write(client)))
            writer.start()
            until(lambda: _waiting_on(conn, key), f"the {what} write to wait for the lock")
            assert not answered
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            writer.join(60)
    assert [response.status_code for response in answered] == [200]
    if what == "memory":
        assert "held." in _entries(cluster)
