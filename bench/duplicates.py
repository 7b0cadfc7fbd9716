"""The curator's duplicate detection on bench/duplicate_corpus.py: each pair's similarity by words
(Jaccard of word 3-shingles) and by vectors (wordllama's cosine), and each method's precision and recall
at its threshold and at every threshold the corpus distinguishes. `python -m bench.duplicates`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from control_plane.config.settings import SkillsSettings
from control_plane.recall.embeddings import WordLlamaEmbedder
from control_plane.skills.curation import duplicates

from .duplicate_corpus import DISTINCT, DUPLICATES, Skill, library_with

ALL = 1e-9
"""A threshold every pair passes, so duplicates() reports each pair's similarity."""


def pair_similarity(root: Path, a: Skill, b: Skill, *, vectors: bool) -> float:
    """The similarity duplicates() gives the pair in a library holding just the two."""
    settings = SkillsSettings(duplicate_threshold=ALL, duplicate_vector_threshold=ALL)
    library = library_with(root, [a, b], settings)
    try:
        library.embedder = WordLlamaEmbedder() if vectors else None
        pairs = duplicates(library)  # none: nothing in common at all
        assert all(pair.method == ("vectors" if vectors else "words") for pair in pairs)
        return pairs[0].similarity if pairs else 0.0
    finally:
        library.close()


def scores(*, vectors: bool) -> tuple[list[float], list[float]]:
    """(duplicates' similarities, distinct pairs' similarities)."""
    with tempfile.TemporaryDirectory() as root:
        found = [
            [
                pair_similarity(Path(root) / f"{label}{i}", a, b, vectors=vectors)
                for i, (a, b) in enumerate(pairs)
            ]
            for label, pairs in (("dup", DUPLICATES), ("distinct", DISTINCT))
        ]
    return found[0], found[1]


def precision_recall(
    dups: list[float], distinct: list[float], threshold: float
) -> tuple[float | None, float]:
    true = sum(s >= threshold for s in dups)
    false = sum(s >= threshold for s in distinct)
    return (true / (true + false) if true + false else None), true / len(dups)


def main() -> None:
    defaults = SkillsSettings()
    for name, vectors, threshold in (
        ("words (Jaccard of 3-shingles)", False, defaults.duplicate_threshold),
        ("vectors (wordllama cosine)", True, defaults.duplicate_vector_threshold),
    ):
        dups, distinct = scores(vectors=vectors)
        print(f"{name}")
        print(f"  duplicates: {' '.join(format(s, '.3f') for s in sorted(dups))}")
        print(f"  distinct:   {' '.join(format(s, '.3f') for s in sorted(distinct))}")
        for t in sorted({threshold, *dups, *distinct}):
            precision, recall = precision_recall(dups, distinct, t)
            shown = "-" if precision is None else f"{precision:.2f}"
            mark = "  <- default" if t == threshold else ""
            print(f"  threshold {t:.3f}: precision {shown}, recall {recall:.2f}{mark}")


if __name__ == "__main__":
    main()
