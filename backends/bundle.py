"""The runtime as bytes, for sandboxes whose copy is missing or stale: sent down the stream itself."""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

import sandboxes

from .local import RUNTIME_DIR

# The start of every bootstrap: `frame()` reads a 16-digit length and that many bytes from fd 0,
# unbuffered, so nothing meant for the runtime that follows on the same stream is swallowed.
READ_FRAME = r"""
import os, runpy, sys
def take(n):
    out = b""
    while len(out) < n:
        part = os.read(0, n - len(out))
        if not part:
            sys.exit("hermetic bootstrap: the stream ended early")
        out += part
    return out
def frame():
    return take(int(take(16)))
"""

# Run by `python3 -c` in the sandbox: read the runtime as a zip frame, unpack it into a private
# temp dir and run it from there on the same stdin/stdout.
BOOTSTRAP = (
    READ_FRAME
    + r"""
import io, tempfile, zipfile
where = tempfile.mkdtemp(prefix="hermetic-runtime-")
zipfile.ZipFile(io.BytesIO(frame())).extractall(where)
sys.path.insert(0, where)
runpy.run_module("sandboxes", run_name="__main__", alter_sys=True)
"""
)


ZIP_TIME = (1980, 1, 1, 0, 0, 0)
"""Every entry's time: the files' own may predate what ZIP can hold (a reproducible image build sets
them to 1970, and `ZipFile.write` refuses them), and the same code then makes the same bytes."""


@functools.cache
def runtime_zip() -> bytes:
    return zip_package(RUNTIME_DIR, sandboxes.source_files())


def zip_package(directory: Path, files: list[str]) -> bytes:
    """`files` (relative to `directory`) as the zip of a package named `sandboxes`."""
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel in files:
            entry = zipfile.ZipInfo(f"sandboxes/{rel}", ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, (directory / rel).read_bytes())
    return raw.getvalue()


def bootstrap_payload() -> bytes:
    """What to write to the bootstrap's stdin before the first request."""
    data = runtime_zip()
    return b"%016d" % len(data) + data
