"""The sessions database: insert rate while building 100,000 messages in 2,000 sessions (search indexing
included: add_messages catches the indexes up every few thousand messages), then search and session_search
times.

The text is generated: pseudo-words drawn from a Zipf distribution (a few common words, a long tail), so a
two-word query of mid-frequency words matches from a few to a few thousand messages, as in real history.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import accumulate, cycle
from pathlib import Path
from typing import Any

from control_plane.config.settings import Limits
from control_plane.store import Store
from control_plane.tools import TOOLS, ToolContext, invoke

from .stats import sample

PROFILE = "bench"
VOCABULARY = 5000
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


class Corpus:
    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        words: set[str] = set()
        while len(words) < VOCABULARY:
            words.add("".join(self.rng.choices(SYLLABLES, k=self.rng.randint(1, 4))))
        # rank order, index 0 the most common; sorted first, as a set's order changes with the hash seed
        self.words = sorted(sorted(words), key=lambda _: self.rng.random())
        self.cum = list(accumulate(1 / rank for rank in range(1, VOCABULARY + 1)))

    def text(self) -> str:
        return " ".join(self.rng.choices(self.words, cum_weights=self.cum, k=self.rng.randint(8, 60)))

    def conversation(self, n: int) -> list[dict[str, Any]]:
        roles = cycle(["user", "assistant", "tool"])
        out: list[dict[str, Any]] = []
        for _ in range(n):
            role = next(roles)
            message: dict[str, Any] = {"role": role, "content": self.text()}
            if role == "tool":
                message.update(tool_call_id=f"call_{len(out)}", name="terminal")
            out.append(message)
        return out

    def two_words(self) -> str:
        """Two words of rank 20 to 1000: each in roughly 0.4% to 17% of messages."""
        return " ".join(self.rng.sample(self.words[20:1000], 2))

    def fragment(self) -> str:
        """The inside of a longer word: found only by the substring (trigram) fallback."""
        word = self.rng.choice([w for w in self.words[:1000] if len(w) >= 7])
        return word[1:-1]


def figures(store: Store, label: str, n: int, messages: int, sessions: int) -> dict[str, list[float]]:
    corpus = Corpus()
    per_session = messages // sessions
    calls = []
    for _ in range(sessions):
        session = store.create_session(PROFILE, title=corpus.text()[:40])
        batch = corpus.conversation(per_session)
        start = time.perf_counter()
        store.add_messages(session.id, batch)
        calls.append(time.perf_counter() - start)
    print(
        f"{label}: built {per_session * sessions:,} messages in {sessions:,} sessions at "
        f"{per_session * sessions / sum(calls):,.0f} messages/s (add_messages, {per_session} per call)"
    )
    one = store.create_session(PROFILE)

    def next_of(make: Callable[[], str]) -> Callable[[], object]:
        return lambda: store.search(PROFILE, make())

    recall = TOOLS.get("session_search")
    ctx = ToolContext(one.id, "bench", Limits(), get_sandbox=_no_sandbox, profile=PROFILE, store=store)

    def session_search() -> object:
        return invoke(recall, "session_search", json.dumps({"query": corpus.two_words()}), ctx)

    return {
        f"{label}: add_messages, {per_session} messages in one transaction": calls,
        f"{label}: add_message (one transaction each)": sample(
            lambda: store.add_message(one.id, {"role": "user", "content": corpus.text()}, prompt_tokens=9), n
        ),
        f"{label}: search, two words, {messages:,} messages": sample(next_of(corpus.two_words), n),
        f"{label}: search, substring fallback": sample(next_of(corpus.fragment), max(n // 5, 3)),
        f"{label}: session_search tool, two words (3 sessions, window and edges)": sample(session_search, n),
    }


def _no_sandbox() -> Any:
    raise RuntimeError("session_search needs no sandbox")


@contextmanager
def database(dialect: str) -> Iterator[str | None]:
    """A fresh empty database URL of `dialect` (sqlite, postgresql, or pgvector: PostgreSQL with the
    extension), removed afterwards; None when it cannot run here."""
    if dialect == "sqlite":
        with tempfile.TemporaryDirectory(prefix="hermetic-bench-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'bench.db'}"
        return
    from postgres import PostgresUnavailable, start_pgvector, start_postgres

    try:
        server = start_pgvector() if dialect == "pgvector" else start_postgres()
    except PostgresUnavailable as exc:
        print(f"skipping {dialect}: {exc}")
        yield None
        return
    try:
        yield server.url(server.create_database())
    finally:
        server.stop()


def collect(
    dialects: list[str], n: int, messages: int = 100_000, sessions: int = 2_000
) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    for dialect in dialects:
        with database(dialect) as url:
            if url is None:
                continue
            with Store(url) as store:
                results.update(figures(store, f"store {dialect}", n, messages, sessions))
    return results
