"""Skills from and to outside over HTTP: install, update, outdated, uninstall, search, export, taps; the
same operations as `hermetic skills install ...`. An install or update without `confirm` is a dry run:
it fetches and gates, returns the verdicts and merges nothing. Mounted by api/app.py before /skills."""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import Response
from pydantic import BaseModel, Field

from ..skills.install import Installer, Plan
from ..skills.library import SkillError, UnknownSkill
from ..skills.sources import Limits, SourceError
from ..skills.taps import TapError
from .profiles import Auth

router = APIRouter(prefix="/skills", tags=["skills"])


class InstallRequest(BaseModel):
    source: str = Field(min_length=1, max_length=4000)
    """DIR, FILE.tar.gz|.zip, URL, git repository[#REF][:SUBDIR], or TAP/NAME."""
    all: bool = False
    accept: list[str] = Field(default_factory=list, max_length=100)
    """Threat findings accepted for this install: FILE:LINE or finding ids."""
    allow_unverified: bool = False
    confirm: bool = False
    """Merge what passed; without it nothing is merged (the verdicts are returned to review)."""


class UpdateRequest(BaseModel):
    force: bool = False
    accept: list[str] = Field(default_factory=list, max_length=100)
    allow_unverified: bool = False
    confirm: bool = False


class TapRequest(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    url: str = Field(min_length=1, max_length=4000)


def _run(profile: Auth, action: Any) -> Any:
    """Call `action(installer)`; refusals become 404 (unknown skill) or 400 with the reason."""
    settings = profile.settings.skill_install
    installer = Installer(profile.agent.skills, Limits(settings.max_bytes, settings.max_files))
    try:
        return action(installer)
    except UnknownSkill as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    except (SkillError, SourceError, TapError, ValueError, OSError) as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc


def _finish(installer: Installer, plan: Plan, confirm: bool) -> dict[str, Any]:
    try:
        merged = [c.name for c in installer.commit(plan)] if confirm else []
    finally:
        installer.discard(plan)  # a dry run's candidates, or what a failed commit left
    return {
        "source": plan.source,
        "commit": plan.commit,
        "candidates": [{**asdict(c), "mergeable": c.mergeable} for c in plan.candidates],
        "merged": merged,
    }


@router.post("/install")
def install(profile: Auth, body: InstallRequest) -> dict[str, Any]:
    def action(installer: Installer) -> dict[str, Any]:
        plan = installer.plan_install(
            body.source, all_=body.all, accept=tuple(body.accept), allow_unverified=body.allow_unverified
        )
        return _finish(installer, plan, body.confirm)

    return _run(profile, action)  # type: ignore[no-any-return]


@router.get("/outdated")
def outdated(profile: Auth) -> list[dict[str, Any]]:
    return _run(profile, lambda inst: [asdict(row) for row in inst.outdated()])  # type: ignore[no-any-return]


@router.get("/search")
def search(profile: Auth, q: str) -> dict[str, Any]:
    def action(installer: Installer) -> dict[str, Any]:
        words = q.lower().split()
        local = [
            asdict(info)
            for info in installer.library.list_skills()
            if all(w in f"{info.name} {info.description}".lower() for w in words)
        ]
        found, problems = installer.taps.search(q)
        return {"installed": local, "taps": [asdict(e) for e in found], "problems": problems}

    return _run(profile, action)  # type: ignore[no-any-return]


@router.get("/taps")
def taps(profile: Auth) -> dict[str, str]:
    return _run(profile, lambda inst: inst.taps.all())  # type: ignore[no-any-return]


@router.post("/taps", status_code=status.HTTP_201_CREATED)
def tap_add(profile: Auth, body: TapRequest) -> dict[str, Any]:
    return _run(profile, lambda inst: {"skills": [asdict(e) for e in inst.taps.add(body.name, body.url)]})  # type: ignore[no-any-return]


@router.delete("/taps/{name}")
def tap_remove(profile: Auth, name: str) -> dict[str, str]:
    _run(profile, lambda inst: inst.taps.remove(name))
    return {"removed": name}


@router.post("/{name}/update")
def update(profile: Auth, name: str, body: UpdateRequest) -> dict[str, Any]:
    def action(installer: Installer) -> dict[str, Any]:
        plan = installer.plan_update(
            name, force=body.force, accept=tuple(body.accept), allow_unverified=body.allow_unverified
        )
        return _finish(installer, plan, body.confirm)

    return _run(profile, action)  # type: ignore[no-any-return]


@router.post("/{name}/uninstall")
def uninstall(profile: Auth, name: str) -> dict[str, str]:
    _run(profile, lambda inst: inst.uninstall(name))
    return {"state": "archived"}


@router.get("/{name}/export")
def export(profile: Auth, name: str) -> Response:
    """The skill's current version with its manifest, as a .tar.gz."""

    def action(installer: Installer) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            return installer.export(name, Path(tmp) / f"{name}.tar.gz").read_bytes()

    data: bytes = _run(profile, action)
    headers = {"Content-Disposition": f'attachment; filename="{name}.tar.gz"'}
    return Response(data, media_type="application/gzip", headers=headers)
