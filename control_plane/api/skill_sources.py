"""Skills from and to outside over HTTP: install, update, outdated, uninstall, search, export, taps; the
same operations as `hermetic skills install ...`. An install or update without `confirm` is a dry run:
it fetches and gates, returns the verdicts and merges nothing. Mounted by api/app.py before /skills."""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path as FilePath
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, status
from fastapi.responses import Response
from pydantic import BaseModel, Field, StringConstraints

from ..skills.examples import is_example
from ..skills.install import Installer, Plan
from ..skills.library import SkillError, UnknownSkill
from ..skills.sources import REMOTE_SCHEMES, Limits, SourceError, is_remote
from ..skills.taps import TAP_NAME, TapError, UnknownTap
from .bounds import AUTHENTICATED, FindingRef, SearchText, SkillName, SourceText, errors
from .profiles import Auth

router = APIRouter(prefix="/skills", tags=["skills"], responses=AUTHENTICATED)
Name = Annotated[SkillName, Path()]
TapName = Annotated[str, StringConstraints(pattern=TAP_NAME.pattern)]


class InstallRequest(BaseModel):
    source: SourceText
    """An http(s) or git:// URL of a .tar.gz/.zip or a git repository[#REF][:SUBDIR], or TAP/NAME; this
    server's own paths only with skill_install.local_sources_over_api, private and loopback addresses
    only with skill_install.allow_private_urls."""
    all: bool = False
    accept: list[FindingRef] = Field(default_factory=list, max_length=100)
    """Threat findings accepted for this install (after review): finding ids, FILE:LINE, or "all" (every
    finding outside executable files). Low findings need none: they merge as warnings."""
    allow_unverified: bool = False
    confirm: bool = False
    """Merge what passed; without it nothing is merged (the verdicts are returned to review)."""


class UpdateRequest(BaseModel):
    force: bool = False
    accept: list[FindingRef] = Field(default_factory=list, max_length=100)
    allow_unverified: bool = False
    confirm: bool = False


class TapRequest(BaseModel):
    name: TapName
    url: SourceText
    """An http(s) or git:// URL (a git repository or an index); local ones as for install."""


def _run(profile: Auth, action: Any) -> Any:
    """Call `action(installer)`; refusals become 404 (unknown skill or tap) or 400 with the reason."""
    settings = profile.settings.skill_install
    limits = Limits(settings.max_bytes, settings.max_files, public_only=not settings.allow_private_urls)
    installer = Installer(profile.agent.skills, limits)
    try:
        return action(installer)
    except (UnknownSkill, UnknownTap) as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    except (SkillError, SourceError, TapError, ValueError, OSError) as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc


def _remote_only(profile: Auth, installer: Installer, source: str, *, tap_ok: bool = True) -> None:
    """Refuse, before anything looks at the disk, a source that is not another machine's (see
    skill_install.local_sources_over_api); a configured tap's TAP/NAME is what its URL says."""
    if profile.settings.skill_install.local_sources_over_api or is_remote(source):
        return
    if tap_ok and (installer.tap_reference(source.strip()) or is_example(source)):
        return  # an example is the package's own data, not a path the caller chose
    schemes = ", ".join(f"{s}://" for s in REMOTE_SCHEMES)
    raise HTTPException(
        status.HTTP_400_BAD_REQUEST,
        f"{source!r}: over the HTTP API a source must be a {schemes} URL"
        + (" or TAP/NAME of a configured tap, or example:NAME" if tap_ok else "")
        + "; this server's own paths, file:// and ssh are for `hermetic skills` on the server "
        "(or set skill_install.local_sources_over_api)",
    )


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
        _remote_only(profile, installer, body.source)
        plan = installer.plan_install(
            body.source, all_=body.all, accept=tuple(body.accept), allow_unverified=body.allow_unverified
        )
        return _finish(installer, plan, body.confirm)

    return _run(profile, action)  # type: ignore[no-any-return]


@router.get("/outdated")
def outdated(profile: Auth) -> list[dict[str, Any]]:
    return _run(profile, lambda inst: [asdict(row) for row in inst.outdated()])  # type: ignore[no-any-return]


@router.get("/search")
def search(profile: Auth, q: Annotated[SearchText, Query()]) -> dict[str, Any]:
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
    def action(installer: Installer) -> dict[str, Any]:
        _remote_only(profile, installer, body.url, tap_ok=False)
        return {"skills": [asdict(e) for e in installer.taps.add(body.name, body.url)]}

    return _run(profile, action)  # type: ignore[no-any-return]


@router.delete("/taps/{name}", responses=errors(404))
def tap_remove(profile: Auth, name: Annotated[TapName, Path()]) -> dict[str, str]:
    _run(profile, lambda inst: inst.taps.remove(name))
    return {"removed": name}


@router.post("/{name}/update", responses=errors(404))
def update(profile: Auth, name: Name, body: UpdateRequest) -> dict[str, Any]:
    def action(installer: Installer) -> dict[str, Any]:
        plan = installer.plan_update(
            name, force=body.force, accept=tuple(body.accept), allow_unverified=body.allow_unverified
        )
        return _finish(installer, plan, body.confirm)

    return _run(profile, action)  # type: ignore[no-any-return]


@router.post("/{name}/uninstall", responses=errors(404))
def uninstall(profile: Auth, name: Name) -> dict[str, str]:
    _run(profile, lambda inst: inst.uninstall(name))
    return {"state": "archived"}


@router.get(
    "/{name}/export",
    response_class=Response,
    responses={200: {"content": {"application/gzip": {}}}, **errors(404)},
)
def export(profile: Auth, name: Name) -> Response:
    """The skill's current version with its manifest, as a .tar.gz."""

    def action(installer: Installer) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            return installer.export(name, FilePath(tmp) / f"{name}.tar.gz").read_bytes()

    data: bytes = _run(profile, action)
    headers = {"Content-Disposition": f'attachment; filename="{name}.tar.gz"'}
    return Response(data, media_type="application/gzip", headers=headers)
