"""A skill that declares hosts is verified under `allowlist` with exactly those hosts (never `full`),
against an upstream in a namespace the test creates."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import get_backend
from netns import Upstream
from skill_kit import make_skill

from backends import Backend
from control_plane.skills.format import parse_skill
from control_plane.skills.gate import network_for, verify
from control_plane.skills.model import GatePolicy

CHECK = """#!/bin/sh
set -e
curl -sS http://pypi.hm14.test/host | grep -qx host=pypi.hm14.test
if curl -sS -f http://other.hm14.test/host; then echo "reached a host it did not declare"; exit 1; fi
echo declared-host-only
"""


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest, upstream: Upstream) -> Backend:
    return get_backend(request.param)


def test_declared_hosts_are_reachable_and_nothing_else(tmp_path: Path, backend: Backend) -> None:
    skill = make_skill(
        tmp_path, {"scripts/verify.sh": CHECK}, metadata={"hermetic.network": "pypi.hm14.test"}
    )
    verdict = verify(skill, GatePolicy(allow_network=True, allowed_hosts=["pypi.hm14.test"]), backend)
    assert verdict.status == "pass", verdict.reasons
    assert verdict.network == "allowlist:pypi.hm14.test"
    assert any("declared-host-only" in check.output for check in verdict.checks)


def test_a_wildcard_grant_covers_a_named_host_but_a_request_never_widens_it(tmp_path: Path) -> None:
    def request(hosts: str, name: str) -> Path:
        return make_skill(tmp_path, {}, directory=name, metadata={"hermetic.network": hosts})

    policy = GatePolicy(allow_network=True, allowed_hosts=["*.hm14.test"])
    assert network_for(parse_skill(request("pypi.hm14.test", "one")), policy) == ["pypi.hm14.test"]
    for hosts, name in (("*.test", "two"), ("pypi.hm14.test:8443", "three"), ("hm14.test", "four")):
        with pytest.raises(Exception, match="network: the policy does not allow"):
            network_for(parse_skill(request(hosts, name)), policy)
    with pytest.raises(Exception, match="not a host name|allow rule"):
        network_for(parse_skill(request("a@b", "five")), policy)
