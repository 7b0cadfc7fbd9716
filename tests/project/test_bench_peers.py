"""bench/peers: the runners' JSON contract, the fleet figure, and a real smoke run of both peers.

Timings are never asserted; the smoke run skips (saying why) when a peer's venv or the image
cannot be built here.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from docker.errors import DockerException

from bench.peers import HERE, PEERS, _run_runner, image, parse_output, run_peer
from bench.peers.runner_kit import FLEET_COMMANDS, LABEL_KEY, fleet
from bench.peers.sandbox_image import ImageUnavailable
from bench.peers.venvs import PeerUnavailable, ensure_venv
from bench.stats import Figure


def test_parse_output_reads_figures_and_rejects_anything_else() -> None:
    results = parse_output(
        '{"figures": {"x: a": {"samples": [0.5, 1], "note": "9 cmd/s, 0 failed", "extra": {"failed": 0}}}}'
    )
    assert results == {"x: a": Figure([0.5, 1.0], "9 cmd/s, 0 failed", {"failed": 0.0})}
    for bad in ("", "Traceback (most recent call last)", '{"figs": {}}', '{"figures": {"x": {"note": ""}}}'):
        with pytest.raises(PeerUnavailable, match="printed no figures"):
            parse_output(bad)


def test_runner_keeps_stray_prints_out_of_its_json_and_records_a_failing_figure() -> None:
    script = (
        f"import sys; sys.path.insert(0, {str(HERE)!r})\n"
        "from runner_kit import Runner\n"
        "runner = Runner()\n"
        "print('a peer library talking on stdout')\n"
        "runner.measure('peer: ok', lambda: [0.25])\n"
        "runner.measure('peer: broken', lambda: 1 / 0)\n"
        "runner.emit()\n"
    )
    code, stdout, tail = _run_runner([sys.executable, "-c", script])
    assert code == 0
    assert "a peer library talking on stdout" in tail
    results = parse_output(stdout)
    assert results["peer: ok"] == Figure([0.25])
    broken = results["peer: broken"]
    assert isinstance(broken, Figure) and broken.samples == []
    assert broken.note.startswith("failed: ZeroDivisionError")


def test_a_crashing_runner_reports_its_stderr_tail() -> None:
    code, stdout, tail = _run_runner([sys.executable, "-c", "import sys; sys.exit('peer blew up')"])
    assert (code, stdout) == (1, "")
    assert "peer blew up" in tail


def test_fleet_counts_a_sandbox_that_fails_to_create_as_failed_commands() -> None:
    lock = threading.Lock()
    created: list[int] = []
    closed: list[int] = []
    ran: list[int] = []

    def create() -> int:
        with lock:
            created.append(len(created))
            if len(created) == 2:
                raise RuntimeError("no room for this sandbox")
            return len(created)

    def run(handle: int) -> None:
        with lock:
            ran.append(handle)

    result = fleet(create, run, closed.append, 4)
    assert len(result["samples"]) == len(ran) == 3 * FLEET_COMMANDS
    assert result["extra"]["failed"] == FLEET_COMMANDS
    assert result["extra"]["sandboxes"] == 4
    assert result["note"].endswith(f"cmd/s, {FLEET_COMMANDS} failed")
    assert sorted(closed) == sorted(set(ran))


def labelled_containers() -> set[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL_KEY}"], capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


@pytest.mark.timeout(600)  # the first run builds the venvs and the image
def test_smoke_both_peers_produce_every_figure_and_leave_no_container() -> None:
    try:
        tag = image()
        for name in PEERS:
            ensure_venv(PEERS[name])
    except (PeerUnavailable, ImageUnavailable, DockerException) as exc:
        print(f"skipping the peers smoke run: {exc}")
        pytest.skip(f"peer venv or image unavailable here: {str(exc)[:200]}")
    before = labelled_containers()
    hermes = run_peer(PEERS["hermes-agent"], tag, 2, [2], ["docker"])
    swerex = run_peer(PEERS["swe-rex"], tag, 2, [], ["local"])
    assert set(hermes) == {
        f"hermes-agent docker: {what}"
        for what in (
            "`true` round trip",
            "100 KB output",
            "1 MB file write+read",
            "create to first command",
            "2 sandboxes x 20 commands",
        )
    }
    assert set(swerex) == {
        f"swe-rex local: {what}" for what in ("`true` round trip", "100 KB output", "create to first command")
    }
    for name, value in {**hermes, **swerex}.items():
        figure = value if isinstance(value, Figure) else Figure(value)
        assert figure.samples, f"{name}: {figure.note}"
        assert not figure.note.startswith("failed"), f"{name}: {figure.note}"
    fleet_figure = hermes["hermes-agent docker: 2 sandboxes x 20 commands"]
    assert isinstance(fleet_figure, Figure) and fleet_figure.extra["failed"] == 0
    assert labelled_containers() <= before
