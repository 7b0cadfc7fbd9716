"""`hermetic skills ...`: the profile's skill library from the terminal."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..config.settings import load_settings
from ..recall.embeddings import embedder_for
from ..sandbox_manager import choose_backend
from ..skills.curation import duplicates
from ..skills.curation import unmerge as unmerge_skill
from ..skills.library import SkillError, SkillLibrary
from ..skills.model import Verdict
from ..store.profile_lock import ProfileLock
from .listing_json import AsJson, print_json

app = typer.Typer(help="The skill library: list, inspect, verify, version, curate.", no_args_is_help=True)
console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)
Name = Annotated[str, typer.Argument(help="The skill's name")]


@contextlib.contextmanager
def library() -> Iterator[SkillLibrary]:
    """The current profile's library; a refused request prints its reason and exits 1."""
    settings = load_settings()
    lock = ProfileLock(settings.home, settings.profile, settings.database_url)  # as the agent's, beside it
    skills = SkillLibrary(
        settings.home / "skills", settings.skills, lambda: choose_backend(settings)[0], lock=lock
    )
    try:
        yield skills
    except SkillError as exc:
        errors.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from exc
    finally:
        skills.close()


@app.command("list")
def list_(
    archived: Annotated[bool, typer.Option(help="Include archived skills")] = False, as_json: AsJson = False
) -> None:
    """Every skill with its version, verdict, state and how its runs went."""
    with library() as skills:
        listed = skills.list_skills(archived=archived)
        if as_json:
            print_json({**asdict(s), "runs": s.runs, "success_rate": s.observed_rate} for s in listed)
            return
        table = Table(box=None, pad_edge=False)
        for column in ("name", "ver", "status", "state", "runs ok"):  # short: never wrapped nor cut
            table.add_column(column, no_wrap=True, justify="right" if column == "ver" else "left")
        table.add_column("description", overflow="fold", min_width=20)
        for s in listed:
            state = s.state + (", pinned" if s.pinned else "")
            state += f", merged into {s.merged_into}" if s.merged_into else ""
            runs = f"{s.successes}/{s.runs}" if s.runs else "never run"
            about = escape(_first_sentence(s.description))
            if s.provenance:
                about += f"\n[dim]{escape(s.provenance.replace('installed from ', 'from ', 1))}[/]"
            table.add_row(s.name, str(s.version), s.status, state, runs, about)
        console.print(table)


@app.command()
def show(name: Name, file: Annotated[str | None, typer.Argument(help="A file of the skill")] = None) -> None:
    """A skill's SKILL.md (and its file list), or one of its files."""
    with library() as skills:
        console.print(skills.view(name, file), markup=False)


@app.command()
def verify(
    name: Annotated[str | None, typer.Argument(help="The skill's name")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Re-verify the whole library")] = False,
) -> None:
    """Run the gate again on a skill's current version (or all of them); failing skills are marked."""
    if (name is None) == (not all_):
        errors.print("[red]give a skill name or --all[/]")
        raise typer.Exit(2)
    with library() as skills:
        verdicts = skills.reverify_all() if all_ else [skills.reverify(name or "")]
        for verdict in verdicts:
            _print_verdict(verdict)
        if any(v.status == "fail" for v in verdicts):
            raise typer.Exit(1)


@app.command()
def history(name: Name) -> None:
    """Every merged version with the verdict that let it in, then every verdict (failed ones too)."""
    with library() as skills:
        table = Table("version", "merged", "status", "note", "image", "ms")
        for row in skills.history(name):
            verdict = row["verdict"] or {}
            table.add_row(
                str(row["version"]),
                time.strftime("%Y-%m-%d %H:%M", time.localtime(row["created"])),
                verdict.get("status", "-"),
                row["note"],
                str(verdict.get("image") or "-"),
                f"{verdict.get('duration_ms', 0):.0f}",
            )
        console.print(table)
        verdicts = Table("verdict", "status", "by", "session", "reasons")
        for v in skills.verdicts(name):
            verdicts.add_row(
                str(v["id"]), v["status"], v["proposer"], v["session_id"] or "-", "; ".join(v["reasons"])
            )
        console.print(verdicts)


@app.command()
def diff(
    name: Name,
    old: Annotated[int, typer.Argument(help="The older version")],
    new: Annotated[int | None, typer.Argument(help="The newer version (default: current)")] = None,
) -> None:
    """A unified diff of every file between two versions."""
    with library() as skills:
        console.print(skills.diff(name, old, new) or "(no differences)", markup=False)


@app.command()
def rollback(name: Name, version: Annotated[int, typer.Argument(help="The version to bring back")]) -> None:
    """Make an earlier version current again (recorded as a new version)."""
    with library() as skills:
        console.print(f"{name}: version {skills.rollback(name, version)} is version {version} again")


@app.command()
def archive(name: Name) -> None:
    """Move a skill out of the library (kept on disk; `restore` brings it back)."""
    with library() as skills:
        skills.archive(name)
        console.print(f"{name}: archived")


@app.command()
def restore(name: Name) -> None:
    """Bring an archived skill back into the library."""
    with library() as skills:
        skills.restore(name)
        console.print(f"{name}: restored")


@app.command()
def pin(name: Name, unpin: Annotated[bool, typer.Option(help="Remove the pin")] = False) -> None:
    """Pin a skill: curation never marks it stale or archives it."""
    with library() as skills:
        skills.pin(name, not unpin)
        console.print(f"{name}: {'unpinned' if unpin else 'pinned'}")


@app.command()
def curate(
    apply: Annotated[bool, typer.Option(help="Do it (without: only show what curation would do)")] = False,
) -> None:
    """Show, or with --apply do: mark long-unused skills stale, archive the longest unused (pinned ones
    are left alone), and offer near-duplicate pairs to the reviewer, who may merge them (through the
    gate; `hermetic skills unmerge NAME` undoes a merge). Failing skills are listed for a look."""
    with library() as skills:
        skills.embedder = embedder_for(load_settings().memory.embeddings)  # duplicates by vectors
        lines = skills.curate(apply=apply)
        pairs = duplicates(skills)
        failing = [s.name for s in skills.list_skills() if s.state == "failing"]
    lines += [
        f"{p.a} + {p.b}: near-duplicates ({p.reason}){'' if apply else ', a merge to review'}" for p in pairs
    ]
    lines += [
        f"{name}: failing (out of the prompt listing; hermetic skills restore {name})" for name in failing
    ]
    for line in lines or ["nothing to do"]:
        console.print(line, markup=False)
    if apply and pairs:
        from ..agent.agent import Agent
        from ..agent.curation import review_duplicates

        agent = Agent(load_settings())
        try:
            for answer in review_duplicates(agent, pairs):
                console.print(answer, markup=False)
        finally:
            agent.close()
    elif pairs:
        console.print("[dim]run with --apply to have the reviewer merge them[/]")


@app.command()
def unmerge(name: Name) -> None:
    """Undo the latest merge into NAME: the merged skills come back and NAME returns to before it."""
    with library() as skills:
        for change in unmerge_skill(skills, name):
            console.print(change, markup=False)


def _first_sentence(text: str) -> str:
    """A description's first sentence: what the skill does (the rest tells the model when to use it)."""
    head, dot, _ = text.partition(". ")
    return head + dot.strip()


def _print_verdict(verdict: Verdict) -> None:
    colour = {"pass": "green", "unverified": "yellow", "fail": "red"}[verdict.status]
    console.print(
        f"[{colour}]{verdict.skill}: {verdict.status}[/] ({verdict.duration_ms:.0f} ms, {verdict.image})"
    )
    for reason in verdict.reasons:
        console.print(f"  - {reason}", markup=False)
