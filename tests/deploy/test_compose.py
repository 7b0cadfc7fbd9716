"""compose/: the compose file as docker-compose reads it, and the Docker socket proxy's rules run by a
real HAProxy in front of the real dockerd."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml
from netns import Upstream, upstream  # noqa: F401 (the fixture)

from backends import SandboxSpec, UnsupportedSpec
from backends.base import new_sandbox_id
from backends.docker import NET_VOLUME_DIR, DockerBackend, DockerConfig, DockerSandbox
from backends.docker_volumes import HELPER_CAPS, helper_config
from backends.errors import BackendUnavailable
from backends.network import NET_ROOT, Credential, read_audit
from backends.snapshots import SnapshotStore

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
NAME = "hm-0123456789ab"  # a sandbox name no test creates
API = "/v1.41"


def compose_config(*args: str, file: str = "docker-compose.yml") -> dict[str, Any]:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is missing: apt-get install docker-compose")
    done = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE / file), *args, "config"],
        capture_output=True,
        text=True,
        env={**os.environ, "POSTGRES_PASSWORD": "secret"},
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


@pytest.mark.parametrize("profiles", [[], ["--profile", "postgres"], ["--profile", "build"]])
def test_compose_file_is_valid_and_only_the_proxy_holds_the_socket(profiles: list[str]) -> None:
    services = compose_config(*profiles)["services"]
    control = services["hermetic"]
    assert control["environment"]["DOCKER_HOST"] == "tcp://docker-proxy:2375"
    assert control["environment"]["HERMETIC_ROOT"] == "/data"
    assert not any("docker.sock" in str(volume) for volume in control.get("volumes", []))
    assert any(str(v).endswith(":/data:rw") or str(v).endswith(":/data") for v in control["volumes"])
    sockets = [
        name for name, svc in services.items() if any("docker.sock" in str(v) for v in svc.get("volumes", []))
    ]
    assert sockets == ["docker-proxy"]
    assert "/var/run/docker.sock:/var/run/docker.sock:ro" in services["docker-proxy"]["volumes"]
    assert set(services["docker-proxy"]["networks"]) == {"docker-api"}
    assert services["postgres"]["profiles"] == ["postgres"]
    assert services["sandbox-slim"]["image"] == "hermetic-sandbox:slim"


def test_the_replicated_compose_file_hardens_every_replica_and_names_each_ones_address() -> None:
    services = compose_config(file="docker-compose.replicas.yml")["services"]
    planes = sorted(name for name in services if name.startswith("hermetic-"))
    assert planes == ["hermetic-1", "hermetic-2", "hermetic-3"]
    for name in planes:
        plane = services[name]
        env = plane["environment"]
        assert env["HERMETIC_API__REPLICA_ADDRESS"] == f"http://{name}:8765"
        assert env["HERMETIC_DATABASE_URL"] == "postgresql+psycopg://hermetic:secret@postgres:5432/hermetic"
        assert env["DOCKER_HOST"] == "tcp://docker-proxy:2375" and "ports" not in plane
        assert (
            plane["read_only"]
            and plane["cap_drop"] == ["ALL"]
            and plane["security_opt"] == ["no-new-privileges"]
        )
    sockets = [
        name for name, svc in services.items() if any("docker.sock" in str(v) for v in svc.get("volumes", []))
    ]
    assert sockets == ["docker-proxy"]
    assert [str(port).split(":")[0] for port in services["balancer"]["ports"]] == ["127.0.0.1"]


# -- the proxy ---------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _docker_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the proxy test needs dockerd on a unix socket, DOCKER_HOST is {host}")
    return host.removeprefix("unix://")


class Proxy:
    def __init__(self, port: int, version: tuple[int, int]) -> None:
        self.port, self.version = port, version
        self.url = f"tcp://127.0.0.1:{port}"

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> int:
        """The status of one raw request (no client-side normalization of the path)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
            sent = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, data, {**sent, **(headers or {})})
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if haproxy is None:
        pytest.skip("haproxy is missing: apt-get install haproxy")
    try:
        DockerBackend()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    port = _free_port()
    config = (COMPOSE / "docker-proxy.cfg").read_text()
    # Only the listen address and the socket path change; every rule is the file's own.
    config = config.replace("bind :2375", f"bind 127.0.0.1:{port}")
    config = config.replace("server dockerd /var/run/docker.sock", f"server dockerd {_docker_socket()}")
    path = tmp_path_factory.mktemp("proxy") / "docker-proxy.cfg"
    path.write_text(config)
    found = re.search(
        r"version (\d+)\.(\d+)", subprocess.run([haproxy, "-v"], capture_output=True, text=True).stdout
    )
    assert found, "haproxy -v printed no version"
    process = subprocess.Popen([haproxy, "-f", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                time.sleep(0.05)
        yield Proxy(port, (int(found[1]), int(found[2])))
    finally:
        process.terminate()
        process.wait(10)
        _remove_leftovers()


def _remove_leftovers() -> None:
    """What a wrongly allowed call may have left."""
    direct = docker.from_env()
    for container in (NAME, HELPER):
        with contextlib.suppress(docker.errors.NotFound):
            direct.api.remove_container(container, force=True)
    for volume in (f"{NAME}-workspace", SNAPSHOT_VOLUME):
        with contextlib.suppress(docker.errors.NotFound):
            direct.api.remove_volume(volume, force=True)


def test_every_call_the_backend_makes_is_let_through(proxy: Proxy) -> None:
    """Version negotiation, ping, the reaper's lists, image, create, attach, start, inspect, stop, removal
    of container and volume: each would raise APIError on a 403."""
    backend = DockerBackend(DockerConfig(base_url=proxy.url))  # /version, /_ping, reap()
    spec = SandboxSpec()
    backend.ensure_image(spec.image)
    sandbox = DockerSandbox(backend, new_sandbox_id(), spec)
    try:
        sandbox._provision()
        assert sandbox.container.status == "created"
        channel = sandbox._connect()  # attach, start, handshake
        assert sandbox.container.status == "running" and channel.info["code_hash"]
        channel.close()
        assert sandbox._recover().startswith("the sandbox's runtime stopped")  # stop
        assert sandbox.container.status == "exited" and sandbox._volume_exists()
    finally:
        sandbox._destroy()
    assert backend.reap() == 0
    direct = docker.from_env()  # the proxy refuses an unfiltered or name-filtered list
    assert not direct.containers.list(all=True, filters={"name": sandbox.id})


def test_a_sandbox_runs_commands_through_the_proxy(proxy: Proxy) -> None:
    """The attach stream through the proxy (Debian's HAProxy 2.6 carries it: the request has no body),
    and a recovery after the runtime was lost: stop, then attach and start again."""
    backend = DockerBackend(DockerConfig(base_url=proxy.url))
    with backend.create(SandboxSpec()) as sandbox:
        result = sandbox.run("echo through-the-proxy; id -u; echo kept > note", timeout=30)
        assert result["output"].split() == ["through-the-proxy", "1000"]
        assert sandbox._channel is not None
        sandbox._channel.close()  # the stream is gone: the runtime reads EOF and the container stops
        assert sandbox.run("cat note", timeout=30)["output"] == "kept\n"
        assert "runtime stopped and was restarted" in sandbox.pop_notices()[0]
    assert backend.reap() == 0


def test_snapshot_restore_and_fork_work_through_the_proxy(proxy: Proxy, tmp_path: Path) -> None:
    """The copy's helper (hm-copy-*, its volumes created and removed), the sandbox paused for the last
    pass, a restore and a fork: each would raise on a 403."""
    backend = DockerBackend(DockerConfig(base_url=proxy.url))
    backend.snapshots = SnapshotStore(tmp_path / "snapshots")
    with backend.create(SandboxSpec()) as original:
        original.run("echo before > kept.txt && cd /tmp && export MODE=release")
        snapshot = original.snapshot(label="through the proxy")
        original.run("echo after > /workspace/kept.txt")
        assert original.paused_seconds > 0
        with backend.create(SandboxSpec(from_snapshot=snapshot.id)) as restored:
            assert (
                restored.run('cat /workspace/kept.txt; pwd; echo "$MODE"')["output"]
                == "before\n/tmp\nrelease\n"
            )
        with original.fork() as fork:
            fork.run("echo fork > /workspace/kept.txt")
            assert original.run("cat /workspace/kept.txt")["output"] == "after\n"
            assert fork.run("cat /workspace/kept.txt")["output"] == "fork\n"
            volumes = {original.volume_name, fork.volume_name, snapshot.location["volume"]}
        backend.delete_snapshot(snapshot.id)
    assert backend.reap() == 0
    direct = docker.from_env()
    assert not direct.volumes.list(filters={"name": snapshot.location["volume"]})
    helpers = [c for c in direct.containers.list(all=True) if c.name.startswith("hm-copy-")]
    mine = [c.name for c in helpers if volumes & {m.get("Name") for m in c.attrs["Mounts"]}]
    assert not mine  # this test's copies (other processes on this dockerd may be copying their own)


@pytest.fixture(scope="module")
def net_volume() -> Iterator[str]:
    """The sockets volume as compose gives it: the directory this process serves them from (NET_ROOT),
    which in compose is the volume's mount in the control plane's container. Made directly, not through
    the proxy (which refuses exactly this: a volume bound to a host directory)."""
    name = f"hermetic-net-{uuid.uuid4().hex[:8]}"
    NET_ROOT.mkdir(parents=True, exist_ok=True)
    options = {"type": "none", "o": "bind", "device": str(NET_ROOT)}
    docker.from_env().volumes.create(name, driver="local", driver_opts=options)
    try:
        yield name
    finally:
        docker.from_env().api.remove_volume(name, force=True)


@pytest.fixture(scope="module")
def doors(proxy: Proxy, net_volume: str) -> DockerBackend:
    """A backend through the proxy whose sandboxes reach their sockets in the shared volume."""
    return DockerBackend(DockerConfig(base_url=proxy.url, net_volume=net_volume))


def test_an_allowlist_works_through_the_proxy_and_the_sockets_volume(
    doors: DockerBackend,
    upstream: Upstream,  # noqa: F811
) -> None:
    spec = SandboxSpec(network="allowlist", allow=["pypi.hm14.test"])
    with doors.create(spec) as sandbox:
        assert (
            sandbox.run("curl -sS http://pypi.hm14.test/host", timeout=60)["output"]
            == "host=pypi.hm14.test\n"
        )
        refused = sandbox.run("curl -sS http://other.hm14.test/host", timeout=60)["output"]
        assert "other.hm14.test:80 is not on this sandbox's allowlist" in refused
        mounts = {m["Destination"]: m for m in sandbox.container.attrs["Mounts"]}
        assert mounts[NET_VOLUME_DIR]["Name"] == doors.net_volume and "/run/hermetic" not in mounts
    assert [e["host"] for e in read_audit(sandbox.id)] == ["pypi.hm14.test", "other.hm14.test"]


def test_no_sandbox_can_list_the_sockets_volume_nor_reach_another_sandboxs(doors: DockerBackend) -> None:
    spec = SandboxSpec(network="allowlist", allow=["pypi.hm14.test"])
    with doors.create(spec) as first, doors.create(SandboxSpec()) as second:
        assert first.egress is not None
        mine = first.egress.socket_dir.parent.name
        assert mine.startswith(f"{first.id}.") and len(mine) == len(first.id) + 13
        assert first.run(f"ls {NET_VOLUME_DIR}/{mine}/sock")["output"].split() == ["egress.sock"]
        for sandbox in (first, second):
            listing = sandbox.run(f"ls {NET_VOLUME_DIR} 2>&1; echo $?")["output"]
            assert "Permission denied" in listing and listing.endswith("2\n"), listing
        guessed = second.run(f"ls {NET_VOLUME_DIR}/{first.id} 2>&1")["output"]
        assert "No such file" in guessed, guessed
        assert second.run("env | grep -c hermetic-net; true")["output"] == "0\n"  # the runtime's own


def test_an_exposed_port_answers_through_the_proxy_and_the_sockets_volume(doors: DockerBackend) -> None:
    with doors.create(SandboxSpec()) as sandbox:
        serve = (
            "cd /tmp && echo served-inside > index.html && exec python3 -m http.server 8000 --bind 127.0.0.1"
        )
        sandbox.call("proc.spawn", {"command": serve})
        sandbox.run("for i in $(seq 200); do grep -qi ':1F40 .* 0A' /proc/net/tcp && break; sleep 0.05; done")
        assert sandbox.ingress is not None
        exposure = sandbox.ingress.expose(8000)
        with urllib.request.urlopen(exposure.url, timeout=10) as response:
            assert response.read() == b"served-inside\n"
        directory = sandbox.ingress.dir.parent
    assert not directory.exists(), "the sandbox's directory goes with it"


def test_credentials_are_refused_with_the_sockets_volume(doors: DockerBackend) -> None:
    spec = SandboxSpec(
        network="allowlist",
        allow=["pypi.hm14.test"],
        credentials=[Credential(host="pypi.hm14.test", header="Authorization", value="Bearer ${HOME}")],
    )
    with pytest.raises(UnsupportedSpec, match="egress credentials on docker need dockerd on this machine"):
        doors.create(spec)


def _create_body(**host: Any) -> dict[str, Any]:
    """The create body backends/docker.py sends, with HostConfig changes."""
    from docker import APIClient
    from docker.types import LogConfig, Mount

    api = APIClient(base_url="unix:///nonexistent", version="1.41")
    host_config = api.create_host_config(
        init=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        read_only=True,
        tmpfs={"/tmp": "rw,size=1m"},
        mounts=[Mount("/workspace", f"{NAME}-workspace", type="volume")],
        network_mode="none",
        pids_limit=64,
        log_config=LogConfig(type=LogConfig.types.NONE),
    )
    host_config.update(host)
    body: dict[str, Any] = api.create_container_config(
        "hermetic-sandbox:slim",
        ["python3", "-m", "sandboxes"],
        user="1000:1000",
        host_config=host_config,
        stdin_open=True,
    )
    return body


def test_the_backends_create_body_is_let_through(proxy: Proxy) -> None:
    """The control for the refusals below: the unchanged body creates a container."""
    name = new_sandbox_id()
    assert proxy.request("POST", f"{API}/containers/create?name={name}", _create_body()) == 201
    assert proxy.request("DELETE", f"{API}/containers/{name}?force=1&v=1") == 204
    assert proxy.request("DELETE", f"{API}/volumes/{NAME}-workspace") in (204, 404)


HOST_BOUND_MOUNT = {
    "Target": "/workspace",
    "Source": f"{NAME}-workspace",
    "Type": "volume",
    "VolumeOptions": {
        "DriverConfig": {"Name": "local", "Options": {"type": "none", "o": "bind", "device": "/"}}
    },
}
FORBIDDEN_CREATES = {
    "privileged": _create_body(Privileged=True),
    "capability added": _create_body(CapAdd=["SYS_ADMIN"]),
    "caps kept": _create_body(CapDrop=[]),
    "seccomp off": _create_body(SecurityOpt=["no-new-privileges", "seccomp=unconfined"]),
    "host pid namespace": _create_body(PidMode="host"),
    "host network": _create_body(NetworkMode="host"),
    "bind of /": _create_body(Binds=["/:/host"]),
    "bind mount": _create_body(Mounts=[{"Target": "/host", "Source": "/", "Type": "bind"}]),
    "foreign volume": _create_body(Mounts=[{"Target": "/w", "Source": "hermetic-home", "Type": "volume"}]),
    "device": _create_body(Devices=[{"PathOnHost": "/dev/sda", "PathInContainer": "/dev/sda"}]),
    "writable root": _create_body(ReadonlyRootfs=False),
    "root user": {**_create_body(), "User": "0"},
    "other image": {**_create_body(), "Image": "debian:bookworm"},
    "logs shipped away": _create_body(
        LogConfig={"Type": "syslog", "Config": {"syslog-address": "udp://x:514"}}
    ),
    # the local driver's options make a volume a bind mount: of the host's /, root on the host
    "volume bound to the host": _create_body(Mounts=[HOST_BOUND_MOUNT]),
}


HELPER = "hm-copy-0123456789ab"  # a helper name no test creates
SNAPSHOT_VOLUME = "hm-snap-0123456789ab"


def _helper_body(*, config: dict[str, Any] | None = None, **host: Any) -> dict[str, Any]:
    """The snapshot copy's helper as backends/docker_volumes.py creates it, with changes."""
    from docker import APIClient

    api = APIClient(base_url="unix:///nonexistent", version="1.41")
    args = helper_config(api, "hermetic-sandbox:slim", f"{NAME}-workspace", SNAPSHOT_VOLUME, {})
    args["host_config"].update(host)
    body: dict[str, Any] = api.create_container_config(**args)
    return {**body, **(config or {})}


def test_the_copy_helpers_create_body_is_let_through(proxy: Proxy) -> None:
    """The control for the refusals below."""
    try:
        assert proxy.request("POST", f"{API}/containers/create?name={HELPER}", _helper_body()) == 201
        assert proxy.request("DELETE", f"{API}/containers/{HELPER}?force=1") == 204
    finally:
        _remove_leftovers()


FORBIDDEN_HELPERS = {
    "privileged": _helper_body(Privileged=True),
    "another capability": _helper_body(CapAdd=[*HELPER_CAPS, "SYS_ADMIN"]),
    "a capability instead": _helper_body(CapAdd=["CHOWN", "DAC_OVERRIDE", "FOWNER", "SYS_ADMIN"]),
    "caps kept": _helper_body(CapDrop=[]),
    "a network": _helper_body(NetworkMode="bridge"),
    "network enabled": _helper_body(config={"NetworkDisabled": False}),
    "host network": _helper_body(NetworkMode="host"),
    "host bind": _helper_body(Binds=["/:/host"]),
    "bind mount": _helper_body(Mounts=[{"Target": "/dst", "Source": "/", "Type": "bind"}]),
    "home volume": _helper_body(Mounts=[{"Target": "/dst", "Source": "hermetic-home", "Type": "volume"}]),
    "sockets volume": _helper_body(Mounts=[{"Target": "/dst", "Source": "hermetic-net", "Type": "volume"}]),
    "volume bound to the host": _helper_body(Mounts=[{**HOST_BOUND_MOUNT, "Target": "/dst"}]),
    "tmpfs": _helper_body(Tmpfs={"/x": "rw"}),
    "seccomp off": _helper_body(SecurityOpt=["no-new-privileges", "seccomp=unconfined"]),
    "new privileges": _helper_body(SecurityOpt=[]),
    "writable root": _helper_body(ReadonlyRootfs=False),
    "host pid namespace": _helper_body(PidMode="host"),
    "device": _helper_body(Devices=[{"PathOnHost": "/dev/sda", "PathInContainer": "/dev/sda"}]),
    "other image": _helper_body(config={"Image": "debian:bookworm"}),
    "logs shipped away": _helper_body(
        LogConfig={"Type": "syslog", "Config": {"syslog-address": "udp://x:514"}}
    ),
}


@pytest.mark.parametrize("case", sorted(FORBIDDEN_HELPERS))
def test_a_widened_copy_helper_is_refused(proxy: Proxy, case: str) -> None:
    assert proxy.request("POST", f"{API}/containers/create?name={HELPER}", FORBIDDEN_HELPERS[case]) == 403


def test_the_helpers_privileges_go_with_its_name_only(proxy: Proxy) -> None:
    """Root and the four capabilities for hm-copy-* only: not for a sandbox's name, nor any other."""
    for name in (NAME, "other", "hm-copy-0123", f"{HELPER}0"):
        assert proxy.request("POST", f"{API}/containers/create?name={name}", _helper_body()) == 403
    assert proxy.request("POST", f"{API}/containers/create", _helper_body()) == 403
    for path in ("exec", "archive?path=/", "update"):
        assert proxy.request("POST", f"{API}/containers/{HELPER}/{path}", {"Cmd": ["sh"]}) == 403


@pytest.mark.parametrize(
    "body",
    [
        {
            "Name": SNAPSHOT_VOLUME,
            "Driver": "local",
            "DriverOpts": {"type": "none", "o": "bind", "device": "/"},
        },
        {"Name": SNAPSHOT_VOLUME, "DriverOpts": {"device": "/"}},
        {"Name": SNAPSHOT_VOLUME, "Driver": "nfs"},
        {"Name": "hermetic-home"},
        {"Name": "hm-snap-0123"},
        {"Name": SNAPSHOT_VOLUME, "name": "hermetic-home"},
    ],
    ids=["bind of /", "options", "other driver", "foreign name", "bad name", "name twice"],
)
def test_a_volume_create_with_options_or_a_foreign_name_is_refused(
    proxy: Proxy, body: dict[str, Any]
) -> None:
    assert proxy.request("POST", f"{API}/volumes/create", body) == 403


def test_a_plain_volume_create_is_let_through(proxy: Proxy) -> None:
    body = {"Name": SNAPSHOT_VOLUME, "Driver": None, "DriverOpts": None, "Labels": {"org.hermetic.test": "1"}}
    assert proxy.request("POST", f"{API}/volumes/create", body) == 201
    assert proxy.request("DELETE", f"{API}/volumes/{SNAPSHOT_VOLUME}") == 204


@pytest.mark.parametrize("case", sorted(FORBIDDEN_CREATES))
def test_a_widened_container_create_is_refused(proxy: Proxy, case: str) -> None:
    assert proxy.request("POST", f"{API}/containers/create?name={NAME}", FORBIDDEN_CREATES[case]) == 403


def test_create_bodies_that_could_hide_a_key_are_refused(proxy: Proxy) -> None:
    path = f"{API}/containers/create?name={NAME}"
    text = json.dumps(_create_body())
    assert (
        proxy.request("POST", path, (text[:-1] + ', "user": "0"}').encode()) == 403
    )  # dockerd takes the last
    assert (
        proxy.request(
            "POST", path, text.replace('"Init": true', '"Init": true, "Privil\\u0065ged": true').encode()
        )
        == 403
    )
    assert (
        proxy.request("POST", path, text.replace('"CapDrop": ["ALL"]', '"CapDrop": ["\\u0041LL"]').encode())
        == 403
    )
    assert proxy.request("POST", f"{API}/containers/create?name=other", _create_body()) == 403
    assert proxy.request("POST", f"{API}/containers/create", _create_body()) == 403
    chunked = {"Transfer-Encoding": "chunked"}
    body = text.encode()
    chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    assert proxy.request("POST", path, chunk, chunked) == 403


def test_a_start_with_a_host_config_is_refused(proxy: Proxy) -> None:
    """Before API 1.24 a start's body is a HostConfig dockerd still applies (its binds too): a call that
    takes no body is let through only without one, at any API version."""
    assert proxy.request("POST", f"{API}/containers/create?name={NAME}", _create_body()) == 201
    try:
        for version in ("/v1.23", API):
            assert proxy.request("POST", f"{version}/containers/{NAME}/start", {"Binds": ["/:/host"]}) == 403
        mounts = docker.from_env().api.inspect_container(NAME)["Mounts"]
        assert [m["Destination"] for m in mounts] == ["/workspace"], mounts
    finally:
        _remove_leftovers()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/build", None),
        ("POST", "/images/create?fromImage=alpine&tag=latest", None),
        ("POST", "/images/load", None),
        ("DELETE", "/images/hermetic-sandbox:slim", None),
        ("GET", "/secrets", None),
        ("POST", "/swarm/init", {}),
        ("GET", "/plugins", None),
        ("POST", "/plugins/pull?remote=x", None),
        ("GET", "/info", None),
        ("GET", "/events", None),
        ("POST", "/networks/create", {"Name": "x"}),
        ("GET", "/containers/json", None),  # unfiltered: every container on the host
        ("GET", f"/containers/{NAME}/archive?path=/", None),
        ("PUT", f"/containers/{NAME}/archive?path=/", b""),
        ("POST", f"/commit?container={NAME}", {}),
        ("POST", "/containers/hermetic-postgres/attach?stream=1&stdin=1", None),  # not a sandbox
        ("POST", f"/containers/{NAME}/attach?stream=1&stdin=1", {"Cmd": ["sh"]}),  # with a body
        ("POST", f"/containers/{NAME}/update", {"Memory": 0}),
        ("POST", f"/containers/{NAME}/exec", {"Cmd": ["sh"]}),  # no exec at all, not even in a sandbox
        ("POST", f"/containers/{NAME}/exec", {"Cmd": ["sh"], "Privileged": True}),
        ("POST", "/containers/hermetic-postgres/exec", {"Cmd": ["sh"]}),  # a container Hermetic did not make
        ("POST", f"/exec/{'0' * 64}/start", {"Detach": False}),
        ("GET", "/containers/hermetic-postgres/json", None),  # its env holds secrets
        ("DELETE", "/containers/hermetic-postgres", None),
        ("DELETE", "/volumes/hermetic-home", None),
        ("GET", f"/containers/{NAME}/../../build", None),
        ("GET", "/containers/%68m-0123456789ab/json", None),
    ],
)
def test_calls_the_backend_never_makes_are_refused(proxy: Proxy, method: str, path: str, body: Any) -> None:
    assert proxy.request(method, API + path, body) == 403


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", f"/containers/{NAME}/attach?stream=1&stdin=1&stdout=1", None),
        ("POST", f"/containers/{NAME}/stop?t=5", None),
        ("GET", f"/containers/{NAME}/json", None),
        ("DELETE", f"/containers/{NAME}", None),
        ("GET", f"/volumes/{NAME}-workspace", None),
    ],
)
def test_allowed_calls_reach_dockerd(proxy: Proxy, method: str, path: str, body: Any) -> None:
    """The control for the refusals above: the same calls on a sandbox name get dockerd's own answer."""
    assert proxy.request(method, API + path, body) == 404
