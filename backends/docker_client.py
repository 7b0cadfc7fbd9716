"""The docker SDK's client as the docker backend makes it."""

from __future__ import annotations

import docker

CONNECTIONS = 64
"""Connections docker-py keeps per URL (its default is 10). More calls at once on one URL (an image's
inspect while many sandboxes start) overflow its pool; the overflow path reads the pool's size while
another thread may be closing that pool (docker-py keeps 25 pools, one per URL, and closes the oldest),
and the call fails with "'NoneType' object has no attribute 'qsize'"."""


def docker_client(base_url: str | None) -> docker.DockerClient:
    """The docker SDK's client for `base_url` (None: the environment's DOCKER_HOST or the local socket)."""
    if base_url:
        return docker.DockerClient(base_url=base_url, max_pool_size=CONNECTIONS)
    return docker.from_env(max_pool_size=CONNECTIONS)
