"""A session's sandbox files over HTTP: list a directory, download a file, upload files (the console's
file browser). The sandbox is started if the session has none yet. Mounted by api/app.py."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, UploadFile, status
from pydantic import BaseModel

from backends import RuntimeCallError, Sandbox, SandboxError
from sandboxes.protocol import NOT_FOUND

from .bounds import AUTHENTICATED, RelativePath, errors
from .profiles import Auth, Live

MAX_BYTES = 100 * 1024 * 1024
"""The largest file uploaded or downloaded through the API in one request."""
CHUNK = 1024 * 1024

router = APIRouter(
    prefix="/sessions/{session_id}/files", tags=["files"], responses={**AUTHENTICATED, **errors(404)}
)
Where = Annotated[RelativePath, Query(description="A path in the sandbox (relative: to its workspace)")]


class FileEntry(BaseModel):
    name: str
    type: str
    """file, dir, symlink, other."""
    size: int | None = None


class Listing(BaseModel):
    path: str
    """The directory's full path in the sandbox."""
    entries: list[FileEntry]
    truncated: bool


def _in_sandbox(profile: Auth, live: Live, action: Any) -> Any:
    """Run `action(sandbox)`: a missing path is a 404, any other refusal of the sandbox a 400."""
    try:
        return action(profile.agent.sandboxes.get(live.conversation.id))
    except RuntimeCallError as exc:
        code = status.HTTP_404_NOT_FOUND if exc.code == NOT_FOUND else status.HTTP_400_BAD_REQUEST
        raise HTTPException(code, exc.message) from exc
    except SandboxError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc


@router.get("")
def list_files(profile: Auth, live: Live, path: Where = ".") -> Listing:
    """The directory's entries (one level, hidden ones included)."""
    listed = _in_sandbox(profile, live, lambda sb: sb.runtime.fs_list(path=path, hidden=True))
    return Listing.model_validate(listed)


@router.get(
    "/download",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes"}},
)
def download(profile: Auth, live: Live, path: Where) -> Response:
    """One file's bytes, as an attachment (a directory is a 400: download its files)."""

    def fetch(sandbox: Sandbox) -> tuple[str, bytes]:
        info = sandbox.runtime.fs_stat(path=path)
        if not info.get("exists"):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"{path} does not exist")
        if info.get("type") != "file" or info.get("size", 0) > MAX_BYTES:
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST, f"{path} is not a file of at most {MAX_BYTES} bytes"
            )
        with tempfile.TemporaryDirectory() as tmp:
            local = sandbox.download(path, tmp)
            return local.name, local.read_bytes()

    name, data = _in_sandbox(profile, live, fetch)
    quoted = name.replace("\\", "_").replace('"', "_")
    headers = {"Content-Disposition": f'attachment; filename="{quoted}"', "X-Content-Type-Options": "nosniff"}
    return Response(data, media_type="application/octet-stream", headers=headers)


@router.post("", status_code=status.HTTP_201_CREATED)
async def upload(profile: Auth, live: Live, file: UploadFile, path: Where = ".") -> FileEntry:
    """Put one file into the sandbox directory `path` under its own name (replacing one there)."""
    name = Path(file.filename or "").name
    if name in ("", ".", "..") or "\x00" in name:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the upload needs a file name")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / name
        size = 0
        with local.open("wb") as out:
            while chunk := await file.read(CHUNK):
                size += len(chunk)
                if size > MAX_BYTES:
                    raise HTTPException(status.HTTP_400_BAD_REQUEST, f"uploads are at most {MAX_BYTES} bytes")
                out.write(chunk)
        await asyncio.to_thread(_in_sandbox, profile, live, lambda sb: sb.upload(local, path))
    return FileEntry(name=name, type="file", size=size)
