"""The skill library over HTTP: the same operations as `hermetic skills`, for the caller's profile.
Mounted by api/app.py."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, status
from pydantic import BaseModel, ConfigDict, Field

from ..agent.curation import merge_review
from ..agent.loop import Conversation
from ..skills.curation import duplicates, unmerge
from ..skills.library import SkillError, SkillLibrary, UnknownSkill
from ..skills.listing import SkillInfo
from ..skills.model import Verdict
from .bounds import AUTHENTICATED, CurationLine, RelativePath, SkillName, Version, errors
from .profiles import Auth

router = APIRouter(prefix="/skills", tags=["skills"], responses=AUTHENTICATED)
Name = Annotated[SkillName, Path()]


class Rollback(BaseModel):
    version: Version


class Pin(BaseModel):
    pinned: bool = True


class ProposedPair(BaseModel):
    model_config = ConfigDict(extra="forbid")

    a: SkillName
    b: SkillName
    """The two skills of a near-duplicate pair of the curation plan, in either order."""


class MergeReview(BaseModel):
    session_id: str
    """The reviewer's session (source `review`): its turn's events at /sessions/ID/events."""


class ConfirmedPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    changes: Annotated[list[CurationLine], Field(max_length=10_000)]
    """The plan's `changes` as the user saw them: applied only while they are still the plan."""


def _run(profile: Auth, action: Any) -> Any:
    """Call `action(library)`; refusals become 404 (unknown) or 400 with the library's message."""
    library: SkillLibrary = profile.agent.skills
    try:
        return action(library)
    except UnknownSkill as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    except SkillError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc


@router.get("")
def list_skills(profile: Auth, archived: bool = False) -> list[dict[str, Any]]:
    return _run(profile, lambda lib: [_record(info) for info in lib.list_skills(archived=archived)])


@router.post("/verify-all")
def verify_all(profile: Auth) -> list[dict[str, Any]]:
    """Re-verify every skill (e.g. after an image upgrade); failing ones are marked fail."""
    return _run(profile, lambda lib: [asdict(v) for v in lib.reverify_all()])


@router.get("/{name}", responses=errors(404))
def show(profile: Auth, name: Name, file: Annotated[RelativePath | None, Query()] = None) -> dict[str, Any]:
    return _run(profile, lambda lib: {**_record(lib.info(name)), "content": lib.view(name, file)})


@router.get("/{name}/history", responses=errors(404))
def history(profile: Auth, name: Name) -> dict[str, Any]:
    return _run(profile, lambda lib: {"versions": lib.history(name), "verdicts": lib.verdicts(name)})


@router.get("/{name}/diff", responses=errors(404))
def diff(
    profile: Auth,
    name: Name,
    old: Annotated[Version, Query()],
    new: Annotated[Version | None, Query()] = None,
) -> dict[str, str]:
    return _run(profile, lambda lib: {"diff": lib.diff(name, old, new)})


@router.post("/{name}/verify", responses=errors(404))
def verify(profile: Auth, name: Name) -> Verdict:
    return _run(profile, lambda lib: lib.reverify(name, proposer="api"))  # type: ignore[no-any-return]


@router.post("/{name}/rollback", responses=errors(404))
def rollback(profile: Auth, name: Name, body: Rollback) -> dict[str, int]:
    return _run(profile, lambda lib: {"version": lib.rollback(name, body.version)})


@router.post("/{name}/archive", responses=errors(404))
def archive(profile: Auth, name: Name) -> dict[str, str]:
    _run(profile, lambda lib: lib.archive(name))
    return {"state": "archived"}


@router.post("/{name}/restore", responses=errors(404))
def restore(profile: Auth, name: Name) -> dict[str, str]:
    _run(profile, lambda lib: lib.restore(name))
    return {"state": "active"}


@router.post("/{name}/pin", responses=errors(404))
def pin(profile: Auth, name: Name, body: Pin) -> dict[str, bool]:
    _run(profile, lambda lib: lib.pin(name, body.pinned))
    return {"pinned": body.pinned}


@router.get("/curation/plan")
def curation_plan(profile: Auth) -> dict[str, Any]:
    """What `hermetic skills curate` would do: staleness changes, near-duplicate pairs, failing skills."""

    def plan(lib: SkillLibrary) -> dict[str, Any]:
        return {
            "changes": lib.curate(apply=False),
            "duplicates": [asdict(pair) for pair in duplicates(lib)],
            "failing": [info.name for info in lib.list_skills() if info.state == "failing"],
        }

    return _run(profile, plan)


@router.post("/curation/apply", responses=errors(409))
def curation_apply(profile: Auth, body: ConfirmedPlan) -> dict[str, list[str]]:
    """Apply the plan's staleness changes (mark stale, archive) the caller confirmed; 409 and nothing
    changed when the plan is no longer what it saw. Near-duplicates are merged by the reviewer
    (POST /skills/curation/merge), not here."""

    def apply(lib: SkillLibrary) -> dict[str, list[str]]:
        with lib.writing():  # the plan checked and applied in one turn
            if lib.curate(apply=False) != body.changes:
                raise HTTPException(
                    status.HTTP_409_CONFLICT, "the curation plan changed since it was shown: review it again"
                )
            return {"changes": lib.curate(apply=True)}

    return _run(profile, apply)


@router.post("/curation/merge", status_code=status.HTTP_202_ACCEPTED, responses=errors(401, 404, 409, 429))
async def curation_merge(profile: Auth, body: ProposedPair) -> MergeReview:
    """Offer one near-duplicate pair of the plan to the reviewer, as `hermetic skills curate --apply`
    does, in a background session: it may merge the two with skill_manage, and the merged skill goes
    through the gate (the originals are archived only when it passes). 409 when the pair is not proposed
    now."""

    def review(lib: SkillLibrary) -> tuple[Conversation, str]:
        proposed = [p for p in duplicates(lib) if {p.a, p.b} == {body.a, body.b}]
        if not proposed:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"{body.a} and {body.b} are not a near-duplicate pair of the curation plan now",
            )
        return merge_review(profile.agent, proposed[0])

    conversation, text = await asyncio.to_thread(_run, profile, review)
    live = profile.open_session(conversation)
    profile.start_turn(live, text)
    return MergeReview(session_id=conversation.id)


@router.post("/{name}/unmerge", responses=errors(404))
def unmerge_skill(profile: Auth, name: Name) -> dict[str, Any]:
    return _run(profile, lambda lib: {"changes": unmerge(lib, name)})


def _record(info: SkillInfo) -> dict[str, Any]:
    return {**asdict(info), "runs": info.runs, "success_rate": info.observed_rate}
