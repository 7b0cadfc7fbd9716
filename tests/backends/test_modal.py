"""The Modal adapter: what it asks of Modal's SDK, and how it keeps the channel whole (via the stand-in)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from modal_standin import FakeSandbox, FakeStreamWriter
from pydantic import TypeAdapter, ValidationError

from backends import BackendConfig, BackendUnavailable, SandboxSpec, UnsupportedSpec
from backends.modal import (
    DOCKERFILE,
    WRITE_CHUNK,
    ModalBackend,
    ModalConfig,
    ModalSandbox,
    ModalStreamTransport,
)
from backends.snapshots import SnapshotStore


@pytest.fixture(scope="module")
def modal_backend() -> ModalBackend:
    backend = get_backend("modal-standin")
    assert isinstance(backend, ModalBackend)
    return backend


@pytest.fixture
def created(modal_backend: ModalBackend) -> Iterator[list[FakeSandbox]]:
    """The stand-in sandboxes created during one test."""
    before = len(FakeSandbox.created)
    new: list[FakeSandbox] = []
    yield new
    del FakeSandbox.created[before:]


def _create(backend: ModalBackend, spec: SandboxSpec, created: list[FakeSandbox]) -> ModalSandbox:
    before = len(FakeSandbox.created)
    sandbox = backend.create(spec)
    created.extend(FakeSandbox.created[before:])
    return sandbox


def _standin(sandbox: ModalSandbox) -> FakeSandbox:
    assert isinstance(sandbox.modal, FakeSandbox)
    return sandbox.modal


def test_network_none_blocks_the_network(modal_backend: ModalBackend, created: list[FakeSandbox]) -> None:
    with _create(modal_backend, SandboxSpec(network="none"), created):
        kwargs = created[0].create_kwargs
    assert kwargs["block_network"] is True
    assert "outbound_cidr_allowlist" not in kwargs and "outbound_domain_allowlist" not in kwargs


def test_allowlist_becomes_cidr_and_domain_allowlists(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    spec = SandboxSpec(network="allowlist", allow=["10.0.0.0/8", "1.2.3.4", "pypi.org", "*.github.com"])
    with _create(modal_backend, spec, created):
        kwargs = created[0].create_kwargs
    assert "block_network" not in kwargs
    assert kwargs["outbound_cidr_allowlist"] == ["10.0.0.0/8", "1.2.3.4/32"]
    assert kwargs["outbound_domain_allowlist"] == ["pypi.org", "*.github.com"]


def test_empty_allowlist_blocks_everything_and_full_network_sets_nothing(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    with _create(modal_backend, SandboxSpec(network="allowlist"), created):
        pass
    with _create(modal_backend, SandboxSpec(network="full"), created):
        pass
    assert created[0].create_kwargs["block_network"] is True
    assert not {"block_network", "outbound_cidr_allowlist", "outbound_domain_allowlist"} & set(
        created[1].create_kwargs
    )


def test_allowlist_entry_with_a_scheme_is_refused_before_anything_is_created(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    with pytest.raises(UnsupportedSpec, match="neither a CIDR nor a host name"):
        _create(modal_backend, SandboxSpec(network="allowlist", allow=["pypi.org:8443"]), created)
    with pytest.raises(ValidationError, match="https://pypi.org"):
        SandboxSpec(network="allowlist", allow=["https://pypi.org"])
    assert created == []


def test_credentials_are_refused_before_anything_is_created(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    from backends.network import Credential

    key = Credential(host="api.example", header="Authorization", value="Bearer ${HM_KEY}")
    spec = SandboxSpec(network="allowlist", allow=["api.example"], credentials=[key])
    with pytest.raises(UnsupportedSpec, match="credentials need Hermetic's egress proxy"):
        _create(modal_backend, spec, created)
    assert created == []


def test_cpu_and_memory_are_hard_limits_and_ttl_is_the_lifetime(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    with _create(modal_backend, SandboxSpec(cpus=0.5, memory="300m", ttl=120), created):
        pass
    with _create(modal_backend, SandboxSpec(), created):
        pass
    limited, default = created[0].create_kwargs, created[1].create_kwargs
    assert limited["cpu"] == (0.5, 0.5) and limited["memory"] == (300, 300) and limited["timeout"] == 120
    assert default["timeout"] == ModalConfig().timeout and default["memory"] == (1024, 1024)
    assert limited["app"] == "app:hermetic" and limited["workdir"] == "/workspace"
    assert created[0].create_args == ("sleep", "infinity")


def test_environment_reaches_the_sandbox_and_runtime_settings_only_the_runtime(
    modal_backend: ModalBackend, created: list[FakeSandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOWED_VAR", "passed-in")
    monkeypatch.setenv("NOT_ALLOWED", "secret")
    with _create(modal_backend, SandboxSpec(env={"EXPLICIT": "set"}, env_allow=["ALLOWED_VAR"]), created):
        pass
    assert created[0].create_kwargs["env"] == {"ALLOWED_VAR": "passed-in", "EXPLICIT": "set"}
    (args, kwargs) = created[0].exec_calls[0]
    assert set(kwargs["env"]) == {"HERMETIC_WORKSPACE", "HERMETIC_ROOTS", "HERMETIC_OUTPUT_LIMIT"}


def test_the_runtime_exec_reads_bytes_and_has_no_timeout(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    with _create(modal_backend, SandboxSpec(), created):
        pass
    (args, kwargs) = created[0].exec_calls[0]
    assert args[:2] == ("python3", "-c") and kwargs["text"] is False
    assert kwargs.get("timeout") is None  # an exec timeout would kill the runtime, not the command


def test_command_timeout_keeps_the_modal_sandbox_and_the_runtime(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    with _create(modal_backend, SandboxSpec(), created) as sb:
        result = sb.run("sleep 30", timeout=1)
        assert result["timed_out"]
        assert sb.run("echo still here")["output"] == "still here\n"
        assert _standin(sb).poll() is None and len(_standin(sb).exec_calls) == 1


def test_closing_terminates_the_modal_sandbox(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    sb = _create(modal_backend, SandboxSpec(), created)
    sb.close()
    assert created[0].poll() is not None and all(p.poll() is not None for p in created[0].processes)


def test_a_snapshot_is_snapshot_filesystem_and_a_sandbox_from_it_starts_from_its_image(
    modal_backend: ModalBackend, created: list[FakeSandbox], tmp_path: Path
) -> None:
    modal_backend.snapshots = SnapshotStore(tmp_path)
    with _create(modal_backend, SandboxSpec(), created) as sb:
        sb.run("echo saved > kept.txt")
        snapshot = sb.snapshot()
    image_id = snapshot.location["image"]
    assert image_id.startswith("im-") and snapshot.backend == "modal"
    with _create(modal_backend, SandboxSpec(from_snapshot=snapshot.id), created) as restored:
        assert restored.run("cat kept.txt")["output"] == "saved\n"
    assert repr(created[1].create_kwargs["image"]) == f"Image.from_id({image_id!r})"


def test_ended_modal_sandbox_is_replaced_on_next_use_and_the_loss_is_told(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    with _create(modal_backend, SandboxSpec(), created) as sb:
        sb.run("echo x > note.txt")
        _standin(sb).terminate()  # Modal ended it: its timeout passed, or someone terminated it
        assert sb._channel is not None
        sb._channel.wait_closed(10)  # the stream's end is how the control plane learns it
        result = sb.run("cat note.txt 2>&1; echo done")
        notices = sb.pop_notices()
        assert sb.modal is FakeSandbox.created[-1] and sb.modal is not created[0]
    assert "No such file" in result["output"] and result["output"].endswith("done\n")
    assert len(notices) == 1 and "new one was created" in notices[0] and "workspace were lost" in notices[0]


def test_many_threads_calling_at_once_all_get_their_answers(
    modal_backend: ModalBackend, created: list[FakeSandbox]
) -> None:
    answers: list[Any] = []
    with _create(modal_backend, SandboxSpec(), created) as sb:

        def ping() -> None:
            for _ in range(40):
                answers.append(sb.call("sys.ping", timeout=30))

        threads = [threading.Thread(target=ping) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert answers == [{"pong": True}] * 320


class _SlowPipe:
    """A pipe whose writes take a while, like Modal's drain (a network round trip)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        time.sleep(0.001)
        self.writes.append(data)

    def flush(self) -> None:
        pass


class _Process:
    def __init__(self, pipe: _SlowPipe) -> None:
        self.stdin = FakeStreamWriter(pipe)
        self.stdout: list[bytes] = []
        self.stderr: list[bytes] = []


def test_concurrent_sends_are_not_cleared_unsent_by_another_threads_drain() -> None:
    pipe = _SlowPipe()
    transport = ModalStreamTransport(_Process(pipe), "t")
    lines = [b"%d-%s\n" % (i, b"x" * 100) for i in range(400)]

    def send(part: list[bytes]) -> None:
        for line in part:
            transport.send(line)

    threads = [threading.Thread(target=send, args=(lines[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(b"".join(pipe.writes).splitlines(keepends=True)) == sorted(lines)


def test_a_large_message_goes_in_drained_chunks_under_modals_buffer_limit() -> None:
    pipe = _SlowPipe()
    payload = bytes(range(256)) * (3 * WRITE_CHUNK // 256 + 7)
    ModalStreamTransport(_Process(pipe), "t").send(payload)
    assert b"".join(pipe.writes) == payload and max(map(len, pipe.writes)) <= WRITE_CHUNK


def test_images_own_from_the_dockerfile_snapshots_by_id_others_from_the_registry() -> None:
    backend = ModalBackend(sandbox_api=FakeSandbox)
    assert DOCKERFILE.is_file()
    assert repr(backend.image("hermetic-sandbox:browser")).startswith("Image.from_dockerfile(")
    assert repr(backend.image("im-abc")) == "Image.from_id('im-abc')"
    configured = ModalBackend(ModalConfig(image="ghcr.io/me/hermetic-sandbox:slim"), sandbox_api=FakeSandbox)
    assert not repr(configured.image("hermetic-sandbox:slim")).startswith("Image.from_dockerfile(")
    assert backend.image("python:3.12-slim") is backend.image("python:3.12-slim")  # built once


def test_host_mounts_and_ttls_beyond_a_day_are_refused(modal_backend: ModalBackend) -> None:
    with pytest.raises(UnsupportedSpec, match="mounts"):
        modal_backend.create(SandboxSpec(mounts=[{"source": "/etc", "target": "/etc2"}]))
    with pytest.raises(UnsupportedSpec, match="at most 86400"):
        modal_backend.create(SandboxSpec(ttl=90_000))


def test_without_credentials_the_backend_says_how_to_log_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODAL_TOKEN_ID", "")  # the environment outranks ~/.modal.toml
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "")
    with pytest.raises(BackendUnavailable, match="modal token new"):
        ModalConfig().build()


def test_config_parses_as_a_backend_config_and_forbids_unknown_fields() -> None:
    parsed = TypeAdapter(BackendConfig).validate_python({"type": "modal", "app_name": "mine", "region": "us"})
    assert isinstance(parsed, ModalConfig) and parsed.app_name == "mine"
    with pytest.raises(ValueError, match="Extra inputs"):
        ModalConfig.model_validate({"type": "modal", "gpu": "A100"})
