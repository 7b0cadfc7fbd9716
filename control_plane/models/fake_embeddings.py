"""The scripted server's /v1/embeddings: deterministic vectors, so the litellm embedding path runs offline.

Each word hashes to one of DIM dimensions (a signed feature hash): texts sharing words point the same way,
and the same text always gets the same vector, in any process.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

DIM = 64
_WORD = re.compile(r"\w+")


def vector(text: str) -> list[float]:
    out = [0.0] * DIM
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        out[digest[0] % DIM] += 1.0 if digest[1] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [x / norm for x in out]


def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(status, JSON) for an embeddings request, in OpenAI's shapes (errors in its envelope)."""
    given = body.get("input")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        error = {"message": "input must be a string or a list of strings", "type": "invalid_request_error"}
        return 400, {"error": {**error, "param": "input", "code": None}}
    data = [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)]
    tokens = sum(len(_WORD.findall(t)) for t in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return 200, {"object": "list", "data": data, "model": str(body.get("model", "")), "usage": usage}
