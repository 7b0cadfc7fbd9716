"""skills: the model lists, loads and writes skills; every write goes through the verification gate."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..skills.curation import merge
from ..skills.format import SKILL_FILE, SkillFormatError
from ..skills.library import SkillError, SkillLibrary, Submission
from .registry import ToolContext, ToolResult, tool


class ListArgs(BaseModel):
    archived: bool = Field(False, description="Include archived skills.")


class ViewArgs(BaseModel):
    name: str
    file: str | None = Field(
        None, description="A file of the skill (like references/api.md); leave out for SKILL.md."
    )


class ManageArgs(BaseModel):
    action: Literal["create", "patch", "edit", "delete", "write_file", "remove_file", "merge"]
    name: str = Field(description="The skill's name: 1-64 characters of a-z, 0-9 and single hyphens.")
    content: str | None = Field(
        None, description="create: the whole SKILL.md; edit and write_file: the file's whole new content."
    )
    file: str = Field(
        SKILL_FILE, description="The file inside the skill for patch, edit, write_file, remove_file."
    )
    files: dict[str, str] = Field(
        default_factory=dict,
        description="create: supporting files by relative path, e.g. {'scripts/verify.sh': '...'}.",
    )
    old: str | None = Field(None, description="patch: text that occurs exactly once in the file.")
    new: str | None = Field(None, description="patch: its replacement.")
    sources: list[str] = Field(
        default_factory=list,
        description="merge: the skills `name` replaces (name may be one of them); archived once it passes.",
    )
    reason: str = Field(
        "", max_length=2000, description="Why this change: kept with the version and verdict."
    )


def _library(ctx: ToolContext) -> SkillLibrary:
    if ctx.skills is None:
        raise SkillError("skills are not enabled in this session")
    return ctx.skills


@tool("skills_list", toolset="skills", parallel_safe=True)
def skills_list(ctx: ToolContext, args: ListArgs) -> ToolResult:
    """List the skills in the library: name, version, flags (unverified, fail, stale, archived,
    pinned) and description. Load one with skill_view before following it."""
    try:
        skills = _library(ctx).list_skills(archived=args.archived)
    except SkillError as exc:
        return ToolResult(f"error: {exc}", ok=False)
    if not skills:
        return ToolResult("no skills yet; write one with skill_manage(action='create', ...)")
    return ToolResult(
        "\n".join(
            f"{s.name} (v{s.version}){s.marks}: {s.description}"
            + (f" ({s.provenance})" if s.provenance else "")
            for s in skills
        )
    )


class SearchArgs(BaseModel):
    query: str = Field(min_length=1, max_length=1000, description="What the skill should do, in any words.")
    limit: int = Field(8, ge=1, le=20, description="Most skills.")


@tool("skills_search", toolset="skills", parallel_safe=True)
def skills_search(ctx: ToolContext, args: SearchArgs) -> ToolResult:
    """Find skills by what they do (words and meaning, best first): name, flags and description. Load one
    with skill_view before following it."""
    try:
        found = _library(ctx).search(args.query, args.limit)
    except SkillError as exc:
        return ToolResult(f"error: {exc}", ok=False)
    if not found:
        return ToolResult(f"no skill matches {args.query!r}")
    return ToolResult("\n".join(f"{s.name} (v{s.version}){s.marks}: {s.description}" for s in found))


@tool("skill_view", toolset="skills", parallel_safe=True)
def skill_view(ctx: ToolContext, args: ViewArgs) -> ToolResult:
    """Load a skill: its SKILL.md instructions and the list of its files, or one of its files."""
    try:
        library = _library(ctx)
        text = library.view(args.name, args.file, session_id=ctx.session_id)
        info = library.info(args.name)
        if info.provenance or info.status != "pass":
            where = info.provenance or "written here"
            checked = {
                "pass": "verified: its checks passed in a sandbox",
                "unverified": "UNVERIFIED: no checks ran, read it critically",
                "fail": "FAILED its last verification",
            }[info.status]
            text = f"[{args.name}: {where}; {checked}]\n{text}"
        return ToolResult(text)
    except SkillError as exc:
        return ToolResult(f"error: {exc}", ok=False)


@tool("skill_manage", toolset="skills")
def skill_manage(ctx: ToolContext, args: ManageArgs) -> ToolResult:
    """Write a skill: a reusable procedure you worked out, for the next time a similar task comes.
    A skill is a directory in the Agent Skills format: SKILL.md starts with YAML frontmatter between
    '---' lines with `name` (equal to the skill's name) and `description` (what it does and when to use
    it, at most 1024 characters), optionally `license`, `compatibility`, and `metadata` (a map of strings;
    Hermetic's keys start with 'hermetic.', e.g. hermetic.network: "pypi.org" to ask for network access
    during checks); then Markdown instructions. Supporting files go in scripts/, references/, assets/.
    ALWAYS include checks that prove the skill works: scripts/verify.sh (run with bash in the skill's
    directory, exit 0 on success) and/or tests/ (pytest or unittest). They run offline in a fresh sandbox.
    Every create or change is a candidate: a gate checks its format, files and safety, runs its checks in
    a throwaway sandbox, and merges it as a new version only if they pass; otherwise the candidate stays
    in quarantine and you get the reasons and the check output: fix it (patch, edit, write_file) and it is
    verified again. Actions: create (content = SKILL.md, files = supporting files), patch (old -> new in
    file), edit (content replaces file), write_file, remove_file, delete (archives the skill; kept),
    merge (content = the SKILL.md of one skill `name` replacing the near-duplicates in `sources`: once it
    passes the gate they are archived, pointing at it; `hermetic skills unmerge` undoes it)."""
    try:
        library = _library(ctx)
        name = args.name
        match args.action:
            case "create":
                if not args.content:
                    raise SkillError("create needs content: the whole SKILL.md")
                library.write(name, SKILL_FILE, args.content, new=True)
                for path, text in args.files.items():
                    library.write(name, path, text)
            case "patch":
                if args.old is None or args.new is None:
                    raise SkillError("patch needs old and new")
                library.patch(name, args.file, args.old, args.new)
            case "edit" | "write_file":
                if args.content is None:
                    raise SkillError(f"{args.action} needs content: the file's whole new content")
                library.write(name, args.file, args.content)
            case "remove_file":
                library.remove_file(name, args.file)
            case "delete":
                library.archive(name)
                return ToolResult(f"skill {name!r} archived (restorable with `hermetic skills restore`)")
            case "merge":
                if not args.content:
                    raise SkillError("merge needs content: the merged skill's whole SKILL.md")
                return _report(
                    merge(library, name, args.sources, args.content, args.files, proposer=ctx.proposer,
                          session_id=ctx.session_id, note=args.reason)
                )  # fmt: skip
        return _report(
            library.submit(name, proposer=ctx.proposer, session_id=ctx.session_id, note=args.reason)
        )
    except (SkillError, SkillFormatError) as exc:
        return ToolResult(f"error: {exc}", ok=False)


def _report(submission: Submission) -> ToolResult:
    verdict = submission.verdict
    checks = "\n".join(
        f"- {check.name}: {'ok' if check.ok else 'FAILED'}"
        + (f"\n{check.output.rstrip()}" if check.output else "")
        for check in verdict.checks
    )
    if submission.version is None:
        reasons = "\n".join(f"- {reason}" for reason in verdict.reasons)
        return ToolResult(
            f"skill {verdict.skill!r} was NOT merged: it stays in quarantine. Reasons:\n{reasons}\n"
            f"Checks:\n{checks}\nFix the candidate (patch, edit, write_file) and it is verified again.",
            ok=False,
        )
    flag = " as UNVERIFIED (it has no checks)" if verdict.status == "unverified" else ""
    return ToolResult(
        f"skill {verdict.skill!r} merged{flag} as version {submission.version} "
        f"({verdict.duration_ms:.0f} ms, image {verdict.image}).\nChecks:\n{checks}"
    )
