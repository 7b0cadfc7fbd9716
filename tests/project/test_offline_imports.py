"""Importing Hermetic makes no network attempt: a library that fetches on import (litellm's price list,
when imported before the router sets it to its bundled copy) would send a lookup off this machine."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_importing_every_module_resolves_no_name() -> None:
    script = textwrap.dedent(
        """
        import importlib, pkgutil, socket, sys
        tried = []
        def refuse(host, *args, **kwargs):
            tried.append(host)
            raise OSError("no network in this test")
        socket.getaddrinfo = refuse
        socket.create_connection = lambda address, *a, **k: refuse(address[0])
        import control_plane
        for info in pkgutil.walk_packages(control_plane.__path__, "control_plane."):
            if info.name.endswith("__main__"):
                continue
            importlib.import_module(info.name)
        print("tried:", sorted(set(map(str, tried))))
        sys.exit(1 if tried else 0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
