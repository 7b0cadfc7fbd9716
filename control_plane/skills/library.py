"""The skill library in the profile home (`settings.home / "skills"`).

    library/NAME/       the current version, what the agent lists and loads
    versions/NAME/N/    every merged version, kept for history, diff and rollback
    quarantine/NAME/    the candidate being written; it joins the library only when the gate passes it
    archive/NAME/       archived (deleted or long unused) skills, restorable
    skills.db           versions, verdicts, usage counts, curation state, search index (store.py)

Nothing here is ever deleted: a delete or an archive moves the skill to archive/. What changes the library
(a merge, an archive or restore, a verdict's status, curation, the lock file) is done under the profile's
`skills` lock (store/profile_lock.py), so processes and replicas of one profile take turns.
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..store.profile_lock import ProfileLock
from .format import SKILL_FILE, Skill, parse_skill
from .listing import Listing
from .lock import Lock, content_hash
from .model import GatePolicy, SkillError, UnknownSkill, Verdict
from .store import SkillStore

if TYPE_CHECKING:
    from backends import Backend
    from backends.pool import WarmPool

    from ..config.settings import SkillsSettings

VerifyFn = Callable[[Path, GatePolicy, "Backend", "WarmPool | None"], Verdict]
DAY = 86_400.0


@dataclass
class Submission:
    verdict: Verdict
    version: int | None
    """The new version when the candidate was merged, else None (it stays in quarantine)."""


def gate_verify(candidate: Path, policy: GatePolicy, backend: Backend, pool: WarmPool | None) -> Verdict:
    """The gate's verify, imported on first use (the gate is a separate module owned by the gate work)."""
    from .gate import verify

    return verify(candidate, policy, backend, pool)


class SkillLibrary(Listing):
    def __init__(
        self,
        root: Path,
        settings: SkillsSettings,
        backend: Callable[[], Backend],
        verify: VerifyFn = gate_verify,
        lock: ProfileLock | None = None,
        pool: Callable[[], WarmPool | None] = lambda: None,
    ) -> None:
        """`root` is the profile home's skills/; `lock` the profile's write locks (alone: a file lock)."""
        self.root = root
        self.locks = lock or ProfileLock(root.parent, "")
        self.settings = settings
        self._backend = backend
        self._verify = verify
        self._pool = pool
        """The gate's warm pool of throwaway sandboxes (the sandbox manager's), or None: each created."""
        for area in ("library", "versions", "quarantine", "archive"):
            (root / area).mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store = SkillStore(root / "skills.db")
        self.lock = Lock(root)

    @property
    def policy(self) -> GatePolicy:
        s = self.settings
        return GatePolicy(
            allow_unverified=s.allow_unverified,
            allow_network=s.allow_network,
            allowed_hosts=list(s.allowed_hosts),
            timeout=s.timeout,
            image=s.image,
        )

    # -- reading ------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        """The directory of a skill's current version (library/, or archive/ once archived)."""
        info = self.info(name)
        return self.root / ("archive" if info.state == "archived" else "library") / name

    def view(self, name: str, file: str | None = None, session_id: str | None = None) -> str:
        """SKILL.md (with the list of its other files), or one of its files; marks the skill loaded."""
        directory = self.path(name)
        if file is None:
            files = sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())
            text = (directory / SKILL_FILE).read_text(encoding="utf-8")
            others = [f for f in files if f != SKILL_FILE]
            if others:
                text += (
                    "\n\n[files of this skill, load with skill_view(name, file): " + ", ".join(others) + "]"
                )
        else:
            target = _inside(directory, file)
            if not target.is_file():
                raise UnknownSkill(f"skill {name!r} has no file {file!r}")
            text = target.read_text(encoding="utf-8", errors="replace")
        if session_id is not None:
            self.mark_loaded(name, session_id)
        return text

    # -- writing: candidates in quarantine, merged only through the gate ----------------------

    def candidate(self, name: str, *, new: bool = False) -> Path:
        """The quarantine directory for changing `name`: an existing candidate, else a copy of the
        current version. `new` starts an empty one and refuses a name the library already has."""
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) or len(name) > 64:
            raise SkillError(f"{name!r} is not a skill name: 1-64 characters of a-z, 0-9 and single hyphens")
        exists = bool(self.store.execute("SELECT 1 FROM skills WHERE name = ?", (name,)))
        directory = self.root / "quarantine" / name
        if new:
            if exists:
                raise SkillError(f"a skill named {name!r} exists; change it with patch, edit or write_file")
            if directory.exists():
                shutil.rmtree(directory)
            directory.mkdir()
        elif not directory.exists():
            if not exists:
                raise UnknownSkill(f"there is no skill named {name!r}; create it first")
            shutil.copytree(self.path(name), directory, symlinks=True)
        return directory

    def write(self, name: str, file: str, content: str, *, new: bool = False) -> Path:
        directory = self.candidate(name, new=new)
        target = _inside(directory, file)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return directory

    def patch(self, name: str, file: str, old: str, new: str) -> Path:
        directory = self.candidate(name)
        target = _inside(directory, file)
        if not target.is_file():
            raise UnknownSkill(f"skill {name!r} has no file {file!r}")
        text = target.read_text(encoding="utf-8")
        count = text.count(old) if old else 0
        if count != 1:
            raise SkillError(
                f"the text to replace occurs {count} times in {file}; give a piece that occurs exactly once"
            )
        target.write_text(text.replace(old, new), encoding="utf-8")
        return directory

    def remove_file(self, name: str, file: str) -> Path:
        directory = self.candidate(name)
        target = _inside(directory, file)
        if file == SKILL_FILE or not target.is_file():
            raise SkillError(f"{file!r} is not a removable file of skill {name!r}")
        target.unlink()
        return directory

    def submit(
        self, name: str, *, proposer: str, session_id: str | None = None, note: str = ""
    ) -> Submission:
        """Verify the candidate in quarantine; merge it as a new version when the gate passes it. `note`
        (why the change) is stored with the version, or with a refused candidate's verdict."""
        candidate = self.root / "quarantine" / name
        if not candidate.is_dir():
            raise SkillError(f"there is no candidate for {name!r} in quarantine")
        verdict = self.check(candidate, self.policy)
        if note and verdict.status == "fail":  # a merged version keeps the note itself
            verdict.reasons.append(f"proposed because: {note}")
        verdict_id = self.store.add_verdict(verdict, proposer, session_id)
        if verdict.status == "fail":
            return Submission(verdict, None)
        why = f"proposed by {proposer}" + (f": {note}" if note else "")
        return Submission(verdict, self.merge_candidate(name, verdict, verdict_id, why))

    def check(self, candidate: Path, policy: GatePolicy) -> Verdict:
        """Run the gate on a candidate under `policy` (an install widens the library's policy per request)."""
        backend = self._backend()
        return self._verify(candidate, policy, backend, self._pool())

    def merge_candidate(self, name: str, verdict: Verdict, verdict_id: int | None, note: str) -> int:
        """Merge the candidate in quarantine that `check` passed (an install, once the operator confirmed)."""
        candidate = self.root / "quarantine" / name
        with self.writing():
            version = self._merge(name, candidate, verdict, verdict_id, note=note)
            shutil.rmtree(candidate)
        return version

    def writing(self) -> AbstractContextManager[None]:
        """The library's write lock, for the block (reentrant: a curation that archives)."""
        return self.locks.hold("skills")

    def _merge(self, name: str, source: Path, verdict: Verdict, verdict_id: int | None, note: str) -> int:
        with self.writing():  # two merges of one skill would both take the next version
            skill = parse_skill(source)
            rows = self.store.execute("SELECT MAX(version) AS v FROM versions WHERE name = ?", (name,))
            version = (rows[0]["v"] or 0) + 1
            shutil.copytree(source, self.root / "versions" / name / str(version), symlinks=True)
            self._install(name, self.root / "versions" / name / str(version))
            now = time.time()
            self.store.transaction(
                [
                    (
                        "INSERT INTO versions (name, version, created, verdict_id, note) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (name, version, now, verdict_id, note),
                    ),
                    (
                        "INSERT INTO skills (name, description, version, status, created, last_used) "
                        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                        "description = excluded.description, version = excluded.version, "
                        "status = excluded.status, state = 'active', streak = 0, merged_into = NULL",
                        (name, skill.description, version, verdict.status, now, now),
                    ),
                    *_index(skill),
                ]
            )
            return version

    def _install(self, name: str, version_dir: Path) -> None:
        """Make `version_dir` the current library/NAME (copied aside first, then swapped in)."""
        target = self.root / "library" / name
        staging = self.root / "library" / f".{name}.new"
        if staging.exists():
            shutil.rmtree(staging)
        shutil.copytree(version_dir, staging, symlinks=True)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        archived = self.root / "archive" / name
        if archived.exists():
            shutil.rmtree(archived)

    def discard(self, name: str) -> None:
        """Drop the candidate in quarantine (the library is untouched)."""
        candidate = self.root / "quarantine" / name
        if not candidate.is_dir():
            raise SkillError(f"there is no candidate for {name!r} in quarantine")
        shutil.rmtree(candidate)

    # -- history ------------------------------------------------------------------------

    def history(self, name: str) -> list[dict[str, Any]]:
        """Every merged version (oldest first) with the verdict that let it in."""
        self.info(name)
        verdicts = {row["id"]: row for row in self.store.verdicts(name)}
        rows = self.store.execute("SELECT * FROM versions WHERE name = ? ORDER BY version", (name,))
        return [{**dict(row), "verdict": verdicts.get(row["verdict_id"])} for row in rows]

    def verdicts(self, name: str) -> list[dict[str, Any]]:
        """Every verdict on this skill, failed ones included (who proposed, session, checks, image...)."""
        return self.store.verdicts(name)

    def diff(self, name: str, old: int, new: int | None = None) -> str:
        """A unified diff of every file between two versions (new: the current one)."""
        current = self.info(name).version
        new = current if new is None else new
        a, b = (self._version_dir(name, v) for v in (old, new))
        files = sorted({str(p.relative_to(d)) for d in (a, b) for p in d.rglob("*") if p.is_file()})
        out: list[str] = []
        for file in files:
            out += difflib.unified_diff(
                _lines(a / file), _lines(b / file), f"{name}@{old}/{file}", f"{name}@{new}/{file}"
            )
        return "".join(out)

    def rollback(self, name: str, version: int) -> int:
        """Make an earlier version current again, recorded as a new version (history stays linear)."""
        source = self._version_dir(name, version)
        rows = self.store.execute(
            "SELECT v.verdict_id, d.status FROM versions v LEFT JOIN verdicts d ON d.id = v.verdict_id "
            "WHERE v.name = ? AND v.version = ?",
            (name, version),
        )
        verdict = Verdict(skill=name, status=rows[0]["status"] or "unverified")
        note = f"rollback to version {version}"
        with tempfile.TemporaryDirectory(dir=self.root) as staging:  # a copy named like the skill
            copy = shutil.copytree(source, Path(staging) / name, symlinks=True)
            return self._merge(name, copy, verdict, rows[0]["verdict_id"], note=note)

    def _version_dir(self, name: str, version: int) -> Path:
        directory = self.root / "versions" / name / str(version)
        if not directory.is_dir():
            raise UnknownSkill(f"skill {name!r} has no version {version}")
        return directory

    # -- re-verification ----------------------------------------------------------------

    def reverify(self, name: str, *, proposer: str = "reverify") -> Verdict:
        """Run the gate again on the current version (e.g. after an image upgrade) and record whether it
        still passes; a skill that fails stays in the library, marked fail wherever it is listed."""
        verdict = self.check(self.path(name), self.policy_for(name))
        with self.writing():
            self.store.add_verdict(verdict, proposer, None)
            self.store.execute("UPDATE skills SET status = ? WHERE name = ?", (verdict.status, name))
        return verdict

    def policy_for(self, name: str) -> GatePolicy:
        """The policy a skill is re-verified under: what its install allowed (lock file) while its files
        are exactly what the operator accepted, else (changed here since) the library's own."""
        entry = self.lock.get(name)
        if entry is None or content_hash(self.path(name)) != entry.content_hash:
            return self.policy
        return self.policy.for_operator(entry.accept, entry.allow_unverified)

    def reverify_all(self) -> list[Verdict]:
        return [self.reverify(info.name) for info in self.list_skills()]

    # -- usage and curation -------------------------------------------------------------

    def mark_loaded(self, name: str, session_id: str) -> None:
        """A run loaded this skill: count the use (once per session) and wake it if stale."""
        rows = self.store.execute(
            "INSERT OR IGNORE INTO loads (session_id, name) VALUES (?, ?) RETURNING name", (session_id, name)
        )
        if rows:
            self.store.execute(
                "UPDATE skills SET uses = uses + 1, last_used = ?, "
                "state = CASE state WHEN 'stale' THEN 'active' ELSE state END WHERE name = ?",
                (time.time(), name),
            )

    def record_outcome(self, session_id: str, success: bool) -> list[str]:
        """The run of this session ended: count a success or failure for each skill it loaded."""
        loaded = [
            row["name"]
            for row in self.store.execute(
                "DELETE FROM loads WHERE session_id = ? RETURNING name", (session_id,)
            )
        ]
        for name in loaded:
            if success:
                self.store.execute(
                    "UPDATE skills SET successes = successes + 1, streak = 0 WHERE name = ?", (name,)
                )
            else:
                self._failed(name)
        return loaded

    def correct_outcome(self, names: list[str]) -> None:
        """The user corrected the agent after a run counted as a success: count it as a failure."""
        for name in names:
            self.store.execute(
                "UPDATE skills SET successes = MAX(successes - 1, 0) WHERE name = ? AND successes > 0",
                (name,),
            )
            self._failed(name)

    def _failed(self, name: str) -> None:
        """One more failed run; `retire_after` in a row mark the skill failing (out of the prompt listing
        until a passing new version or `restore`; nothing is deleted)."""
        self.store.execute(
            "UPDATE skills SET failures = failures + 1, streak = streak + 1, "
            "state = CASE WHEN streak + 1 >= ? AND state IN ('active', 'stale') THEN 'failing' "
            "ELSE state END "
            "WHERE name = ?",
            (self.settings.retire_after, name),
        )

    def curate(self, now: float | None = None, *, apply: bool = True) -> list[str]:
        """Mark skills unused for stale_days stale and archive those unused for archive_days; pinned skills
        are never touched. Returns what changed (or, with apply=False, what would), one line each."""
        now = time.time() if now is None else now
        changes = []
        with self.writing() if apply else nullcontext():  # an archive is a move: one process at a time
            for info in self.list_skills():
                idle = (now - info.last_used) / DAY
                if info.pinned:
                    continue
                if idle >= self.settings.archive_days:
                    if apply:
                        self.archive(info.name)
                    changes.append(f"{info.name}: archived (unused for {idle:.0f} days)")
                elif idle >= self.settings.stale_days and info.state == "active":
                    if apply:
                        self.store.execute("UPDATE skills SET state = 'stale' WHERE name = ?", (info.name,))
                    changes.append(f"{info.name}: stale (unused for {idle:.0f} days)")
        return changes

    def archive(self, name: str) -> None:
        """Move the skill out of the library into archive/ (never deleted; `restore` brings it back)."""
        with self.writing():
            if self.info(name).state == "archived":
                raise SkillError(f"skill {name!r} is already archived")
            shutil.move(self.root / "library" / name, self.root / "archive" / name)
            self.store.execute("UPDATE skills SET state = 'archived' WHERE name = ?", (name,))

    def restore(self, name: str) -> None:
        """Bring back an archived skill, or put a failing one back in the listing (its streak reset)."""
        with self.writing():
            state = self.info(name).state
            if state not in ("archived", "failing"):
                raise SkillError(f"skill {name!r} is neither archived nor failing")
            if state == "archived":
                shutil.move(self.root / "archive" / name, self.root / "library" / name)
            self.store.execute(
                "UPDATE skills SET state = 'active', streak = 0, merged_into = NULL, last_used = ? "
                "WHERE name = ?",
                (time.time(), name),
            )

    def pin(self, name: str, pinned: bool = True) -> None:
        self.info(name)
        self.store.execute("UPDATE skills SET pinned = ? WHERE name = ?", (int(pinned), name))

    def close(self) -> None:
        self.store.close()


def _index(skill: Skill) -> list[tuple[str, tuple[Any, ...]]]:
    return [
        ("DELETE FROM skills_fts WHERE name = ?", (skill.name,)),
        (
            "INSERT INTO skills_fts (name, description, body) VALUES (?, ?, ?)",
            (skill.name, skill.description, skill.body),
        ),
    ]


def _inside(directory: Path, file: str) -> Path:
    """`file` as a path inside `directory`; refuses absolute paths and any escape."""
    relative = Path(file)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise SkillError(f"{file!r} must be a relative path inside the skill (like scripts/verify.sh)")
    return directory / relative


def _lines(path: Path) -> list[str]:
    return (
        path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True) if path.exists() else []
    )
