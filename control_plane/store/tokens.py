"""API bearer tokens, each bound to one profile. Only their SHA-256 is stored, in ROOT/api-tokens.json."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from ..config.settings import Settings

PREFIX = "hmt_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DigestFile:
    """A JSON object of records keyed by a secret's SHA-256, readable by its owner only, replaced
    atomically on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, data: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.stem}-")
        with os.fdopen(fd, "w") as fh:  # mkstemp makes it 0600: never readable by others
            json.dump(data, fh, indent=2)
        os.replace(tmp, self.path)


class TokenStore(DigestFile):
    def __init__(self, root: Path) -> None:
        super().__init__(root / "api-tokens.json")

    def create(self, profile: str, name: str = "") -> str:
        """A new token for `profile`; shown once, never stored in clear."""
        Settings._valid_profile(profile)
        token = PREFIX + secrets.token_urlsafe(32)
        data = self._load()
        data[digest(token)] = {"profile": profile, "name": name, "created": time.time()}
        self._save(data)
        return token

    def profile_of(self, token: str) -> str | None:
        return self.profile_of_digest(digest(token))

    def profile_of_digest(self, token_digest: str) -> str | None:
        """The profile of the token with this SHA-256 (what a console sign-in keeps), while it exists."""
        entry = self._load().get(token_digest)
        return str(entry["profile"]) if entry else None

    def list(self) -> list[dict[str, Any]]:
        """Tokens by the first 12 characters of their digest (what `revoke` takes)."""
        return [{"id": key[:12], **entry} for key, entry in self._load().items()]

    def revoke(self, token_id: str) -> bool:
        data = self._load()
        matches = [key for key in data if key.startswith(token_id)] if len(token_id) >= 6 else []
        if len(matches) != 1:
            return False
        del data[matches[0]]
        self._save(data)
        return True
