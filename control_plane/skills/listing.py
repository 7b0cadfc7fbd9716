"""What the agent sees of the library: each skill's record (SkillInfo), and the system prompt's listing,
ranked by relevance and success when it does not fit the budget (progressive disclosure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..store.semantic import RRF_K
from .model import UnknownSkill

if TYPE_CHECKING:
    from ..config.settings import SkillsSettings
    from ..recall.embeddings import Embedder
    from .lock import Lock
    from .store import SkillStore

MIN_BM25 = 1e-3
"""Keyword matches scoring less are not found by words: FTS5 gives a term in more than half the skills
(a "to", a "the") an idf of 1e-6, so such a match alone says nothing about relevance."""
MIN_SIMILARITY = 0.1
"""Skills less similar in meaning than this are not found by meaning (wordllama's scale)."""
PRIOR_RATE = 0.5
PRIOR_WEIGHT = 5.0
"""Bayesian smoothing of the success rate: every skill starts as if it had PRIOR_WEIGHT runs at
PRIOR_RATE, so one lucky run does not outrank a long good record."""


@dataclass
class SkillInfo:
    name: str
    description: str
    version: int
    status: str
    """pass, unverified (merged without checks), or fail (no longer passes re-verification)."""
    state: str
    """active, stale, failing (retired after failing runs in a row) or archived."""
    pinned: bool
    uses: int
    successes: int
    failures: int
    last_used: float
    streak: int = 0
    """Failed runs in a row."""
    merged_into: str | None = None
    """The skill this one was merged into (it is archived then)."""
    provenance: str | None = None
    """Where an installed skill came from (the lock file); None for a skill written here."""

    @property
    def runs(self) -> int:
        return self.successes + self.failures

    @property
    def success_rate(self) -> float:
        """The Bayesian-smoothed share of successful runs among the runs that loaded the skill."""
        return (self.successes + PRIOR_RATE * PRIOR_WEIGHT) / (self.successes + self.failures + PRIOR_WEIGHT)

    @property
    def observed_rate(self) -> float | None:
        """The share of runs that succeeded, None for a skill never run: what listings report
        (`success_rate`, smoothed, only ranks)."""
        return self.successes / self.runs if self.runs else None

    @property
    def marks(self) -> str:
        """Flags shown wherever the skill is listed."""
        flags = [self.status] if self.status != "pass" else []
        flags += [f"merged into {self.merged_into}"] if self.merged_into else []
        flags += [self.state] if self.state != "active" else []
        flags += ["pinned"] if self.pinned else []
        return f" [{', '.join(flags)}]" if flags else ""


class Listing:
    """The reading half of SkillLibrary: records, and the prompt's listing (SkillLibrary sets these)."""

    store: SkillStore
    settings: SkillsSettings
    lock: Lock
    embedder: Embedder | None = None
    """The sessions' embedding model, for skills found by meaning (the agent sets it); None: by words only."""
    _vectors: dict[tuple[str, int, str], Any]

    def info(self, name: str) -> SkillInfo:
        rows = self.store.execute("SELECT * FROM skills WHERE name = ?", (name,))
        if not rows:
            raise UnknownSkill(f"there is no skill named {name!r}; skills_list shows the skills")
        entry = self.lock.get(name)
        return _info(rows[0], entry.provenance if entry else None)

    def list_skills(self, *, archived: bool = False) -> list[SkillInfo]:
        rows = self.store.execute("SELECT * FROM skills ORDER BY name")
        entries = self.lock.entries()
        return [
            _info(row, entries[row["name"]].provenance if row["name"] in entries else None)
            for row in rows
            if archived or row["state"] != "archived"
        ]

    def ranked(self, task: str) -> list[SkillInfo]:
        """Active skills, most useful for `task` first: BM25 relevance over name, description and body
        times the smoothed success rate; skills the task does not match follow, by success rate."""
        skills = {info.name: info for info in self.list_skills() if info.state != "failing"}
        relevance = self._bm25(task)

        def key(info: SkillInfo) -> tuple[float, float, str]:
            return (-relevance.get(info.name, 0.0) * info.success_rate, -info.success_rate, info.name)

        return sorted(skills.values(), key=key)

    def search(self, query: str, limit: int) -> list[SkillInfo]:
        """The active skills best matching `query` by words (BM25 over name, description and body) and by
        meaning (the embedder's vectors of the same), fused by reciprocal rank; ties go to the better
        success rate. Skills neither half finds are left out."""
        skills = {info.name: info for info in self.list_skills() if info.state != "failing"}
        bm25 = {name: score for name, score in self._bm25(query).items() if score >= MIN_BM25}
        halves = [sorted((n for n in bm25 if n in skills), key=lambda n: -bm25[n] * skills[n].success_rate)]
        if self.embedder is not None and query.strip():
            halves.append(self._nearest(query, skills))
        score: dict[str, float] = {}
        for half in halves:
            for rank, name in enumerate(half, start=1):
                score[name] = score.get(name, 0.0) + 1.0 / (RRF_K + rank)
        order = sorted(score, key=lambda n: (-score[n], -skills[n].success_rate, n))
        return [skills[name] for name in order[:limit]]

    def relevant_listing(self, task: str) -> str:
        """With more than list_max skills: the few most relevant to `task`, for the user's message (""
        with fewer, when the system prompt lists them all, or when none is relevant)."""
        if self._listed_count() <= self.settings.list_max:
            return ""
        found = self.search(task, self.settings.list_relevant)
        if not found:
            return ""
        lines = [f"- {info.name}{info.marks}: {info.description}" for info in found]
        return "\n".join(["Skills that may help with this message (load one with skill_view):", *lines])

    def _bm25(self, text: str) -> dict[str, float]:
        terms = re.findall(r"[a-z0-9]+", text.lower())
        if not terms:
            return {}
        query = " OR ".join(f'"{term}"' for term in terms)
        rows = self.store.execute(
            "SELECT name, -bm25(skills_fts, 10.0, 4.0, 1.0) AS score FROM skills_fts "
            "WHERE skills_fts MATCH ?",
            (query,),
        )
        return {row["name"]: row["score"] for row in rows}

    def skill_vectors(self, skills: dict[str, SkillInfo]) -> dict[str, Any]:
        """Each skill's unit vector of its name, description and body, by name; a skill not yet in the
        search index has none. Cached by name, version and model, so a library is embedded once per
        process. Raises EmbeddingError."""
        assert self.embedder is not None
        if not hasattr(self, "_vectors"):
            self._vectors = {}
        model = self.embedder.model
        missing = [info for info in skills.values() if (info.name, info.version, model) not in self._vectors]
        if missing:
            texts = {
                row["name"]: f"{row['name']}: {row['description']}\n{row['body']}"
                for row in self.store.execute("SELECT name, description, body FROM skills_fts")
            }
            indexed = [info for info in missing if info.name in texts]
            vectors = self.embedder.embed([texts[info.name] for info in indexed])
            for info, vector in zip(indexed, vectors, strict=True):
                self._vectors[(info.name, info.version, model)] = vector
        keys = {name: (name, info.version, model) for name, info in skills.items()}
        return {name: self._vectors[key] for name, key in keys.items() if key in self._vectors}

    def _nearest(self, query: str, skills: dict[str, SkillInfo]) -> list[str]:
        """Skill names by cosine similarity to `query`, nearest first, those below MIN_SIMILARITY left out."""
        assert self.embedder is not None
        vectors = self.skill_vectors(skills)
        if not vectors:
            return []
        names = list(vectors)
        similarity = np.stack([vectors[n] for n in names]) @ self.embedder.embed([query])[0]
        order = np.argsort(-similarity, kind="stable")
        return [names[i] for i in order if similarity[i] >= MIN_SIMILARITY]

    def _listed_count(self) -> int:
        return len([info for info in self.list_skills() if info.state != "failing"])

    def skills_prompt(self, task: str, budget_tokens: int | None = None) -> str:
        """The system prompt's skills section: name and description of each skill, within the token
        budget (about 4 characters a token); over budget, the most relevant to `task` are listed."""
        budget = (budget_tokens or self.settings.prompt_tokens) * 4
        skills = [info for info in self.list_skills() if info.state != "failing"]
        if not skills:
            return ""
        head = (
            "Skills (procedures proven in a sandbox; load one with skill_view(name) before using it, "
            "write new ones with skill_manage):"
        )
        if len(skills) > self.settings.list_max:
            # Listed per message instead (relevant_listing), so this prompt stays byte-identical.
            return (
                f"{head}\nThe library holds {len(skills)} skills: each of the user's messages comes with the "
                "ones most relevant to it, and skills_search(query) finds others."
            )
        lines = [f"- {info.name}{info.marks}: {info.description}" for info in skills]
        if len(head) + sum(len(line) + 1 for line in lines) <= budget:
            return "\n".join([head, *lines])
        chosen, used = [], len(head) + 100  # room for the closing line
        for info in self.ranked(task):
            line = f"- {info.name}{info.marks}: {info.description}"
            if used + len(line) + 1 > budget:
                continue
            chosen.append(line)
            used += len(line) + 1
        rest = len(skills) - len(chosen)
        return "\n".join([head, *chosen, f"({rest} more skills not listed here: skills_list shows them all)"])


def _info(row: Any, provenance: str | None) -> SkillInfo:
    return SkillInfo(
        provenance=provenance,
        name=row["name"],
        description=row["description"],
        version=row["version"],
        status=row["status"],
        state=row["state"],
        pinned=bool(row["pinned"]),
        uses=row["uses"],
        successes=row["successes"],
        failures=row["failures"],
        last_used=row["last_used"],
        streak=row["streak"],
        merged_into=row["merged_into"],
    )
