"""Curated memory: the memory block build time (snapshot of full MEMORY.md and USER.md), a locked write.

The files are filled close to their default limits with realistic notes, so every figure includes the
threat scan of every entry. `python -m bench.memory -n 2000`.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from control_plane.config.settings import MemorySettings
from control_plane.memory import store as memory_module
from control_plane.memory.store import Memory, Op, Target
from control_plane.safety.threats import scan

from .stats import report, sample

NOTES = [
    "The repo uses pytest; run `.venv/bin/python -m pytest tests/test_x.py`, the full suite takes 5 min.",
    "dockerd is 20.10: no `docker compose` v2 plugin, use docker-compose.",
    "Images are built offline with debootstrap + docker import; there is no registry.",
    "ruff and mypy run in CI; line length 110; run them before each commit.",
    "The sessions DB is SQLite in WAL mode; PostgreSQL via HERMETIC_DATABASE_URL works too.",
    "Lesson: `pip install` needs the local mirror; --index-url is set in pip.conf already.",
    "Lesson: bwrap needs --die-with-parent or orphans stay after a crash.",
    "The user's staging host is build-2 (Debian 12, 2 vCPU); deploys go through `make deploy`.",
    "Chromium is Debian's; Playwright gets executable_path=/usr/bin/chromium.",
    "Benchmarks live in bench/ and print median/p90; tests never assert times.",
    "Lesson: the scripted model server must disable Nagle or streaming stalls 40 ms.",
    "Profiles live in ~/.hermetic/profiles/NAME with their own config, DB, memory and skills.",
    "Lesson: Modal's Sandbox.exec stdin needs drain() after write.",
    "Use `git worktree` per task; never commit to main directly.",
    "The ssh tests start sshd on 127.0.0.1 with generated keys.",
    "Lesson: FastAPI resolves dependencies with postponed annotations at module level only.",
    "tenacity 9.2: wait_exponential_jitter(multiplier=...) is the retry backoff.",
    "Logs go to the profile's logs/events.jsonl as JSON lines.",
    "The workspace in the sandbox is /workspace; it persists for the session.",
    "Lesson: a fresh docker exec costs ~60 ms; reuse one exec stream for requests.",
    "The API binds 127.0.0.1:8765 by default; tokens are scoped to a profile.",
    "Lesson: check a library's real API in site-packages before coding to it.",
    "The warm pool keeps two docker sandboxes ready; `hermetic doctor` shows its state.",
    "Lesson: a timeout kills the command's process group, not the shell session.",
    "The browser toolset is off by default; enable it with toolsets: [terminal, files, browser].",
    "Lesson: SSH hosts may lack python3.9; check `python3 --version` before the handshake.",
    "The reaper removes containers labelled hermetic.* whose ttl has passed.",
    "Lesson: read errors in full before retrying; most failures say what they need.",
]
ABOUT_USER = [
    "Name: Ada; backend engineer, works in Python and Go.",
    "Prefers short answers with the command first, explanation after.",
    "Wants small honest commits with messages saying what changed and why.",
    "Dislikes mocks; wants tests against real services.",
    "Time zone Europe/Berlin; usually works 9-18.",
    "Uses vim and tmux; do not suggest IDE-specific steps.",
    "Reviews diffs before merge; keep changes focused.",
    "Likes figures with the command that produced them.",
    "Prefers pytest parametrize over loops in tests.",
    "Writes British English in docs.",
    "Wants errors to say what to do next.",
    "Asks for type hints everywhere.",
    "Runs Debian 12 on the dev box.",
    "Uses uv for quick experiments, pip in CI.",
    "Prefers typer + rich for CLIs.",
    "Dislikes sleeps in tests; wait on events.",
    "Reads the README first; keep it current.",
    "Likes one module per concern, under 500 lines.",
    "Wants secrets never printed, even in debug logs.",
    "OK with breaking changes before 1.0 if noted.",
    "Keeps notes in ~/notes as Markdown; link there rather than copying.",
    "Wants a plan before large refactors, a short one.",
    "Prefers PostgreSQL in production, SQLite for local work.",
    "Likes benchmarks run three times with the spread shown.",
    "Reviews on Mondays and Thursdays; larger PRs wait for those days.",
    "Prefers explicit names over abbreviations in code.",
    "Asks that TODOs carry an issue number.",
    "Wants the CLI output plain when piped (no colours).",
]


ROOM = 120
"""Characters left free in MEMORY.md, so the write figure adds and removes a note without refusal."""


def filled(home: Path) -> Memory:
    """A profile whose MEMORY.md and USER.md are filled to just under their default limits."""
    memory = Memory(home, MemorySettings())
    targets: list[tuple[Target, list[str], int]] = [("memory", NOTES, ROOM), ("user", ABOUT_USER, 0)]
    for target, texts, room in targets:
        for text in texts:
            outcome = memory.apply(target, [Op(op="add", text=text)])
            if not outcome.ok or outcome.usage.chars > outcome.usage.limit - room:
                break
    return memory


def collect(n: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as home:
        memory = filled(Path(home))
        block = memory.snapshot()
        print(
            f"memory block: {len(block):,} chars; MEMORY.md {memory.read('memory').usage}, "
            f"USER.md {memory.read('user').usage}"
        )
        note = "Lesson: the benchmark note that is added and removed again."
        whole_file = memory.path("memory").read_text()

        def cold() -> None:
            memory_module._threats.cache_clear()
            memory.snapshot()

        def add_then_remove() -> None:
            assert memory.apply("memory", [Op(op="add", text=note)]).ok
            assert memory.apply("memory", [Op(op="remove", match=note)]).ok

        return {
            "memory block build (snapshot, both files full; entries scanned before)": sample(
                memory.snapshot, n
            ),
            "memory block build, first in a process (every entry scanned)": sample(cold, n),
            "threat scan of a full MEMORY.md (one text)": sample(lambda: scan(whole_file), n),
            "memory write pair (add, then remove: 2 locked, fsynced writes)": sample(
                add_then_remove, max(1, n // 10)
            ),
        }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=2000)
    args = parser.parse_args()
    report("Curated memory", collect(args.iterations), Path(__file__).parent / "results", {})
