"""Against Modal itself: runs only with credentials in the environment (it creates a real, billed sandbox).

    MODAL_TOKEN_ID=ak-... MODAL_TOKEN_SECRET=as-... python3 -m pytest -q -rs tests/backends/test_modal_live.py

The first run builds images/Dockerfile on Modal (about a minute); HERMETIC_MODAL_IMAGE=<registry image>
uses a prebuilt one instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from backends import Sandbox, SandboxSpec
from backends.modal import ModalConfig

pytestmark = pytest.mark.skipif(
    not (os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET")),
    reason="MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are not set",
)


@pytest.fixture(scope="module")
def live() -> Iterator[Sandbox]:
    config = ModalConfig(app_name="hermetic-tests", image=os.environ.get("HERMETIC_MODAL_IMAGE") or None)
    with config.build().create(SandboxSpec(ttl=900)) as sandbox:
        yield sandbox


def test_a_command_runs_in_a_real_modal_sandbox(live: Sandbox) -> None:
    result = live.run("echo hello from $(uname -s); cd /tmp; (exit 3)", session="command")
    assert result["output"] == "hello from Linux\n" and result["exit_code"] == 3 and result["cwd"] == "/tmp"


def test_a_file_written_natively_is_read_by_the_shell(live: Sandbox) -> None:
    live.call("fs.write", {"path": "live/note.txt", "content": "over the Modal stream\n"})
    assert live.run("cat live/note.txt")["output"] == "over the Modal stream\n"
    assert (
        live.call("fs.read", {"path": "live/note.txt", "numbered": False})["content"]
        == "over the Modal stream"
    )


def test_a_timeout_kills_the_command_and_keeps_the_sandbox(live: Sandbox) -> None:
    result = live.run("sleep 60", timeout=2)
    assert result["timed_out"]
    assert live.run("echo still here")["output"] == "still here\n"
