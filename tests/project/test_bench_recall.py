"""bench.recall runs end to end with tiny counts (its figures are never asserted here), and its corpus is
honest: every paraphrased question shares no content word with the session that answers it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.recall_corpus import Question, build, check

REPO = Path(__file__).resolve().parents[2]


def test_every_paraphrased_question_uses_other_words_than_its_session() -> None:
    chats, questions = build()
    assert len(chats) == 10_000 and len(questions) == 200
    assert len({q.target for q in questions}) == 200 and len({q.paraphrased for q in questions}) == 200
    check(chats, questions)
    leaky = Question("the login page is very slow", "", questions[0].target)
    with pytest.raises(AssertionError, match="shares"):
        check(chats, [leaky])


def test_the_recall_benchmark_runs_with_tiny_counts() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.recall",
            "--dialects",
            "sqlite",
            "--sessions",
            "300",
            "--messages",
            "1500",
        ]
        + ["--samples", "5", "--skills", "40"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    for line in (
        "WordLlama embedding throughput: ",
        "skills listing with 40 skills: ",
        "sqlite: recall@5 keyword, paraphrased: ",
        "sqlite: recall@5 hybrid, paraphrased: ",
        "sqlite: off-topic questions answered by semantic search, %: ",
        "sqlite: hybrid search median ms at ",
        "sqlite: target hybrid >= keyword + 20 points: ",
    ):
        assert line in run.stdout, (line, run.stdout)
