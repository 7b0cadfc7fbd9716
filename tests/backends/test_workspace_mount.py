"""A host directory as the sandbox's workspace (an editor's project, `hermetic acp`): mounted
read-write at the workdir on local and docker (the container runs as the directory's owner), and left
in place when the sandbox closes. Run as root (the suite's setup), so the directory can be given away."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import get_backend

from backends import SandboxSpec


@pytest.mark.parametrize("name", ["local", "docker"])
def test_a_host_directory_is_the_workspace(name: str, tmp_path: Path) -> None:
    backend = get_backend(name)
    project = tmp_path / "project"
    project.mkdir()
    (project / "in.txt").write_text("from the editor\n")
    if name == "docker":  # a user's project, writable by that user only (mode 755); local runs as us
        os.chown(project, 4321, 4321)
    with backend.create(SandboxSpec(workspace=str(project))) as sandbox:
        result = sandbox.run("cat /workspace/in.txt && echo from-the-sandbox > /workspace/out.txt && pwd")
        assert result["exit_code"] == 0, result
        assert "from the editor" in result["output"] and "/workspace" in result["output"]
    assert (project / "out.txt").read_text() == "from-the-sandbox\n"
    assert (project / "in.txt").read_text() == "from the editor\n"
    if name == "docker":  # the container ran as the directory's owner: the new file is the user's
        assert (project / "out.txt").stat().st_uid == 4321
