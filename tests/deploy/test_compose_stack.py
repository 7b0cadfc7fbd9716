"""The compose deployment brought up for real, from the offline images (images/services.py): the control
plane in its hardened container, Docker only through the socket proxy (Debian's HAProxy 2.6), SQLite in
the volume or PostgreSQL under its profile. A session's tool call runs in a sandbox the containerised
control plane creates through the proxy; the scripted model is a service of the same compose project,
so every packet stays in the project's own networks on this machine."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
import yaml

from backends.base import MANAGED_LABEL
from backends.docker import OWNER_LABEL

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
SCRIPT = [
    {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo from-the-sandbox; id -u"}}]},
    {"text": "The sandbox answered."},
]


# the first test builds the stack's images when they are not cached (minutes on a fresh machine;
# .ci/run builds them before the suite)
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is missing: apt-get install docker-compose")
    try:
        docker.from_env().ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"dockerd is not reachable: {exc}")
    from images.build import ensure_image
    from images.services import ensure_service_images

    ensure_image("slim")
    return ensure_service_images()


def random_subnet() -> str:
    return f"10.213.{secrets.randbelow(256)}.0/24"


class Stack:
    def __init__(
        self,
        tmp: Path,
        profiles: list[str],
        env: dict[str, str],
        script: list[dict[str, Any]] = SCRIPT * 4,
        settings: dict[str, str] | None = None,
        subnet: str | None = None,
        files: tuple[str, ...] = ("docker-compose.yml", "docker-compose.offline.yml"),
        planes: tuple[str, ...] = ("hermetic",),
    ) -> None:
        """`settings`: more of the control plane's environment (the compose file passes only its own);
        `subnet`: the project network's, fixed beforehand (so an allowlist can name it before `up`);
        `files`: the compose files; `planes`: their control-plane services (one, or the replicas)."""
        self.project = f"hmstack{uuid.uuid4().hex[:8]}"
        self.subnet = subnet or random_subnet()
        (tmp / "script.yaml").write_text(yaml.safe_dump(script))
        extra = tmp / "test.yml"  # the scripted model, inside the project's own network
        extra.write_text(
            yaml.safe_dump(
                {
                    "networks": {"default": {"ipam": {"config": [{"subnet": self.subnet}]}}},
                    "services": {
                        **{plane: {"environment": settings or {}} for plane in planes},
                        "fake-llm": {
                            "image": "hermetic-agent:offline",
                            "command": [
                                "hermetic",
                                "dev",
                                "fake-llm",
                                "--script",
                                "/script.yaml",
                                "--host",
                                "0.0.0.0",
                                "--port",
                                "8788",
                            ],  # fmt: skip
                            "volumes": [f"{tmp / 'script.yaml'}:/script.yaml:ro"],
                            "read_only": True,
                        },
                    },
                }
            )
        )
        files = (*files, str(extra))
        self.base = [
            "docker-compose",
            "-p",
            self.project,
            *(a for f in files for a in ("-f", str(COMPOSE / f))),
        ]
        self.profiles = [a for p in profiles for a in ("--profile", p)]
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.env = {
            **os.environ,
            "HERMETIC_PORT": str(self.port),
            "HERMETIC_MODEL__NAME": "openai/scripted",
            "HERMETIC_MODEL__API_BASE": "http://fake-llm:8788/v1",
            "HERMETIC_MODEL__API_KEY": "test-key",
            "POSTGRES_PASSWORD": "stack-secret",
            "HERMETIC_NET_VOLUME": f"hermetic-net-{self.project}",  # this stack's own
            **env,
        }
        self.url = f"http://127.0.0.1:{self.port}"

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.base, *self.profiles, *args], capture_output=True, text=True, env=self.env, timeout=300
        )
        assert not check or done.returncode == 0, done.stdout + done.stderr
        return done

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError("the API did not come up:\n" + self.compose("logs", check=False).stdout[-3000:])

    def labelled(self, kind: str) -> list[str]:
        client = docker.from_env()
        label = f"com.docker.compose.project={self.project}"
        if kind == "containers":
            return [c.name for c in client.containers.list(all=True, filters={"label": label})]
        if kind == "networks":
            return [n.name for n in client.networks.list(filters={"label": label})]
        return sorted(v.name for v in client.volumes.list(filters={"label": label}))


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path, images: dict[str, str]) -> Iterator[Stack]:
    profiles, env = request.param
    running = Stack(tmp_path, profiles, env)
    try:
        yield running
    finally:
        running.compose("down", "-v", "--remove-orphans", check=False)


def _turn(url: str, token: str, text: str) -> dict[str, Any]:
    """A new session's first turn; its detail once the model answered."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        return _say(client, client.post("/sessions", json={"title": "stack"}).json()["id"], text)


def _say(client: httpx.Client, session: str, text: str) -> dict[str, Any]:
    """One more turn of the session; its detail once the model answered it."""
    answered = len(_answers(client.get(f"/sessions/{session}").json()))
    assert client.post(f"/sessions/{session}/messages", json={"content": text}).status_code == 202
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        detail = client.get(f"/sessions/{session}").json()
        if not detail["running"] and len(_answers(detail)) > answered:
            return dict(detail)
        time.sleep(0.2)
    raise AssertionError("the turn did not finish")


def _answers(detail: dict[str, Any]) -> list[str]:
    return [m["content"] for m in detail["messages"] if m["role"] == "assistant" and m["content"]]


POSTGRES_URL = "postgresql+psycopg://hermetic:stack-secret@postgres:5432/hermetic"


@pytest.mark.parametrize(
    "stack",
    [([], {}), (["postgres"], {"HERMETIC_DATABASE_URL": POSTGRES_URL})],
    ids=["sqlite", "postgres"],
    indirect=True,
)
def test_the_stack_runs_a_session_through_the_proxy_and_keeps_it_across_a_restart(stack: Stack) -> None:
    # serve refuses a non-loopback address with no token: the operator makes the first one beforehand
    made = stack.compose("run", "--rm", "-T", "hermetic", "hermetic", "token", "create", "--name", "test")
    token = made.stdout.strip().splitlines()[-1]
    stack.compose("up", "-d")
    stack.wait_healthy()
    assert token.startswith("hm_") or len(token) > 20, token

    detail = _turn(stack.url, token, "run the command")
    tool = [m for m in detail["messages"] if m["role"] == "tool"]
    assert tool and "from-the-sandbox\n1000" in tool[0]["content"], detail["messages"]
    session = detail["session"]["id"]

    doctor = stack.compose("exec", "-T", "hermetic", "hermetic", "doctor", "--offline", check=False).stdout
    assert "through tcp://docker-proxy:2375" in doctor, doctor
    assert "present, current runtime" in doctor, doctor
    database = "postgresql" if "HERMETIC_DATABASE_URL" in stack.env else "sqlite"
    assert any(
        line.startswith("│ database") and "ok" in line and database in line for line in doctor.splitlines()
    ), doctor

    stack.compose("restart", "hermetic")
    stack.wait_healthy()
    again = httpx.get(f"{stack.url}/sessions/{session}", headers={"Authorization": f"Bearer {token}"}).json()
    assert again["session"]["id"] == session, again
    assert any("from-the-sandbox" in (m["content"] or "") for m in again["messages"])

    hostname = docker.from_env().containers.get(f"{stack.project}_hermetic_1").attrs["Config"]["Hostname"]
    stack.compose("down")
    assert stack.labelled("containers") == [] and stack.labelled("networks") == []
    volumes = {name.removeprefix(f"{stack.project}_") for name in stack.labelled("volumes")}
    # only the named data volumes stay (compose 1.x creates every named volume, profiles or not)
    net = stack.env["HERMETIC_NET_VOLUME"]
    assert "hermetic-home" in volumes and volumes <= {"hermetic-home", "postgres-data", net}, volumes
    mine = {"label": MANAGED_LABEL}
    left = {
        c.name
        for c in docker.from_env().containers.list(all=True, filters=mine)
        if (c.labels.get(OWNER_LABEL) or "").startswith(f"{hostname}:")  # the stack's, not another test's
    }
    assert not left, f"sandboxes left behind: {left}"


def _terminal(command: str, **more: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command, **more}}]}


SERVER = (  # writes `listening` once bound, so the tool's wait_for knows when it serves
    "cd /tmp && echo served-inside > index.html && exec python3 -c 'import http.server as h; "
    's = h.ThreadingHTTPServer(("127.0.0.1", 8000), h.SimpleHTTPRequestHandler); '
    'open("/workspace/listening", "w").close(); s.serve_forever()\''
)
DOORS_SCRIPT = [
    _terminal(
        "echo kept > note.txt; curl -sS -m 20 http://fake-llm:8788/v1/models; echo; "
        "curl -sS -m 20 http://docker-proxy:2375/version; echo"
    ),
    {"text": "Fetched."},
    _terminal(SERVER, background=True, wait_for="listening"),
    {"text": "Serving."},
    _terminal("ls /workspace; ls /run/hermetic-net"),
    {"text": "Listed."},
]


def test_allowlists_exposed_ports_and_checkpoints_work_in_the_stack(
    tmp_path: Path, images: dict[str, str]
) -> None:
    """The scripted model's service is on the sandbox's allowlist (its name and the project network's
    range), the socket proxy's is not; the first tool call that writes is checkpointed (the copy's helper
    through the proxy), a port inside is exposed in the control plane's container, and a rollback
    restores the checkpoint."""
    subnet = random_subnet()
    settings = {
        "HERMETIC_SANDBOX__NETWORK": "allowlist",
        "HERMETIC_SANDBOX__ALLOW": json.dumps(["fake-llm:8788", subnet]),
    }
    stack = Stack(tmp_path, [], {}, DOORS_SCRIPT, settings, subnet)
    try:
        made = stack.compose("run", "--rm", "-T", "hermetic", "hermetic", "token", "create", "--name", "t")
        token = made.stdout.strip().splitlines()[-1]
        stack.compose("up", "-d")
        stack.wait_healthy()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=stack.url, headers=headers, timeout=60) as client:
            session = client.post("/sessions", json={"title": "doors"}).json()["id"]
            fetched = [m for m in _say(client, session, "fetch")["messages"] if m["role"] == "tool"][-1]
            assert '"id": "scripted"' in fetched["content"], fetched["content"]
            assert "docker-proxy:2375 is not on this sandbox's allowlist" in fetched["content"]
            checkpoints = client.get(f"/sessions/{session}/checkpoints").json()
            assert [c["n"] for c in checkpoints] == [1], checkpoints

            _say(client, session, "serve")
            exposed = client.post(f"/sessions/{session}/exposures", json={"port": 8000})
            assert exposed.status_code == 201, exposed.text
            fetch = f"import urllib.request; print(urllib.request.urlopen({exposed.json()['url']!r}).read())"
            inside = stack.compose("exec", "-T", "hermetic", "python3", "-c", fetch).stdout
            assert inside.strip() == "b'served-inside\\n'", inside

            rolled = client.post(f"/sessions/{session}/rollback", json={"n": 1})
            assert rolled.status_code == 200, rolled.text
            listed = [m for m in _say(client, session, "list")["messages"] if m["role"] == "tool"][-1]
            assert "note.txt" not in listed["content"], listed["content"]  # written after the checkpoint
            assert "cannot open directory '/run/hermetic-net': Permission denied" in listed["content"]
        # a fresh volume took the mode and owner of the image's mount point
        mode = stack.compose("exec", "-T", "hermetic", "stat", "-c", "%a %U", "/data/.hermetic/net").stdout
        assert mode.split() == ["711", "hermetic"], mode
    finally:
        stack.compose("down", "-v", "--remove-orphans", check=False)


REPLICATED = {  # docker-compose.replicas.yml on the offline images, with a short lease
    "HERMETIC_AGENT_IMAGE": "hermetic-agent:offline",
    "HERMETIC_PROXY_IMAGE": "hermetic-docker-proxy:offline",
    "HERMETIC_POSTGRES_IMAGE": "hermetic-postgres:offline",
    "HERMETIC_API__LEASE_SECONDS": "3",
}
PLANES = ("hermetic-1", "hermetic-2", "hermetic-3")


def _sql(stack: Stack, query: str) -> list[str]:
    done = stack.compose("exec", "-T", "postgres", "psql", "-U", "hermetic", "-tA", "-c", query, check=False)
    return done.stdout.split() if done.returncode == 0 else []


def test_three_replicas_behind_the_balancer_serve_any_session_and_outlive_one_killed(
    tmp_path: Path, images: dict[str, str]
) -> None:
    """docker-compose.replicas.yml: three control planes on one PostgreSQL behind HAProxy. Every turn's
    message lands on the next replica (round robin), so most are forwarded to their session's owner; a
    killed replica's session is taken over by another and answered there, in a fresh sandbox."""
    stack = Stack(tmp_path, [], REPLICATED, files=("docker-compose.replicas.yml",), planes=PLANES)
    hosts: list[str] = []
    try:
        made = stack.compose("run", "--rm", "-T", "hermetic-1", "hermetic", "token", "create", "--name", "t")
        token = made.stdout.strip().splitlines()[-1]
        stack.compose("up", "-d")
        stack.wait_healthy()
        deadline = time.monotonic() + 120
        while len(addresses := _sql(stack, "SELECT address FROM replicas ORDER BY address")) < 3:
            assert time.monotonic() < deadline, stack.compose("logs", check=False).stdout[-3000:]
            time.sleep(0.5)
        assert addresses == [f"http://{plane}:8765" for plane in PLANES]
        client = docker.from_env()
        hosts = [client.containers.get(f"{stack.project}_{p}_1").attrs["Config"]["Hostname"] for p in PLANES]

        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=stack.url, headers=headers, timeout=120) as api:
            sessions = [api.post("/sessions", json={"title": f"r{n}"}).json()["id"] for n in range(3)]
            for session in sessions:
                tool = [m for m in _say(api, session, "run")["messages"] if m["role"] == "tool"]
                assert "from-the-sandbox\n1000" in tool[-1]["content"], tool
            owners = dict(
                row.split("|") for row in _sql(stack, "SELECT session_id || '|' || owner FROM session_leases")
            )
            assert set(owners) == set(sessions)
            assert len({owner.split(":")[0] for owner in owners.values()}) > 1  # spread over the replicas

            victim = owners[sessions[0]].split(":")[0]  # a replica's id starts with its container's hostname
            client.containers.get(victim).kill()
            detail = _say(api, sessions[0], "run again")  # after its lease lapses, on another replica
            tool = [m for m in detail["messages"] if m["role"] == "tool"]
            assert len(tool) == 2 and "from-the-sandbox\n1000" in tool[-1]["content"], detail["messages"]
            assert len(_answers(detail)) == 2  # each message answered once
            owner = _sql(stack, f"SELECT owner FROM session_leases WHERE session_id = '{sessions[0]}'")
            assert owner and not owner[0].startswith(f"{victim}:")
    finally:
        stack.compose("down", "-v", "--remove-orphans", check=False)
        for container in docker.from_env().containers.list(all=True, filters={"label": MANAGED_LABEL}):
            if (container.labels.get(OWNER_LABEL) or "").split(":")[0] in hosts:  # the killed one's
                container.remove(force=True)
