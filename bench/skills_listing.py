"""Skills listing: the system prompt's skills section built from a library of 500 skills (over budget, so
chosen by FTS5 BM25 relevance times the smoothed success rate), and `skills_list`'s full listing.

The skills are merged through the library with a verify that passes everything: this measures the
listing, not the gate (bench/skill_gate.py measures verification). `python -m bench.skills_listing`.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from control_plane.config.settings import SkillsSettings
from control_plane.skills.library import SkillLibrary
from control_plane.skills.model import GatePolicy, Verdict

from .stats import report, sample

WORDS = [
    "deploy",
    "backup",
    "postgres",
    "docker",
    "image",
    "build",
    "test",
    "release",
    "parse",
    "csv",
    "json",
    "log",
    "rotate",
    "nginx",
    "cert",
    "renew",
    "python",
    "package",
    "wheel",
    "cache",
    "index",
    "search",
    "migrate",
    "schema",
    "kafka",
    "queue",
    "retry",
    "metrics",
    "alert",
    "bisect",
    "git",
    "branch",
    "merge",
    "lint",
    "format",
    "compress",
    "archive",
    "upload",
    "download",
    "mirror",
    "sync",
    "cron",
    "schedule",
    "report",
]
TASK = "back up the postgres database and upload the archive to the mirror"


def passes(candidate: Path, policy: GatePolicy, backend: object, pool: object) -> Verdict:
    return Verdict(candidate.name, "pass")


def filled(root: Path, count: int) -> SkillLibrary:
    rng = random.Random(6)
    library = SkillLibrary(root, SkillsSettings(), backend=lambda: None, verify=passes)  # type: ignore[arg-type, return-value]
    for i in range(count):
        topic = rng.sample(WORDS, 4)
        name = f"{topic[0]}-{topic[1]}-{i}"
        description = f"How to {' '.join(topic)} safely; use when a task needs to {topic[0]} {topic[2]}."
        body = "\n".join(f"{n}. {' '.join(rng.sample(WORDS, 8))}" for n in range(1, 30))
        library.write(
            name, "SKILL.md", f"---\nname: {name}\ndescription: {description}\n---\n{body}\n", new=True
        )
        library.submit(name, proposer="bench")
        for run in range(rng.randrange(0, 20)):
            library.mark_loaded(name, f"{name}-{run}")
            library.record_outcome(f"{name}-{run}", success=rng.random() < 0.8)
    return library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=200)
    parser.add_argument("--skills", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        library = filled(Path(root), args.skills)
        prompt = library.skills_prompt(TASK)
        listed = prompt.count("\n- ")
        print(f"{args.skills} skills; listing {len(prompt):,} chars, {listed} skills listed")
        results = {
            f"skills_prompt, {args.skills} skills, budget {library.settings.prompt_tokens} tokens": sample(
                lambda: library.skills_prompt(TASK), args.iterations
            ),
            f"list_skills, {args.skills} skills": sample(library.list_skills, args.iterations),
        }
        library.close()
    report("Skills listing", results, args.out, {"skills": args.skills, "task": TASK})


if __name__ == "__main__":
    main()
