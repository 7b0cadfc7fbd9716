"""A suite named by a tap (`TAP/NAME`, the skills' taps and fetch code): a repository tap's directory, an
HTTP index's `suites` entry served on loopback; a name no tap lists is a clear error."""

from __future__ import annotations

import http.server
import json
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.evals import SuiteError, load_suite, resolve
from control_plane.evals.suite import SUITE_LIMITS
from control_plane.skills.taps import Taps


def write_suite(root: Path) -> Path:
    for name in ("greet", "count"):
        task = root / name
        (task / "tests").mkdir(parents=True)
        (task / "instruction.md").write_text(f"Task {name}.")
        (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return root


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        """Not on the test's output."""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """An index listing the suite `mini` as an archive beside it, on 127.0.0.1."""
    www = tmp_path / "www"
    www.mkdir()
    with tarfile.open(www / "mini.tar.gz", "w:gz") as archive:
        archive.add(write_suite(tmp_path / "mini"), arcname=".")
    index = {"skills": [], "suites": [{"name": "mini", "source": "mini.tar.gz"}]}
    (www / "index.json").write_text(json.dumps(index))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(www)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/index.json"
    server.shutdown()
    server.server_close()


def test_a_tap_names_a_suite_in_its_repository_or_its_index(tmp_path: Path, served: str) -> None:
    repo = tmp_path / "repo"
    write_suite(repo / "mini")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.test"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "suites"], check=True)
    skills = tmp_path / "home" / "skills"
    skills.mkdir(parents=True)
    taps = Taps(skills, SUITE_LIMITS)
    taps.add("team", str(repo))
    taps.add("web", served)
    for name in ("team/mini", "web/mini"):
        suite = load_suite(resolve(name, tmp_path, taps=skills))
        assert sorted(t.id for t in suite.tasks) == ["count", "greet"], name
        assert suite.errors == []
    with pytest.raises(SuiteError, match="suite web/other: tap 'web' lists no suite named 'other'"):
        resolve("web/other", tmp_path, taps=skills)
    with pytest.raises(SuiteError, match="suite team/other"):
        resolve("team/other", tmp_path, taps=skills)  # the repository has no directory other/
    with pytest.raises(SuiteError, match="suite nosuch/mini"):
        resolve("nosuch/mini", tmp_path, taps=skills)  # no such tap: not a path either
