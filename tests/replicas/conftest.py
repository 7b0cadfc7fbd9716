"""The replicas every test here shares: three `hermetic serve` on one PostgreSQL database and one profile
home (started once for the package: each is a real process on the machine's shared cores), the scripted
model, and HAProxy in front of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from haproxy import LocalHAProxy, start_haproxy
from hermetic_cli import scripted_env
from ngircd import free_port
from postgres import LocalPostgres
from replica_set import Cluster, replica_env, start_replicas, token_for

from control_plane.models.fake_llm import FakeLLM


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres: LocalPostgres) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("replicas")
    database = postgres.create_database()
    model = FakeLLM().start()
    token = token_for(root)
    env = replica_env(scripted_env(root, model.url), postgres.url(database))
    replicas = start_replicas(env, [free_port() for _ in range(3)])
    try:
        yield Cluster(replicas, token, model, postgres.url(database))
    finally:
        for replica in replicas:
            replica.stop()
        model.stop()
        postgres.drop_database(database)


@pytest.fixture(scope="package")
def balancer(cluster: Cluster) -> Iterator[LocalHAProxy]:
    proxy = start_haproxy(free_port(), [replica.port for replica in cluster.replicas])
    try:
        proxy.wait_serving()
        yield proxy
    finally:
        proxy.stop()
