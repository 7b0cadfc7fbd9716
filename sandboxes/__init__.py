"""Hermetic's in-sandbox runtime: one JSON-lines channel on stdin/stdout (stdlib only, python3 >= 3.9)."""

from __future__ import annotations

import hashlib
import os

__version__ = "0.1.0"
PROTOCOL_VERSION = 1

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def source_files() -> list[str]:
    """The runtime's source files, relative to the package directory, sorted."""
    out = []
    for root, dirs, files in os.walk(_PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            if name.endswith(".py"):
                out.append(os.path.relpath(os.path.join(root, name), _PACKAGE_DIR))
    return sorted(out)


def code_hash() -> str:
    """A hash of the runtime's code, carried by the handshake and the image label."""
    digest = hashlib.sha256()
    for rel in source_files():
        digest.update(rel.encode() + b"\0")
        with open(os.path.join(_PACKAGE_DIR, rel), "rb") as fh:
            digest.update(fh.read() + b"\0")
    return digest.hexdigest()[:16]
