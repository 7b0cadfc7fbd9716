"""The curator's near-duplicates: by the skills' vectors when semantic recall is on (wordllama, the same
vectors skills by relevance use), by word 3-shingles when it is off, when the model fails, or for a skill
not yet embedded; each proposal says why. The corpus is bench/duplicate_corpus.py (`python -m
bench.duplicates` prints both methods' figures on all of it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bench.duplicate_corpus import DISTINCT, DUPLICATES, Skill, library_with
from control_plane.cli.main import app as cli_app
from control_plane.config.memory import EmbeddingSettings
from control_plane.config.settings import load_settings
from control_plane.recall.embeddings import LiteLLMEmbedder, WordLlamaEmbedder
from control_plane.skills.curation import duplicates, similarity

PARAPHRASED = DUPLICATES[0]
"""postgres-backup and dump-pg-db: the same job, hardly a word in common."""
SHARED_WORDS = [DISTINCT[5], DISTINCT[6]]
"""python-wheel-release / python-virtualenv-setup and rotate-logs / search-logs-for-errors: other jobs,
the same tools and words."""
BODY = "Run the check script and compare its output with the expected answer; fail loudly otherwise."
NEAR_COPY: tuple[Skill, Skill] = (
    ("answer-check", "Check that the answer is 42.", BODY),
    ("check-answer", "Checks that the answer is 42.", BODY + " Then report it."),
)
"""A reworded copy keeping most of the wording: what the word method was made for."""


def test_a_paraphrased_duplicate_is_found_by_vectors_missed_by_words_and_shared_words_are_not_enough(
    tmp_path: Path,
) -> None:
    library = library_with(tmp_path / "skills", [s for pair in (PARAPHRASED, *SHARED_WORDS) for s in pair])
    try:
        library.embedder = WordLlamaEmbedder()
        [pair] = duplicates(library)
        assert (pair.a, pair.b, pair.method) == ("dump-pg-db", "postgres-backup", "vectors")
        assert pair.similarity >= library.settings.duplicate_vector_threshold
        assert pair.reason.startswith(
            f"cosine similarity {pair.similarity:.2f} of name, description and body"
        )
        assert WordLlamaEmbedder.model in pair.reason

        library.embedder = None  # semantic recall off: word shingles, which this pair does not share
        assert duplicates(library) == []
        assert similarity(" ".join(PARAPHRASED[0]), " ".join(PARAPHRASED[1])) < 0.05
    finally:
        library.close()


def test_a_skill_not_yet_embedded_and_a_failing_model_fall_back_to_words(
    tmp_path: Path, fake_llm: Any
) -> None:
    library = library_with(tmp_path / "skills", [*PARAPHRASED, *NEAR_COPY])
    try:
        library.store.execute("DELETE FROM skills_fts WHERE name = ?", ("check-answer",))  # not indexed yet
        library.embedder = WordLlamaEmbedder()
        found = {(p.a, p.b): p for p in duplicates(library)}
        assert set(found) == {("dump-pg-db", "postgres-backup"), ("answer-check", "check-answer")}
        assert found["dump-pg-db", "postgres-backup"].method == "vectors"
        near = found["answer-check", "check-answer"]
        assert near.method == "words" and near.reason == (
            f"Jaccard {near.similarity:.2f} of word 3-shingles of name, description and body"
        )

        fake_llm.embeddings_down = True  # the configured litellm model answers 503
        try:
            model = EmbeddingSettings(
                model="openai/text-embedding-3-small", api_base=fake_llm.url, api_key="k"
            )
            library.embedder = LiteLLMEmbedder(model)
            assert [(p.a, p.b, p.method) for p in duplicates(library)] == [
                ("answer-check", "check-answer", "words")
            ]
        finally:
            fake_llm.embeddings_down = False
    finally:
        library.close()


def test_the_cli_curator_goes_by_vectors_and_by_words_with_embeddings_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMETIC_ROOT", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("HERMETIC_PROFILE", raising=False)
    library_with(load_settings().home / "skills", [*PARAPHRASED, *NEAR_COPY]).close()
    runner = CliRunner()

    shown = runner.invoke(cli_app, ["skills", "curate"])
    assert shown.exit_code == 0, shown.output
    assert "dump-pg-db + postgres-backup: near-duplicates (cosine similarity 0." in shown.output
    assert "answer-check + check-answer: near-duplicates (cosine similarity 0." in shown.output

    monkeypatch.setenv("HERMETIC_MEMORY__EMBEDDINGS__MODEL", "off")
    shown = runner.invoke(cli_app, ["skills", "curate"])
    assert shown.exit_code == 0, shown.output
    assert "answer-check + check-answer: near-duplicates (Jaccard 0." in shown.output
    assert "dump-pg-db" not in shown.output
