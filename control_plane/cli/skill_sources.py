"""`hermetic skills install|update|outdated|uninstall|search|export|tap`: skills from and to outside.

Registered on the `skills` app by cli/main.py. Every install shows each candidate's verdict, reasons
and warnings before anything is merged, and asks to confirm (`--yes` answers for the operator).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..config.settings import load_settings
from ..safety.threats import Severity
from ..skills.findings import SkillFinding
from ..skills.install import Candidate, Installer, InstallError, Plan
from ..skills.sources import Limits, SourceError
from ..skills.static import THREAT_REASON
from ..skills.taps import TapError
from .listing_json import AsJson, print_json
from .skills import Name, console, errors, library

tap_app = typer.Typer(help="Taps: git repositories or HTTP indexes that list skills.", no_args_is_help=True)
Accept = Annotated[
    list[str] | None,
    typer.Option(
        "--accept",
        help="Accept a threat finding you reviewed: its id or FILE:LINE (repeatable); 'all' accepts every "
        "finding outside executable files",
    ),
]
AllowUnverified = Annotated[
    bool, typer.Option("--allow-unverified", help="Merge a skill that ships scripts but no checks")
]
Yes = Annotated[
    bool,
    typer.Option(
        "--yes", "-y", help="Merge without asking: low findings merge with a warning, others need --accept"
    ),
]


@contextlib.contextmanager
def installer() -> Iterator[Installer]:
    """The profile's installer; a refused source or tap prints its reason and exits 1."""
    install = load_settings().skill_install
    with library() as skills:
        try:
            yield Installer(skills, Limits(max_bytes=install.max_bytes, max_files=install.max_files))
        except (SourceError, TapError, OSError) as exc:
            errors.print(f"[red]{exc}[/]", markup=True)
            raise typer.Exit(1) from exc


def install(
    source: Annotated[
        str,
        typer.Argument(help="DIR, FILE.tar.gz|.zip, URL, git repo[#REF][:SUBDIR], TAP/NAME, example:NAME"),
    ],
    all_: Annotated[bool, typer.Option("--all", help="Install every skill the source holds")] = False,
    accept: Accept = None,
    allow_unverified: AllowUnverified = False,
    yes: Yes = False,
) -> None:
    """Install skills from outside: fetched on the host, gated in quarantine, merged once you confirm."""
    with installer() as inst:
        plan = inst.plan_install(
            source, all_=all_, accept=tuple(accept or ()), allow_unverified=allow_unverified
        )
        _confirm_and_commit(inst, plan, yes)


def update(
    name: Annotated[str | None, typer.Argument(help="The skill's name")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Update every installed skill")] = False,
    force: Annotated[bool, typer.Option(help="Replace a skill changed here since install")] = False,
    accept: Accept = None,
    allow_unverified: AllowUnverified = False,
    yes: Yes = False,
) -> None:
    """Fetch installed skills again; a changed one is gated and merged as a new version."""
    if (name is None) == (not all_):
        errors.print("give a skill name or --all")
        raise typer.Exit(2)
    with installer() as inst:
        names = sorted(inst.lock.entries()) if all_ else [name or ""]
        refused = 0
        for each in names:
            try:
                plan = inst.plan_update(
                    each, force=force, accept=tuple(accept or ()), allow_unverified=allow_unverified
                )
            except (InstallError, SourceError) as exc:
                if not all_:
                    raise
                errors.print(str(exc), markup=False)  # --all: one refused skill does not stop the rest
                refused += 1
                continue
            _confirm_and_commit(inst, plan, yes)
        if refused:
            raise typer.Exit(1)


def outdated() -> None:
    """Installed skills whose source now holds something else, and skills changed here since install."""
    with installer() as inst:
        rows = inst.outdated()
        for row in rows:
            upstream = row.problem or ("changed upstream" if row.upstream_hash != row.installed_hash else "")
            local = f"; {row.local_change}" if row.local_change else ""
            console.print(f"{row.name}: {upstream or 'same upstream'}{local} ({row.source})", markup=False)
        if not rows:
            console.print("every installed skill is up to date")


def uninstall(name: Name) -> None:
    """Archive an installed skill (restorable) and drop it from the lock file."""
    with installer() as inst:
        inst.uninstall(name)
        console.print(f"{name}: uninstalled (archived; `hermetic skills restore {name}` brings it back)")


def search(query: Annotated[str, typer.Argument(help="Words to find in names and descriptions")]) -> None:
    """Search the configured taps' listings and the local library."""
    with installer() as inst:
        words = query.lower().split()
        for info in inst.library.list_skills():
            if all(w in f"{info.name} {info.description}".lower() for w in words):
                console.print(f"(installed) {info.name}{info.marks}: {info.description}", markup=False)
        found, problems = inst.taps.search(query)
        for entry in found:
            console.print(f"{entry.tap}/{entry.name}: {entry.description}", markup=False)
        for problem in problems:
            errors.print(problem, markup=False)


def export(
    name: Name,
    out: Annotated[
        Path | None, typer.Option(help="A .tar.gz file (default NAME-vN.tar.gz) or a directory")
    ] = None,
) -> None:
    """Write the skill's current version with a manifest (name, version, hash, verdict, image)."""
    with installer() as inst:
        console.print(f"{name}: exported to {inst.export(name, out)}", markup=False)


@tap_app.command("add")
def tap_add(name: Annotated[str, typer.Argument()], url: Annotated[str, typer.Argument()]) -> None:
    """Add a tap: a git repository (URL or path) or an HTTP index (https://.../index.json)."""
    with installer() as inst:
        listing = inst.taps.add(name, url)
        console.print(f"tap {name}: {len(listing)} skills", markup=False)


@tap_app.command("list")
def tap_list(as_json: AsJson = False) -> None:
    """The configured taps and their URLs."""
    with installer() as inst:
        if as_json:
            print_json({"name": name, "url": url} for name, url in inst.taps.all().items())
            return
        for name, url in inst.taps.all().items():
            console.print(f"{name}: {url}", markup=False)


@tap_app.command("remove")
def tap_remove(name: Annotated[str, typer.Argument()]) -> None:
    with installer() as inst:
        inst.taps.remove(name)
        console.print(f"tap {name}: removed", markup=False)


def register(app: typer.Typer) -> None:
    for command in (install, update, outdated, uninstall, search, export):
        app.command()(command)
    app.add_typer(tap_app, name="tap")


def _confirm_and_commit(inst: Installer, plan: Plan, yes: bool) -> None:
    """Show the plan, ask about each finding that stops a merge (unless `--yes`), ask, merge what passed;
    whatever happens, nothing of it stays in quarantine."""
    try:
        _show(plan)
        if not yes and (taken := _review(plan)):
            _show(inst.accept(plan, taken))
        mergeable = [c for c in plan.candidates if c.mergeable]
        if not mergeable:
            if any(c.verdict.status == "fail" for c in plan.candidates):
                if any(f.acceptable for c in plan.candidates for f in _refused(c)):
                    errors.print("review each finding, then accept it with --accept ID (or --accept all)")
                errors.print("nothing merged")
                raise typer.Exit(1)
            return
        question = f"merge {len(mergeable)} skill(s)" + (
            " that ship scripts" if plan.needs_confirmation_for_scripts else ""
        )
        if not (yes or _ask(question + "?")):
            errors.print("nothing merged")
            raise typer.Exit(1)
        for c in inst.commit(plan):
            console.print(f"{c.name}: merged ({c.verdict.status})", markup=False)
        if len(mergeable) < len([c for c in plan.candidates if c.change != "unchanged"]):
            raise typer.Exit(1)
    finally:
        inst.discard(plan)


def _refused(candidate: Candidate) -> list[SkillFinding]:
    return [f for f in candidate.verdict.findings if f.status == "refused"]


def _review(plan: Plan) -> tuple[str, ...]:
    """Ask about each finding that alone stops a candidate; the ids the operator accepts."""
    taken: list[str] = []
    for c in plan.candidates:
        refused = _refused(c)
        if not refused or len(refused) != len(c.verdict.reasons) or not all(f.acceptable for f in refused):
            continue  # nothing to decide, or refused for more than its findings
        for f in refused:
            if _ask(
                f"{c.name}: accept the {f.severity} finding {f.family}/{f.rule} at {f.where} (id {f.id})?"
            ):
                taken.append(f.id)
    return tuple(taken)


def _ask(question: str) -> bool:
    try:
        return typer.confirm(question, default=False)
    except typer.Abort:  # no terminal to answer, or ^C: a no
        return False


_LABEL = {"refused": "refused", "accepted": "accepted", "warning": "warning, merged anyway"}
_COLOUR = {Severity.LOW: "yellow", Severity.MEDIUM: "dark_orange", Severity.HIGH: "red"}


def _show(plan: Plan) -> None:
    """Each candidate's verdict, warnings, threat findings, scripts and other reasons."""
    console.print(
        f"source: {plan.source}" + (f" (commit {plan.commit})" if plan.commit else ""), markup=False
    )
    for c in plan.candidates:
        verdict = c.verdict
        colour = {"pass": "green", "unverified": "yellow", "fail": "red"}[verdict.status]
        status = "unchanged upstream" if c.change == "unchanged" else verdict.status
        image = f", {verdict.image}" if verdict.image else ""
        console.print(f"[{colour}]{c.name}: {status}[/] ({c.change} from {c.path}{image})")
        if c.origin:
            console.print(
                f"  verdict where it was exported: {c.origin.get('verdict')} on {c.origin.get('image')}; "
                f"here: {verdict.status}",
                markup=False,
            )
        for w in c.warnings:
            console.print(f"  warning: {w}", markup=False)
        for f in verdict.findings:
            label = _LABEL[f.status]
            if f.status == "refused" and not f.acceptable:
                label += " (a finding in an executable file cannot be accepted: fix the script)"
            where = f"{f.where} {f.family}/{f.rule} (id {f.id}, {f.place}): {label}"
            console.print(f"  [{_COLOUR[f.severity]}]{f.severity}[/] {escape(where)}")
            console.print(f"    {f.excerpt}", markup=False)
        if c.scripts:
            console.print(f"  ships scripts: {', '.join(c.scripts)}", markup=False)
        for reason in verdict.reasons:
            if not reason.startswith(THREAT_REASON):
                console.print(f"  - {reason}", markup=False)
    for spec in plan.unused_accepts:
        console.print(f"[yellow]--accept {escape(spec)} matched no finding: nothing was accepted for it[/]")
