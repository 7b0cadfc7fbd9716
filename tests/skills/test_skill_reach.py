"""Over the HTTP API, installs and taps fetch from public addresses only (skill_install.allow_private_urls
lifts it): a loopback URL, a name that resolves to loopback, and a public host redirecting to loopback
are refused, for archives, git repositories and tap indexes, and the loopback server sees no request."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from netns import UPSTREAM, Upstream
from skill_sources import git, repo_with_skill, tar_of

from control_plane.api.app import create_app
from control_plane.config.settings import load_settings
from control_plane.store.tokens import TokenStore


class Recording(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args: Any, seen: list[str], **kwargs: Any) -> None:
        self.seen = seen
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.seen.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def loopback_server(directory: Path, seen: list[str]) -> Iterator[int]:
    """A static file server on 127.0.0.1 that records each path it is asked for; its port."""
    handler = functools.partial(Recording, directory=str(directory), seen=seen)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def www(tmp_path: Path) -> Path:
    """An archive, a git repository (git's dumb HTTP protocol) and an index, each of the skill `greet`."""
    www = tmp_path / "www"
    git(tmp_path, "clone", "-q", "--bare", str(repo_with_skill(tmp_path)), str(www / "greet.git"))
    git(www / "greet.git", "update-server-info")
    (www / "greet.tar.gz").write_bytes(tar_of(tmp_path / "upstream" / "greet", "greet"))
    index = {"skills": [{"name": "greet", "description": "Greets people.", "source": "greet.tar.gz"}]}
    (www / "index.json").write_text(json.dumps(index))
    return www


@contextlib.contextmanager
def api(root: Path, allow_private: bool) -> Iterator[TestClient]:
    token = TokenStore(root).create("default")
    install = {"allow_private_urls": allow_private}
    app = create_app(root, lambda p: load_settings(p, root=root, backend="local", skill_install=install))
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


SOURCES = ["greet.tar.gz", "greet.git#main:greet"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
@pytest.mark.parametrize("path", SOURCES)
def test_a_loopback_source_is_refused_unless_private_urls_are_allowed(
    tmp_path: Path, www: Path, host: str, path: str
) -> None:
    seen: list[str] = []
    with loopback_server(www, seen) as port, api(tmp_path, allow_private=False) as client:
        source = f"http://{host}:{port}/{path}"
        refused = client.post("/skills/install", json={"source": source, "confirm": True})
        assert refused.status_code == 400, refused.text
        assert "(loopback)" in refused.json()["detail"]
        assert "skill_install.allow_private_urls" in refused.json()["detail"]
        assert client.get("/skills").json() == []
        assert seen == []  # refused before a connection was made
    with loopback_server(www, seen) as port, api(tmp_path, allow_private=True) as client:
        source = f"http://{host}:{port}/{path}"
        done = client.post("/skills/install", json={"source": source, "confirm": True})
        assert done.status_code == 200 and done.json()["merged"] == ["greet"], done.text
        assert seen


@pytest.mark.parametrize("path", ["index.json", "greet.git"])
def test_a_loopback_tap_is_refused_unless_private_urls_are_allowed(
    tmp_path: Path, www: Path, path: str
) -> None:
    seen: list[str] = []
    with loopback_server(www, seen) as port, api(tmp_path, allow_private=False) as client:
        refused = client.post("/skills/taps", json={"name": "team", "url": f"http://localhost:{port}/{path}"})
        assert refused.status_code == 400 and "resolves to 127.0.0.1 (loopback)" in refused.json()["detail"]
        assert client.get("/skills/taps").json() == {} and seen == []
    with loopback_server(www, seen) as port, api(tmp_path, allow_private=True) as client:
        added = client.post("/skills/taps", json={"name": "team", "url": f"http://localhost:{port}/{path}"})
        assert added.status_code == 201 and [s["name"] for s in added.json()["skills"]] == ["greet"]


@pytest.mark.parametrize("path", SOURCES)
def test_a_public_host_redirecting_to_loopback_is_refused(
    tmp_path: Path,
    www: Path,
    upstream: Upstream,
    path: str,
) -> None:
    """The first hop is a host on a public address (the test's namespace, 198.18.N.2), the redirect
    leads to 127.0.0.1: refused when followed (urllib) or not followed at all (git)."""
    seen: list[str] = []
    with loopback_server(www, seen) as port, api(tmp_path, allow_private=False) as client:
        source = f"http://{UPSTREAM}/redirect/127.0.0.1:{port}/{path}"
        refused = client.post("/skills/install", json={"source": source, "confirm": True})
        assert refused.status_code == 400, refused.text
        assert client.get("/skills").json() == [] and seen == []
    with loopback_server(www, seen) as port, api(tmp_path, allow_private=True) as client:
        source = f"http://{UPSTREAM}/redirect/127.0.0.1:{port}/{path}"
        done = client.post("/skills/install", json={"source": source, "confirm": True})
        assert done.status_code == 200 and done.json()["merged"] == ["greet"], done.text
        assert seen  # the redirect was real: allowed, it reached the loopback server


@pytest.mark.parametrize("path", SOURCES)
def test_a_public_source_installs_with_the_check_on(
    tmp_path: Path,
    www: Path,
    upstream: Upstream,
    path: str,
) -> None:
    """On a public address (198.18.N.2) the archive downloads and git clones, pinned to the address
    that was checked (`http.curloptResolve`)."""
    served = upstream.root / "www" / tmp_path.name
    shutil.copytree(www, served)
    with api(tmp_path, allow_private=False) as client:
        source = f"http://{UPSTREAM}/{tmp_path.name}/{path}"
        done = client.post("/skills/install", json={"source": source, "confirm": True})
        assert done.status_code == 200 and done.json()["merged"] == ["greet"], done.text
