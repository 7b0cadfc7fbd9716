"""What a `hermetic` command loads before it runs: the model SDKs, PostgreSQL's driver, the page
extractor and the chat adapters' HTTP client wait for their first use (together over a second of every
command's start-up), and a server's warm-up loads the SDK local models are called through."""

from __future__ import annotations

import subprocess
import sys

LAZY = ("openai", "litellm", "psycopg", "trafilatura", "aiohttp")


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {LAZY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


def test_the_cli_loads_no_model_sdk_database_driver_or_extractor_before_it_needs_one() -> None:
    assert _loaded_after("import control_plane.cli.main") == set()


def test_a_servers_warm_up_loads_the_openai_sdk() -> None:
    assert "openai" in _loaded_after("from control_plane.models import openai_wire; openai_wire.warm_up()")
