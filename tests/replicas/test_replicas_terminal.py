"""A session's terminal WebSocket on replicas: opened on a replica that does not hold the session, it is
relayed to the one that does (where the sandbox is), with a console sign-in from the replica it landed on
or a bearer token; a terminal left running is attached again through a third replica. The console's
signed-in requests that change something are forwarded the same way (its Origin is the replica's it
reached, which the owner would not take for its own)."""

from __future__ import annotations

import json

import httpx
from replica_set import Cluster
from websockets.sync.client import ClientConnection, connect

from control_plane.api.signins import COOKIE, CSRF_HEADER


def _until_output(socket: ClientConnection, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        frame = socket.recv(timeout=60)
        assert isinstance(frame, bytes), frame  # no error message on the way
        seen += frame
    return seen


def test_a_sessions_terminal_is_relayed_to_the_replica_holding_it(cluster: Cluster) -> None:
    session = cluster.new_session(1)  # replica 1 holds it, and will hold its sandbox
    landed = cluster.replicas[0].url
    with httpx.Client(base_url=landed) as web:  # a console sign-in on replica 0
        token = cluster.headers["Authorization"].removeprefix("Bearer ")
        signin = web.post("/auth/login", json={"token": token}).raise_for_status().json()
        cookie = web.cookies[COOKIE]
        sent = {"Origin": landed, CSRF_HEADER: signin["csrf_token"]}
        assert web.post(f"/sessions/{session}/interrupt", headers=sent).json() == {"interrupted": False}
    path = f"/sessions/{session}/terminal"
    signed_in = {"Cookie": f"{COOKIE}={cookie}", "Origin": landed}
    with connect(landed.replace("http", "ws") + path, additional_headers=signed_in) as socket:
        opened = json.loads(socket.recv(timeout=60))
        assert opened["type"] == "terminal" and not opened["attached"], opened
        socket.send(json.dumps({"type": "input", "data": "echo kept-$((6 * 7))\r"}))
        _until_output(socket, b"kept-42")
    assert session in cluster.sessions_held_by(cluster.replicas[1])  # never taken by the relaying replica

    again = cluster.replicas[2].url.replace("http", "ws") + f"{path}?terminal={opened['id']}"
    with connect(again, additional_headers=cluster.headers) as socket:
        attached = json.loads(socket.recv(timeout=60))
        assert attached["type"] == "terminal" and attached["attached"], (attached, _told(cluster, session))
        _until_output(socket, b"kept-42")  # the running terminal's kept output, replayed
        socket.send(json.dumps({"type": "input", "data": "exit 3\r"}))
        while isinstance(frame := socket.recv(timeout=60), bytes):
            pass
        assert json.loads(frame) == {"type": "exit", "exit_code": 3}


def _told(cluster: Cluster, session: str) -> str:
    """Who holds the session now, and what the replicas logged last (a failure's context)."""
    holders = [n for n, held in enumerate(cluster.replicas) if session in cluster.sessions_held_by(held)]
    logs = "".join(f"--- replica {n}:\n" + "".join(r.said[-15:]) for n, r in enumerate(cluster.replicas))
    return f"held by replica {holders}\n{logs}"
