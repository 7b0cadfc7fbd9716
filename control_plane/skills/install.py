"""Skills from outside: install, update, outdated, uninstall, export, through the same gate.

Two steps, so the operator sees the verdict before anything is merged: `plan_install`/`plan_update`
fetch the source on the host (sources.py), read each skill leniently and stage it normalised in
quarantine/NAME, and run the gate on it (static checks always, its own checks in a throwaway sandbox
when it has them); `commit` merges the candidates that passed as new versions and writes the lock file;
`discard` drops them. What was fetched is never run on the host.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .examples import example_path, is_example
from .format import SKILL_FILE
from .gate import declared_checks
from .lenient import SkillParseError, read_lenient, render
from .library import SkillError, SkillLibrary
from .lock import LockEntry, content_hash
from .model import GatePolicy, Verdict
from .sources import SEARCH_DEPTH, Limits, Source, find_skills, parse_source
from .sources import fetch as fetch_source
from .static import executable_files, text_files
from .taps import Taps

MANIFEST = "hermetic-manifest.json"
"""Beside the skill's directory in an export: name, version, content hash, verdict, image."""
EXPORT_FORMAT = "hermetic-skill-export/1"
GATE_WORKERS = 4
"""Candidates verified at once (each in its own sandbox)."""


class InstallError(SkillError):
    """A source, update or export the installer refuses; the message says why and what to do."""


@dataclass
class Candidate:
    name: str
    path: str
    """The skill's directory inside the fetched source."""
    verdict: Verdict
    change: Literal["install", "update", "unchanged"] = "install"
    warnings: list[str] = field(default_factory=list)
    content_hash: str = ""
    origin: dict[str, Any] | None = None
    """The manifest of an export: the verdict it had where it came from."""
    verdict_id: int | None = None
    scripts: list[str] = field(default_factory=list)
    """Its executable files (none: an instruction-only skill)."""
    staged: bool = False
    """It is in quarantine/NAME (until commit or discard)."""

    @property
    def mergeable(self) -> bool:
        return self.change != "unchanged" and self.verdict.status != "fail"


@dataclass
class Plan:
    source: str
    commit: str | None
    tap: str | None
    candidates: list[Candidate]
    unused_accepts: list[str] = field(default_factory=list)
    """--accept values that matched no finding (said, so nothing is believed accepted that was not)."""
    accept: tuple[str, ...] = ()
    allow_unverified: bool = False

    @property
    def needs_confirmation_for_scripts(self) -> bool:
        """A candidate that will merge ships executable files."""
        return any(c.mergeable and c.scripts for c in self.candidates)


@dataclass
class Outdated:
    name: str
    source: str
    installed_hash: str
    upstream_hash: str | None
    """None when the source could not be fetched (see `problem`)."""
    local_change: str | None
    problem: str | None = None


class Installer:
    def __init__(self, library: SkillLibrary, limits: Limits) -> None:
        self.library = library
        self.limits = limits
        self.lock = library.lock
        self.taps = Taps(library.root, limits)

    # -- install ------------------------------------------------------------------------

    def plan_install(
        self,
        source_text: str,
        *,
        all_: bool = False,
        accept: tuple[str, ...] = (),
        allow_unverified: bool = False,
    ) -> Plan:
        """Fetch, stage and gate the skill(s) of a source; nothing is merged until `commit`."""
        source, tap = self._resolve(source_text)
        with tempfile.TemporaryDirectory(dir=self.library.root, prefix=".fetch-") as tmp:
            fetched = fetch_source(source, Path(tmp), self.limits)
            directories = find_skills(fetched.root)
            if not directories:
                raise InstallError(
                    f"{source}: holds no {SKILL_FILE} (looked {SEARCH_DEPTH} directories deep)"
                )
            if len(directories) > 1 and not all_:
                names = ", ".join(d.relative_to(fetched.root).as_posix() for d in directories[:20])
                raise InstallError(
                    f"{source} holds {len(directories)} skills ({names}); install one as SOURCE#REF:SUBDIR "
                    "or every one with --all"
                )
            manifest = _manifest(fetched.root)
            policy = self.library.policy.for_operator(accept, allow_unverified)
            staged = [self._stage(d, fetched.root, manifest, "install") for d in directories]
            candidates = self._gate(staged, policy)
        return Plan(
            str(source),
            fetched.commit,
            tap,
            candidates,
            _unused(accept, candidates),
            accept,
            allow_unverified,
        )

    def plan_update(
        self, name: str, *, force: bool = False, accept: tuple[str, ...] = (), allow_unverified: bool = False
    ) -> Plan:
        """Fetch an installed skill's source again; a changed skill is staged and gated as a new version.
        Refuses a skill changed here since install (by hand or a later version) unless `force`."""
        entry = self._entry(name)
        local = self.local_change(name, entry)
        if local and not force:
            raise InstallError(
                f"{name}: {local}; not overwritten. `hermetic skills update {name} --force` installs "
                "upstream anyway (earlier versions stay in history, hand edits are saved in archive/.edited/)"
            )
        source = parse_source(entry.source)
        with tempfile.TemporaryDirectory(dir=self.library.root, prefix=".fetch-") as tmp:
            fetched = fetch_source(source, Path(tmp), self.limits)
            directory = fetched.root / entry.path
            if not (directory / SKILL_FILE).is_file():
                raise InstallError(f"{name}: {entry.source} no longer holds it at {entry.path}")
            policy = self.library.policy.for_operator(accept, allow_unverified)
            [candidate] = self._gate([self._stage(directory, fetched.root, None, "update", entry)], policy)
        return Plan(
            entry.source,
            fetched.commit,
            entry.tap,
            [candidate],
            _unused(accept, [candidate]),
            accept,
            allow_unverified,
        )

    def accept(self, plan: Plan, findings: tuple[str, ...]) -> Plan:
        """Gate again, with `findings` (ids or FILE:LINE) accepted too, the plan's candidates that were
        refused and are still in quarantine: what an operator decides after reviewing each finding."""
        plan.accept = tuple(dict.fromkeys((*plan.accept, *findings)))
        refused = [c for c in plan.candidates if c.staged and c.verdict.status == "fail"]
        self._gate(refused, self.library.policy.for_operator(plan.accept, plan.allow_unverified))
        plan.unused_accepts = _unused(plan.accept, plan.candidates)
        return plan

    def commit(self, plan: Plan) -> list[Candidate]:
        """Merge every candidate that passed (recorded in the lock file, written once at the end);
        drop the rest from quarantine."""
        with self.library.writing():  # the merges and the lock file's read and write in one turn
            return self._commit(plan)

    def _commit(self, plan: Plan) -> list[Candidate]:
        merged: list[Candidate] = []
        entries: list[LockEntry] = []
        try:
            for candidate in plan.candidates:
                staged = self.library.root / "quarantine" / candidate.name
                if candidate.mergeable and staged.is_dir():
                    entries.append(self._merge(plan, candidate))
                    merged.append(candidate)
        finally:  # what merged is in the lock even if a later merge failed; quarantine is emptied
            if entries:
                self.lock.put(*entries)
            self.discard(plan)
        return merged

    def _merge(self, plan: Plan, candidate: Candidate) -> LockEntry:
        if candidate.change == "update":
            self._save_hand_edits(candidate.name)
        version = self.library.merge_candidate(
            candidate.name, candidate.verdict, candidate.verdict_id, note=f"installed from {plan.source}"
        )
        previous = self.lock.get(candidate.name)
        now = time.time()
        return LockEntry(
            name=candidate.name,
            source=plan.source,
            path=candidate.path,
            content_hash=candidate.content_hash,
            installed=previous.installed if previous and candidate.change == "update" else now,
            updated=now if candidate.change == "update" else None,
            verdict=candidate.verdict.status,
            version=version,
            commit=plan.commit,
            tap=plan.tap,
            accepted=list(candidate.verdict.accepted),
            accept=[f.id for f in candidate.verdict.findings if f.status == "accepted"],
            allow_unverified=plan.allow_unverified,
            warnings=candidate.warnings
            + [f"threat: {f}" for f in candidate.verdict.findings if f.status == "warning"],
            origin=candidate.origin,
        )

    def discard(self, plan: Plan) -> None:
        """Drop the plan's candidates still in quarantine."""
        for candidate in plan.candidates:
            if candidate.staged:
                shutil.rmtree(self.library.root / "quarantine" / candidate.name, ignore_errors=True)

    # -- provenance ---------------------------------------------------------------------

    def local_change(self, name: str, entry: LockEntry | None = None) -> str | None:
        """How the skill changed here since install, or None: edited by hand (the library's files
        differ from the version that was merged) or a later version (an agent's change, a rollback)."""
        entry = entry or self._entry(name)
        info = self.library.info(name)
        merged = self.library.root / "versions" / name / str(info.version)
        if content_hash(self.library.path(name)) != content_hash(merged):
            return f"edited by hand since version {info.version} was merged"
        if content_hash(merged) != entry.content_hash:
            return f"changed here since install (now version {info.version}, installed as {entry.version})"
        return None

    def outdated(self) -> list[Outdated]:
        """Every installed skill whose source now holds different content (or cannot be fetched)."""
        out = []
        for name, entry in sorted(self.lock.entries().items()):
            local = self.local_change(name, entry)
            try:
                upstream = self._upstream_hash(entry)
            except (SkillError, SkillParseError, ValueError) as exc:
                out.append(Outdated(name, entry.source, entry.content_hash, None, local, str(exc)))
                continue
            if upstream != entry.content_hash or local:
                out.append(Outdated(name, entry.source, entry.content_hash, upstream, local))
        return out

    def uninstall(self, name: str) -> None:
        """Archive an installed skill (restorable) and drop it from the lock file."""
        with self.library.writing():
            self._entry(name)
            if self.library.info(name).state != "archived":
                self.library.archive(name)
            self.lock.remove(name)

    # -- export -------------------------------------------------------------------------

    def export(self, name: str, out: Path | None = None) -> Path:
        """The skill's current version with a manifest, as a .tar.gz (default) or a directory."""
        info = self.library.info(name)
        version_dir = self.library.root / "versions" / name / str(info.version)
        verdict = self.library.history(name)[-1]["verdict"] or {}
        manifest = {
            "format": EXPORT_FORMAT,
            "name": name,
            "version": info.version,
            "content_hash": content_hash(version_dir),
            "verdict": verdict.get("status", info.status),
            "image": verdict.get("image"),
            "checks": [c["name"] for c in verdict.get("checks", [])],
            "exported": time.time(),
        }
        out = out or Path.cwd() / f"{name}-v{info.version}.tar.gz"
        if out.exists() and (out.is_file() or any(out.iterdir())):
            raise InstallError(f"{out} exists; give another --out")
        if out.name.endswith((".tar.gz", ".tgz")):
            with tarfile.open(out, "w:gz") as archive:
                data = (json.dumps(manifest, indent=2) + "\n").encode()
                member = tarfile.TarInfo(MANIFEST)
                member.size, member.mtime, member.mode = len(data), int(time.time()), 0o644
                archive.addfile(member, io.BytesIO(data))
                archive.add(version_dir, arcname=name, filter=_anonymous)
        else:
            out.mkdir(parents=True, exist_ok=True)
            shutil.copytree(version_dir, out / name, symlinks=True)
            (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        return out

    # -- internals ----------------------------------------------------------------------

    def _resolve(self, text: str) -> tuple[Source, str | None]:
        """`TAP/NAME` of a configured tap (when no such local path exists), `example:NAME` of the
        shipped examples, else a source."""
        if is_example(text):
            return parse_source(str(example_path(text))), None
        match = self.tap_reference(text)
        if match and not Path(text).exists():
            return parse_source(self.taps.resolve(match.group(1), match.group(2))), match.group(1)
        return parse_source(text), None

    def tap_reference(self, text: str) -> re.Match[str] | None:
        """`TAP/NAME` of a configured tap, as a match of (tap, name); None for anything else."""
        match = re.fullmatch(r"([a-z0-9][a-z0-9_.-]*)/([a-z0-9-]+)", text)
        return match if match and match.group(1) in self.taps.all() else None

    def _entry(self, name: str) -> LockEntry:
        entry = self.lock.get(name)
        if entry is None:
            self.library.info(name)  # UnknownSkill when there is no such skill at all
            raise InstallError(f"{name!r} was not installed from outside (it is not in the lock file)")
        return entry

    def _stage(
        self,
        directory: Path,
        root: Path,
        manifest: dict[str, Any] | None,
        change: Literal["install", "update"],
        entry: LockEntry | None = None,
    ) -> Candidate:
        rel = directory.relative_to(root).as_posix() or "."
        try:
            skill, warnings = read_lenient(directory)
        except SkillParseError as exc:
            return Candidate(directory.name, rel, Verdict(directory.name, "fail", [f"format: {exc}"]), change)
        name = skill.name
        refused = self._refusal(name, change, entry)
        if refused:
            return Candidate(name, rel, Verdict(name, "fail", [refused]), change, warnings)
        origin = None
        if manifest is not None and manifest.get("name") == name:
            origin = manifest
            if content_hash(directory) != manifest.get("content_hash"):
                reason = (
                    f"export: the content hash is {content_hash(directory)}, the manifest says "
                    f"{manifest.get('content_hash')}: the archive was changed after export"
                )
                return Candidate(name, rel, Verdict(name, "fail", [reason]), change, warnings, origin=origin)
        staged = self.library.root / "quarantine" / name
        shutil.copytree(directory, staged, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        if warnings:  # a skill that follows the spec is kept byte for byte, so its hash survives
            (staged / SKILL_FILE).write_text(
                render(dataclasses.replace(skill, path=staged)), encoding="utf-8"
            )
        digest = content_hash(staged)
        if entry is not None and digest == entry.content_hash:
            shutil.rmtree(staged)
            return Candidate(name, rel, Verdict(name, entry.verdict), "unchanged", warnings, digest)
        scripts = sorted(executable_files(staged, text_files(staged)[0]))
        pending = Verdict(name, "fail", ["not verified yet"])
        return Candidate(name, rel, pending, change, warnings, digest, origin, None, scripts, staged=True)

    def _gate(self, candidates: list[Candidate], policy: GatePolicy) -> list[Candidate]:
        """Run the gate on every staged candidate; those with checks GATE_WORKERS at a time (each in
        its own throwaway sandbox, so they verify side by side)."""

        def one(candidate: Candidate) -> None:
            candidate.verdict = self.library.check(self.library.root / "quarantine" / candidate.name, policy)
            candidate.verdict_id = self.library.store.add_verdict(candidate.verdict, "install", None)

        quarantine = self.library.root / "quarantine"
        checked = [c for c in candidates if c.staged and declared_checks(quarantine / c.name)]
        try:
            if checked:  # the first alone: it resolves (or, where missing, builds) the image just once
                one(checked[0])
            with ThreadPoolExecutor(max_workers=GATE_WORKERS) as pool:
                running = [pool.submit(one, c) for c in checked[1:]]
                for candidate in candidates:  # static checks only: here, meanwhile (threads gain nothing)
                    if candidate.staged and candidate not in checked:
                        one(candidate)
                for future in running:
                    future.result()
        except Exception as exc:  # e.g. no sandbox backend: nothing stays behind in quarantine
            self.discard(Plan("", None, None, candidates))
            raise InstallError(f"the gate could not run: {exc}") from exc
        return candidates

    def _refusal(self, name: str, change: str, entry: LockEntry | None) -> str | None:
        if (self.library.root / "quarantine" / name).exists():
            return (
                f"a candidate for {name!r} is already in quarantine (an unfinished change); discard it first"
            )
        if change == "update":
            return None if entry and entry.name == name else f"upstream renamed the skill to {name!r}"
        installed = self.lock.get(name)
        if installed is not None:
            return f"{name!r} is already installed ({installed.provenance}); `hermetic skills update {name}`"
        if self.library.store.execute("SELECT 1 FROM skills WHERE name = ?", (name,)):
            return f"a skill named {name!r} is already in the library (written here); not replaced"
        return None

    def _upstream_hash(self, entry: LockEntry) -> str:
        with tempfile.TemporaryDirectory(dir=self.library.root, prefix=".fetch-") as tmp:
            fetched = fetch_source(parse_source(entry.source), Path(tmp) / "fetch", self.limits)
            directory = fetched.root / entry.path
            skill, warnings = read_lenient(directory)
            staged = Path(tmp) / "staged" / skill.name
            shutil.copytree(directory, staged, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            if warnings:
                (staged / SKILL_FILE).write_text(render(skill), encoding="utf-8")
            return content_hash(staged)

    def _save_hand_edits(self, name: str) -> None:
        """Before an update replaces library/NAME: keep its files if they were edited by hand (a forced
        update), since no version in history holds them."""
        current = self.library.path(name)
        merged = self.library.root / "versions" / name / str(self.library.info(name).version)
        if content_hash(current) != content_hash(merged):
            stamp = time.strftime("%Y%m%d-%H%M%S")
            shutil.copytree(
                current, self.library.root / "archive" / ".edited" / f"{name}-{stamp}", symlinks=True
            )


def _unused(accept: tuple[str, ...], candidates: list[Candidate]) -> list[str]:
    accepted = [f for c in candidates for f in c.verdict.findings if f.status == "accepted"]
    return [a for a in accept if not any(f.named_by(frozenset({a})) for f in accepted)]


def _manifest(root: Path) -> dict[str, Any] | None:
    file = root / MANIFEST
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("format") == EXPORT_FORMAT else None


def _anonymous(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member
