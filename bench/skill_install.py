"""Installing skills from outside: 100 instruction-only skills from one local git repository (clone,
lenient read, static checks, merge, lock) and 10 skills with checks on Docker (each verified in its own
throwaway sandbox). Totals per run and per skill.

    python -m bench.skill_install [-n 3] [--plain 100] [--checked 10]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from backends import create_backend
from control_plane.config.settings import SkillsSettings
from control_plane.skills.install import Installer
from control_plane.skills.library import SkillLibrary
from control_plane.skills.sources import Limits

from .stats import Figure, report

VERIFY = '#!/usr/bin/env bash\nset -e\ntest "$((6 * 7))" = 42\n'
GIT_ENV = {
    "PATH": "/usr/bin:/bin",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}


def repository(root: Path, count: int, checked: bool) -> Path:
    """A git repository with `count` skills under skills/, each with scripts/verify.sh when `checked`."""
    repo = root / ("checked" if checked else "plain")
    for i in range(count):
        skill = repo / "skills" / f"skill-{i:03d}"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(
            f"---\nname: skill-{i:03d}\ndescription: Procedure number {i} for the benchmark.\n---\n"
            f"# Steps\n1. Do step {i}.\n"
        )
        if checked:
            (skill / "scripts").mkdir()
            (skill / "scripts" / "verify.sh").write_text(VERIFY)
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "skills"]):
        subprocess.run(["git", *command], cwd=repo, env=GIT_ENV, check=True)
    return repo


def install_all(repo: Path, home: Path, backend: object) -> tuple[float, int]:
    """Seconds to plan and commit every skill of `repo` into a fresh library; the number merged."""
    library = SkillLibrary(home / "skills", SkillsSettings(), backend=lambda: backend)  # type: ignore[arg-type,return-value]
    installer = Installer(library, Limits())
    start = time.perf_counter()
    merged = installer.commit(installer.plan_install(str(repo), all_=True))
    elapsed = time.perf_counter() - start
    library.close()
    return elapsed, len(merged)


def collect(n: int, plain: int, checked: int) -> dict[str, Figure]:
    backend = create_backend("docker")
    totals: dict[str, list[float]] = {"plain": [], "checked": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repos = {"plain": repository(root, plain, False), "checked": repository(root, checked, True)}
        for run in range(n):
            for kind, repo in repos.items():
                seconds, merged = install_all(repo, root / f"home-{kind}-{run}", backend)
                expected = plain if kind == "plain" else checked
                if merged != expected:
                    raise SystemExit(f"{kind}: {merged} of {expected} skills merged")
                totals[kind].append(seconds)
    return {
        f"install {plain} instruction-only skills from one git repo (total)": Figure(totals["plain"]),
        f"  per skill ({plain})": Figure([t / plain for t in totals["plain"]]),
        f"install {checked} skills with checks on Docker (total)": Figure(totals["checked"]),
        f"  per skill ({checked})": Figure([t / checked for t in totals["checked"]]),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=3)
    parser.add_argument("--plain", type=int, default=100)
    parser.add_argument("--checked", type=int, default=10)
    args = parser.parse_args()
    figures = collect(args.iterations, args.plain, args.checked)
    report("Skill install", figures, Path(__file__).parent / "results", {})
