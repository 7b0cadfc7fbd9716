"""The first image build's progress, on the parts that are cheap to run: debootstrap's real output (captured
from a bookworm minbase run with the builder's package list, tests/captured/) read as package counts, the
`docker import` of a small tarball streamed to the real dockerd with its bytes counted, and both shown as a
rich progress bar (`hermetic setup`, `python -m images.build` at a terminal) and as log lines (setup.sh)."""

from __future__ import annotations

import io
import logging
import secrets
import tarfile
from pathlib import Path

import pytest
from rich.console import Console

from images.progress import STAGES, DebootstrapProgress, LogReport, Step, progress_bar

CAPTURED = Path(__file__).parents[1] / "support" / "captured" / "debootstrap-bookworm-minbase.txt"


def _steps_of_debootstrap() -> list[Step]:
    steps: list[Step] = []
    parser = DebootstrapProgress(steps.append)
    for line in CAPTURED.read_text().splitlines(keepends=True):
        parser.feed(line)
    return steps


def test_debootstraps_output_is_read_as_packages_downloaded_then_unpacked_and_configured() -> None:
    text = CAPTURED.read_text()
    steps = _steps_of_debootstrap()
    stages = list(dict.fromkeys(step.stage for step in steps))
    assert stages == list(STAGES[:4]), "each stage once, in the order debootstrap goes through them"
    fetched = {line.split()[2] for line in text.splitlines() if line.startswith("I: Retrieving ")} - {
        "InRelease",
        "Packages",
    }
    downloads = [s for s in steps if s.stage == "download packages"]
    assert [s.done for s in downloads] == list(range(1, len(fetched) + 1)) and len(fetched) > 50
    assert {s.detail for s in downloads} == fetched and all(s.total is None for s in downloads)
    assert {"python3", "tini", "git"} <= fetched, "the packages the builder asks for are counted"
    for stage in STAGES[1:4]:
        counted = [s for s in steps if s.stage == stage]
        assert all(s.total == len(fetched) and s.unit == "packages" for s in counted)
        assert [s.done for s in counted] == list(range(1, len(counted) + 1)), "each package once"
    configured = [s for s in steps if s.stage == "configure packages"]
    assert configured[-1].done > len(fetched) * 0.8, "nearly every package is configured by debootstrap"


def test_the_log_says_each_stage_and_every_tenth_of_it(caplog: pytest.LogCaptureFixture) -> None:
    report = LogReport()
    with caplog.at_level(logging.INFO, logger="images.build"):
        for step in _steps_of_debootstrap():
            report(step)
        for sent in range(0, 101, 5):
            report(Step("docker import", sent * 2**20, 100 * 2**20, "bytes"))
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "[1/8] download packages" and "[7/8] docker import" in lines
    assert "  download packages: 25 packages" in lines, "an unknown total: every 25 packages"
    unpacked = [line for line in lines if line.startswith("  unpack packages:")]
    assert 5 <= len(unpacked) <= 11
    imported = [line for line in lines if line.startswith("  docker import:")]
    assert imported[-1] == "  docker import: 100 MiB of 100 MiB" and len(imported) == 10


def test_the_progress_bar_shows_stages_packages_and_bytes() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with progress_bar(console) as report:
        for step in _steps_of_debootstrap():
            report(step)
        report(Step("docker import", 3 * 2**20, 6 * 2**20, "bytes"))
    shown = out.getvalue().split("\r")[-1]  # the last frame
    assert "[1/8] download packages" in shown and "[4/8] configure packages" in shown
    fetched = len([s for s in _steps_of_debootstrap() if s.stage == "download packages"])
    assert f"{fetched}/{fetched} packages" in shown, "a stage that ended shows as complete"
    assert "[7/8] docker import" in shown and "3.1/6.3 MB" in shown


def test_the_import_streams_the_tarball_to_dockerd_and_reports_each_mib(tmp_path: Path) -> None:
    from conftest import get_backend

    from images.build import import_tarball

    get_backend("docker")  # skips, with the reason, without a dockerd
    import docker

    tarball = tmp_path / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        data = secrets.token_bytes(3 * 2**20 + 123)  # random: more than three chunks of one MiB
        info = tarfile.TarInfo("payload.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tag = f"hermetic-test-import:{secrets.token_hex(6)}"
    client = docker.from_env()
    steps: list[Step] = []
    try:
        import_tarball(client, tarball, tag, ["LABEL org.hermetic.test=import"], steps.append)
        image = client.images.get(tag)
        assert image.labels["org.hermetic.test"] == "import"
    finally:
        client.images.remove(tag, force=True)
    size = tarball.stat().st_size
    assert [s.done for s in steps] == [0, 2**20, 2 * 2**20, 3 * 2**20, size]
    assert {(s.stage, s.total, s.unit) for s in steps} == {("docker import", size, "bytes")}
