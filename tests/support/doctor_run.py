"""`hermetic doctor` run as a subprocess, and a row of its table read back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def doctor(tmp_path: Path, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_") and k != "OPENAI_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "control_plane", "doctor", *(options or ["--offline"])],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, "HERMETIC_ROOT": str(tmp_path), "HERMETIC_MODEL__NAME": "openai/test-model", **env},
    )


def status(output: str, name: str) -> str:
    found = re.search(rf"│ {re.escape(name)}\s+│ (\w+)", output)
    assert found, f"no row {name!r} in:\n{output}"
    return found[1]
