"""ruff and mypy, so that CI enforces them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("tool", [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]])
def test_code_is_clean(tool: list[str]) -> None:
    if shutil.which(tool[0]) is None and not Path(sys.executable).with_name(tool[0]).exists():
        pytest.fail(f"{tool[0]} is not installed: pip install -e '.[dev]'")
    exe = (
        str(Path(sys.executable).with_name(tool[0]))
        if Path(sys.executable).with_name(tool[0]).exists()
        else tool[0]
    )
    done = subprocess.run([exe, *tool[1:]], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
