"""Curation beyond staleness: near-duplicate skills found and merged (through the gate, undoable), and
which skills are due a repair review after a run.

Similarity, when semantic recall is on: the cosine of the embedding model's vectors of each skill's
name, description and body (the vectors skills by relevance use), from `skills.duplicate_vector_threshold`;
it finds copies written in other words. Otherwise, and for a skill not yet embedded: the Jaccard index of
the sets of word 3-shingles (three consecutive lowercase words) of the same text, from
`skills.duplicate_threshold`; it needs no model and finds reworded copies that keep most of the wording.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..recall.embeddings import EmbeddingError
from .format import SKILL_FILE, parse_skill
from .model import SkillError, UnknownSkill

if TYPE_CHECKING:
    from .library import SkillLibrary, Submission

log = logging.getLogger("hermetic.curation")


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    similarity: float
    method: str
    """vectors (cosine of the embedding model's vectors) or words (Jaccard of word 3-shingles)."""
    reason: str
    """Why the pair is proposed, for the reviewer and the user."""


@dataclass(frozen=True)
class Due:
    """A skill the reviewer should look at after a run, and why."""

    name: str
    reason: str


def shingles(text: str, k: int = 3) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i : i + k]) for i in range(max(len(words) - k + 1, 1))} if words else set()


def similarity(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb) if sa and sb else 0.0


def duplicates(library: SkillLibrary) -> list[Pair]:
    """Pairs of listed skills similar enough to be near-duplicates, most similar first: by vectors when
    the library has an embedder, by words when it has none, when embedding fails, or for a pair with a
    skill not yet embedded."""
    settings = library.settings
    infos = {info.name: info for info in library.list_skills()}
    texts = {}
    for name in infos:
        skill = parse_skill(library.path(name))
        texts[name] = f"{skill.name} {skill.description} {skill.body}"
    vectors: dict[str, Any] = {}
    if library.embedder is not None:
        try:
            vectors = library.skill_vectors(infos)
        except EmbeddingError as exc:
            log.warning("duplicates by words: cannot embed the skills: %s", exc)
    model = library.embedder.model if library.embedder is not None else ""
    pairs = []
    for a, b in combinations(sorted(texts), 2):
        if a in vectors and b in vectors:
            cosine = float(vectors[a] @ vectors[b])
            if cosine >= settings.duplicate_vector_threshold:
                reason = f"cosine similarity {cosine:.2f} of name, description and body ({model})"
                pairs.append(Pair(a, b, cosine, "vectors", reason))
            continue
        jaccard = similarity(texts[a], texts[b])
        if jaccard >= settings.duplicate_threshold:
            reason = f"Jaccard {jaccard:.2f} of word 3-shingles of name, description and body"
            pairs.append(Pair(a, b, jaccard, "words", reason))
    return sorted(pairs, key=lambda p: -p.similarity)


def due_reviews(library: SkillLibrary, loaded: list[str], failed: bool, why: str) -> list[Due]:
    """The loaded skills to review: each one when the run failed (`why` says how), else those whose
    smoothed success rate is below `review_below` after `min_runs` runs (once per `min_runs` runs)."""
    settings = library.settings
    due = []
    for name in loaded:
        try:
            info = library.info(name)
        except UnknownSkill:
            continue
        if info.state == "archived":
            continue
        if failed:
            due.append(Due(name, why))
            continue
        rows = library.store.execute("SELECT reviewed_runs FROM skills WHERE name = ?", (name,))
        since = info.runs - (rows[0]["reviewed_runs"] if rows else 0)
        if (
            info.runs >= settings.min_runs
            and info.success_rate < settings.review_below
            and since >= settings.min_runs
        ):
            due.append(Due(name, f"its success rate is {info.success_rate:.0%} over {info.runs} runs"))
    for item in due:
        library.store.execute(
            "UPDATE skills SET reviewed_runs = successes + failures WHERE name = ?", (item.name,)
        )
    return due


def merge(
    library: SkillLibrary,
    into: str,
    sources: list[str],
    skill_md: str,
    files: dict[str, str],
    *,
    proposer: str,
    session_id: str | None = None,
    note: str = "",
) -> Submission:
    """One skill `into` (new, or one of `sources`) replacing `sources`: its candidate goes through the
    gate; only when it passes are the other sources archived, each pointing at `into`."""
    others = [name for name in dict.fromkeys(sources) if name != into]
    if not others:
        raise SkillError("a merge needs at least one other skill in sources besides the one it goes into")
    for name in others:
        if library.info(name).state == "archived":
            raise SkillError(f"skill {name!r} is archived: restore it before merging it")
    exists = bool(library.store.execute("SELECT 1 FROM skills WHERE name = ?", (into,)))
    previous = library.info(into).version if exists else None
    library.write(into, SKILL_FILE, skill_md, new=not exists)
    for path, text in files.items():
        library.write(into, path, text)
    submission = library.submit(
        into, proposer=proposer, session_id=session_id, note=note or f"merge of {', '.join(sources)}"
    )
    if submission.version is None:
        return submission
    with library.writing():
        for name in others:
            library.archive(name)
            library.store.execute("UPDATE skills SET merged_into = ? WHERE name = ?", (into, name))
        library.store.execute(
            "INSERT INTO merges (into_name, into_version, previous_version, sources, created) "
            "VALUES (?, ?, ?, ?, ?)",
            (into, submission.version, previous, json.dumps(others), time.time()),
        )
    return submission


def unmerge(library: SkillLibrary, into: str) -> list[str]:
    """Undo the latest merge into `into`: its sources come back, and `into` returns to its version before
    the merge (as a new version) or, if the merge created it, is archived. Returns what changed."""
    with library.writing():  # read and undone in one turn: two unmerges would undo it twice
        rows = library.store.execute(
            "SELECT * FROM merges WHERE into_name = ? AND undone IS NULL ORDER BY id DESC LIMIT 1", (into,)
        )
        if not rows:
            library.info(into)  # UnknownSkill when there is no such skill at all
            raise SkillError(f"nothing was merged into {into!r} (or the merge was already undone)")
        merge_row = rows[0]
        changes = []
        for name in json.loads(merge_row["sources"]):
            if library.info(name).state == "archived":
                library.restore(name)
                changes.append(f"{name}: restored")
        if merge_row["previous_version"] is None:
            library.archive(into)
            changes.append(f"{into}: archived (the merge created it)")
        else:
            version = library.rollback(into, merge_row["previous_version"])
            changes.append(f"{into}: version {version} is version {merge_row['previous_version']} again")
        library.store.execute("UPDATE merges SET undone = ? WHERE id = ?", (time.time(), merge_row["id"]))
        return changes


def discard_new_candidate(library: SkillLibrary, name: str, existed_before: bool) -> None:
    """After a review: a candidate it left in quarantine (a repair the gate refused) is dropped, so the
    agent's next edit of the skill starts from the library's version, not from the refused one."""
    candidate: Path = library.root / "quarantine" / name
    if candidate.is_dir() and not existed_before:
        shutil.rmtree(candidate)
