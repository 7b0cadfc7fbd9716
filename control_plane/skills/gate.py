"""The verification gate: a candidate skill joins the library only if it passes here.

`verify(candidate, policy, backend, pool)` runs the static checks (static.py) on the host; only when they
pass does it copy the candidate into a fresh sandbox from the pinned image, run the skill's own checks
with the policy's timeout and throw the sandbox away. With a warm pool the sandbox is one the pool opened
beforehand for the same spec (image id, network, limits, ttl: nothing of the skill's), used for this
skill alone and closed off the verdict's path; without one it is created and closed here.

The convention for a skill's checks (the skill-writing guidance tells the model the same):
- `scripts/verify.sh`: run as `bash scripts/verify.sh` in the skill's directory; exit 0 means pass.
- `tests/`: run as `python3 -m pytest -q tests` where the image has pytest, else
  `python3 -m unittest discover -s tests`, in the skill's directory.
A skill may have both; both must pass. A skill with neither merges only as "unverified", and only when
the policy allows it (a skill from outside with no executable file at all, when the policy allows
unverified instructions). Network is none unless the skill's metadata `hermetic.network` lists hosts
("pypi.org,files.pythonhosted.org") and the policy allows network and every one of those hosts.
"""

from __future__ import annotations

import math
import shlex
import time
from pathlib import Path

from backends import Backend, Sandbox, SandboxError, SandboxSpec
from backends.docker import DockerBackend
from backends.network.policy import Policy, PolicyError, Target
from backends.pool import TTL_SHARE_IN_POOL, WarmPool

from .format import Skill
from .model import Check, GatePolicy, Verdict
from .static import static_checks

GATE_LABEL = "org.hermetic.gate"
"""Label on every verification sandbox (value "skill"). Not the skill's name: a warm sandbox is made before
the skill it will check is known, and docker fixes labels at create."""
NETWORK_KEY = "hermetic.network"
OUTPUT_LIMIT = 8_000
"""Characters of each check's output kept (head and tail) for the verdict."""
TTL_MARGIN = 60
"""Seconds beyond the timeout after which the sandbox is destroyed even if this process died (counted from
when it was handed out: a warm sandbox's ttl also covers its time in the pool)."""
TESTS_COMMAND = (
    "if python3 -c 'import pytest' 2>/dev/null; then python3 -m pytest -q tests; "
    "else python3 -m unittest discover -s tests; fi"
)
NO_CHECKS = (
    "no checks: add scripts/verify.sh (exit 0 when the skill works) or a tests/ directory; "
    "a skill without checks merges only as unverified, and this policy does not allow that"
)

NO_CHECKS_SCRIPTS = (
    "no checks, but the skill ships scripts: it merges (marked unverified) only when the operator "
    "allows unverified skills (--allow-unverified or skills.allow_unverified)"
)


class _Refused(Exception):
    """The skill asks for what the policy does not grant; the message is the reason."""


def declared_checks(candidate: Path) -> list[tuple[str, str]]:
    """(check name, shell command) for each check the skill declares, by the convention above."""
    checks = []
    if (candidate / "scripts" / "verify.sh").is_file():
        checks.append(("verify.sh", "bash scripts/verify.sh"))
    if (candidate / "tests").is_dir():
        checks.append(("tests", TESTS_COMMAND))
    return checks


def requested_hosts(skill: Skill) -> list[str]:
    """The hosts the skill's metadata asks to reach during verification (empty: none)."""
    return [host.strip() for host in skill.metadata.get(NETWORK_KEY, "").split(",") if host.strip()]


def network_for(skill: Skill, policy: GatePolicy) -> list[str]:
    """The allowlist the verification sandbox gets; raises _Refused when the policy refuses the request."""
    hosts = requested_hosts(skill)
    if not hosts:
        return []
    if not policy.allow_network:
        raise _Refused(
            f"network: the skill requests {', '.join(hosts)} ({NETWORK_KEY}) but the operator's policy "
            "allows no network during verification; make the checks work offline"
        )
    try:
        Policy(hosts)
    except PolicyError as exc:
        raise _Refused(f"network: {exc} ({NETWORK_KEY})") from None
    refused = [host for host in hosts if not _granted(host, policy.allowed_hosts)]
    if refused:
        raise _Refused(
            f"network: the policy does not allow {', '.join(refused)}; "
            f"allowed hosts: {', '.join(policy.allowed_hosts) or 'none'}"
        )
    return hosts


def _granted(host: str, allowed: list[str]) -> bool:
    """Whether the operator's list grants a requested rule: named exactly, or a plain host name (on the
    default ports) under one of its wildcards. A request never widens what the operator wrote."""
    if host in allowed:
        return True
    if "*" in host or ":" in host or "/" in host:
        return False
    try:
        operator = Policy([rule for rule in allowed if rule.startswith("*.")])
    except PolicyError:
        return False
    return all(isinstance(operator.check(host, port), Target) for port in (80, 443))


def pin_image(backend: Backend, image: str) -> tuple[str, str]:
    """(what the sandbox runs, what the verdict records). Docker runs the image by its id, so a tag moved
    while the checks run cannot change what they ran in; other backends record the name as given."""
    if isinstance(backend, DockerBackend):
        image_id = backend.ensure_image(image)
        return image_id, f"{image}@{image_id}"
    return image, image


def sandbox_spec(image: str, hosts: list[str], timeout: float) -> SandboxSpec:
    """The throwaway sandbox of a verification: also its warm pool's key, so nothing in it is the skill's.
    Its ttl leaves the checks their timeout plus TTL_MARGIN after the longest a pool keeps it warm."""
    return SandboxSpec(
        image=image,
        memory="512m",
        pids=256,
        network="allowlist" if hosts else "none",
        allow=hosts,
        labels={GATE_LABEL: "skill"},
        ttl=math.ceil((timeout + TTL_MARGIN) / (1 - TTL_SHARE_IN_POOL)),
        output_limit=OUTPUT_LIMIT,
    )


def verify(candidate: Path, policy: GatePolicy, backend: Backend, pool: WarmPool | None = None) -> Verdict:
    """Statically check, then execute the candidate skill's checks in a throwaway sandbox (from `pool`,
    a warm pool of `backend`, when given)."""
    start = time.perf_counter()
    verdict = Verdict(skill=candidate.name, status="fail")
    try:
        _verify(candidate, policy, backend, pool, verdict)
    finally:
        verdict.duration_ms = round((time.perf_counter() - start) * 1000, 1)
    return verdict


def _verify(
    candidate: Path, policy: GatePolicy, backend: Backend, pool: WarmPool | None, verdict: Verdict
) -> None:
    static = static_checks(candidate, policy.accept, policy.tolerate)
    verdict.checks, verdict.reasons, verdict.accepted = static.checks, static.reasons, static.accepted
    verdict.findings = static.findings
    skill = static.skill
    if verdict.reasons or skill is None:
        return
    commands = declared_checks(candidate)
    if not commands:
        if policy.allow_unverified or (policy.unverified_instructions and not static.executables):
            verdict.status = "unverified"
        elif policy.unverified_instructions:
            files = ", ".join(sorted(static.executables))
            verdict.reasons.append(f"{NO_CHECKS_SCRIPTS} ({files})")
        else:
            verdict.reasons.append(NO_CHECKS)
        return
    try:
        hosts = network_for(skill, policy)
    except _Refused as refused:
        verdict.checks.append(Check("network", False, str(refused)))
        verdict.reasons.append(str(refused))
        return
    if hosts:
        verdict.network = "allowlist:" + ",".join(hosts)
    try:
        image, verdict.image = pin_image(backend, policy.image)
        spec = sandbox_spec(image, hosts, policy.timeout)
        sandbox = pool.acquire(spec) if pool is not None else backend.create(spec)
        try:
            sandbox.upload(candidate, spec.workdir)
            _run_checks(sandbox, f"{spec.workdir}/{candidate.name}", commands, policy.timeout, verdict)
        finally:
            if pool is not None:
                pool.discard(sandbox)
            else:
                sandbox.close()
    except SandboxError as exc:
        verdict.reasons.append(f"sandbox: the checks could not run: {exc}")
        return
    if not verdict.reasons:
        verdict.status = "pass"


def _run_checks(
    sandbox: Sandbox, workdir: str, commands: list[tuple[str, str]], timeout: float, verdict: Verdict
) -> None:
    deadline = time.monotonic() + timeout
    for index, (name, command) in enumerate(commands):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            verdict.checks.append(Check(name, False, "not run: the time for the checks was used up"))
            verdict.reasons.append(f"{name}: not run, the checks' timeout of {timeout:g} s was used up")
            continue
        # Each check in a shell of its own; the first in "default", which a warm sandbox has open already.
        session = "default" if index == 0 else name
        result = sandbox.run(f"cd {shlex.quote(workdir)} && {command}", session=session, timeout=remaining)
        output = result.get("output", "")
        if result.get("timed_out"):
            verdict.checks.append(Check(name, False, output))
            verdict.reasons.append(f"{name}: timed out (the checks may take {timeout:g} s in all)")
        elif result.get("exit_code") != 0:
            verdict.checks.append(Check(name, False, output))
            last = next((line for line in reversed(output.splitlines()) if line.strip()), "")
            verdict.reasons.append(f"{name}: exit code {result.get('exit_code')}; last line: {last[:200]}")
        else:
            verdict.checks.append(Check(name, True, output))
