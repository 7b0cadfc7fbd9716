"""A user's search text made safe: terms for FTS5 and PostgreSQL, and snippets for substring hits.

Whatever the user types (quotes, parentheses, AND, NEAR(, *, :, -, emoji, NUL) becomes a list of plain terms:
balanced "quoted phrases" stay phrases, every other word is one term, and each term is quoted again before
it reaches a query language, so no operator the user types is ever interpreted.
"""

from __future__ import annotations

import re

MAX_TERMS = 16
"""More terms than this narrow a search no further and only cost time."""
_PHRASE = re.compile(r'"([^"]*)"')
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
"""Control characters separate words: FTS5 ends a string at NUL, and PostgreSQL text cannot hold one."""
# Han, kana, Hangul: scripts written without spaces, which the unicode61 tokenizer cannot split into words.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def terms(query: str) -> list[str]:
    """The search terms in `query`; words without a letter or digit are dropped (they match nothing)."""
    query = _CONTROL.sub(" ", query)
    found: list[str] = []
    pos = 0
    for match in _PHRASE.finditer(query):
        found += query[pos : match.start()].split()
        found.append(" ".join(match.group(1).split()))
        pos = match.end()
    found += query[pos:].replace('"', " ").split()  # an unbalanced quote is just dropped
    return [t for t in found if any(c.isalnum() for c in t)][:MAX_TERMS]


def fts5_match(words: list[str]) -> str:
    """An FTS5 MATCH expression requiring every term, each as a quoted string (terms hold no quotes)."""
    return " AND ".join(f'"{w}"' for w in words)


def trigrams(words: list[str]) -> list[str]:
    """Every three-character window of the words, as a trigram index knows them (shorter words have none):
    lowered, not casefolded, as FTS5 folds (ß stays ß; casefold makes it ss, a trigram the index lacks)."""
    return sorted({w.lower()[i : i + 3] for w in words for i in range(len(w) - 2)})


def websearch(words: list[str]) -> str:
    """Text for PostgreSQL's websearch_to_tsquery requiring every term; quoting keeps `-` and `or` literal."""
    return " ".join(f'"{w}"' for w in words)


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def mark(text: str, words: list[str], width: int = 160) -> str:
    """About `width` characters of `text` around the first term found, every term marked >>> <<<."""
    pattern = re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)), re.IGNORECASE)
    first = pattern.search(text)
    start = max(0, (first.start() if first else 0) - width // 3)
    end = min(len(text), start + width)
    window = pattern.sub(lambda m: f">>>{m.group(0)}<<<", text[start:end])
    return ("..." if start else "") + window + ("..." if end < len(text) else "")
