"""The docker backend's SDK client under many calls at once, against the real dockerd: docker-py keeps a
pool of connections per URL (10 by default) and 25 such pools, closing the oldest; a call that overflowed
its pool while another thread closed it failed ("'NoneType' object has no attribute 'qsize'", seen when
a benchmark started 50 sandboxes at once)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import get_backend
from docker.errors import NotFound

from backends import SandboxSpec
from backends.docker_client import CONNECTIONS, docker_client

CALLERS = 48  # more than docker-py's pools (25) and its default connections per pool (10), under ours


def test_many_calls_at_once_on_one_url_and_on_many_all_get_their_answer() -> None:
    get_backend("docker")  # skips, saying why, where dockerd cannot run
    client = docker_client(None)
    image = SandboxSpec().image
    run = uuid.uuid4().hex[:8]

    def one(i: int) -> str:
        found = client.api.inspect_image(image)["Id"]  # one URL, called by every thread at once
        with pytest.raises(NotFound):  # a URL of its own: a pool each, more pools than docker-py keeps
            client.api.inspect_container(f"hm-absent-{run}-{i}")
        return str(found)

    assert CALLERS < CONNECTIONS
    try:
        with ThreadPoolExecutor(CALLERS) as pool:
            answers = list(pool.map(one, range(CALLERS * 10)))
    finally:
        client.close()
    assert len(set(answers)) == 1 and len(answers) == CALLERS * 10
