"""Curated memory over HTTP: MEMORY.md and USER.md with their limits and threat marks, edited with the
memory tool's own ops and validation (all or nothing; a refusal is a 400 with the tool's message),
and SOUL.md with the lines the threat scan withholds, replaced whole under the same checks; the memory
providers' health. Mounted by api/app.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..memory.persona import MAX_CHARS, load_persona, save_soul, soul_path
from ..memory.providers import ProviderHealth
from ..memory.store import FILES, MemoryFileError, Op, Target
from .bounds import AUTHENTICATED, NO_NUL, errors
from .profiles import Auth

router = APIRouter(prefix="/memory", tags=["memory"], responses=AUTHENTICATED)


class Entry(BaseModel):
    text: str
    threats: list[str]
    """The threat scan's findings; any: the entry is withheld from the prompt (still on disk)."""


class MemoryFile(BaseModel):
    target: Target
    file: str
    entries: list[Entry]
    chars: int
    limit: int
    """The most characters the file may hold (entries and separators); a write past it is refused."""


class Soul(BaseModel):
    file: str
    text: str
    """The persona as the prompt gets it (withheld lines replaced)."""
    raw: str
    """The file as it is on disk: what the owner edits."""
    problems: list[str]


class Memories(BaseModel):
    files: list[MemoryFile]
    soul: Soul | None
    """None: no SOUL.md in this profile (or it is empty)."""
    soul_limit: int
    """The most characters SOUL.md may hold; a save past it is refused."""


class SoulText(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: Annotated[str, StringConstraints(max_length=16 * MAX_CHARS, pattern=NO_NUL)]
    """The whole new SOUL.md; empty: no persona. Past the limit (under this bound) is a 400 saying so."""


class Edit(BaseModel):
    ops: Annotated[list[Op], Field(min_length=1, max_length=50)]


class Saved(BaseModel):
    message: str
    chars: int
    limit: int
    warn: bool


def _file(profile: Auth, target: Target) -> MemoryFile:
    memory = profile.agent.memory
    try:
        entries = [Entry(text=text, threats=[str(f) for f in hit]) for text, hit in memory.entries(target)]
        usage = memory.read(target).usage
    except MemoryFileError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
    return MemoryFile(
        target=target, file=FILES[target], entries=entries, chars=usage.chars, limit=usage.limit
    )


@router.get("")
def read_memory(profile: Auth) -> Memories:
    """Both memory files and the persona; 400 when a file cannot be read (the message says why)."""
    home = profile.settings.home
    persona = load_persona(home)
    path = soul_path(home)
    soul = (
        Soul(file=path.name, text=persona.text, raw=persona.raw, problems=persona.problems(path))
        if persona is not None
        else None
    )
    return Memories(files=[_file(profile, target) for target in FILES], soul=soul, soul_limit=MAX_CHARS)


@router.get("/providers")
def providers(profile: Auth) -> list[ProviderHealth]:
    """The profile's memory providers (config.yaml's memory.providers), in order, with their calls in this
    server since it started: how many, how many failed (skipped), the last answer and the last problem.
    Turns run by another process (a gateway of its own) are not counted here."""
    return profile.agent.providers.health()


@router.put("/soul", responses=errors(400))
def edit_soul(profile: Auth, body: SoulText) -> Saved:
    """Replace SOUL.md whole, with the memory tool's checks: 400 with the reason when the text is over
    the limit or a line is blocked by the threat scan (nothing is changed then)."""
    home = profile.settings.home
    try:
        refusal = save_soul(home, body.text)
    except MemoryFileError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
    if refusal is not None:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, refusal)
    chars = len(body.text.strip())
    warn = chars > MAX_CHARS * profile.settings.memory.warn_at
    return Saved(
        message=f"saved {soul_path(home).name} ({chars:,}/{MAX_CHARS:,} chars)",
        chars=chars,
        limit=MAX_CHARS,
        warn=warn,
    )


@router.post("/{target}", responses=errors(400))
def edit_memory(profile: Auth, target: Annotated[Target, Path()], body: Edit) -> Saved:
    """Apply the memory tool's ops to one file, all or nothing: 400 with the tool's reason when it
    refuses (over the limit, blocked by the threat scan, an ambiguous match)."""
    try:
        outcome = profile.agent.memory.apply(target, body.ops)
    except MemoryFileError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
    if not outcome.ok:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, outcome.message)
    usage = outcome.usage
    return Saved(message=outcome.message, chars=usage.chars, limit=usage.limit, warn=outcome.warn)
