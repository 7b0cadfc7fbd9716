"""Console sign-ins: an API token exchanged for a random cookie value, kept server-side (only its
SHA-256, in ROOT/console-signins.json) with the token it came from, its expiry and its CSRF token.
A sign-in is revoked by logging out, by its expiry, or by revoking the API token it came from."""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import Request
from pydantic import BaseModel
from starlette.requests import HTTPConnection

from ..store.tokens import DigestFile, digest

COOKIE = "hermetic_signin"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class SignIn(BaseModel):
    """What the console learns about its own sign-in (GET /auth/session)."""

    profile: str
    csrf_token: str
    """Sent back in the X-CSRF-Token header of every state-changing request made with the cookie."""
    expires_at: float


class SignInStore(DigestFile):
    def __init__(self, root: Path) -> None:
        super().__init__(root / "console-signins.json")
        self._lock = threading.Lock()

    def create(self, profile: str, token_digest: str, lifetime: float) -> tuple[str, SignIn]:
        """A new sign-in for `profile` lasting `lifetime` seconds: the cookie value (never stored in
        clear) and what the console may know about it. Expired sign-ins are dropped on the way."""
        cookie = secrets.token_urlsafe(32)
        now = time.time()
        signin = SignIn(profile=profile, csrf_token=secrets.token_urlsafe(24), expires_at=now + lifetime)
        with self._lock:
            data = {key: entry for key, entry in self._load().items() if entry["expires_at"] > now}
            data[digest(cookie)] = {**signin.model_dump(), "token": token_digest}
            self._save(data)
        return cookie, signin

    def get(self, cookie: str) -> tuple[SignIn, str] | None:
        """The live sign-in of this cookie value and the digest of the token it came from, or None
        (unknown, logged out or expired)."""
        entry = self._load().get(digest(cookie))
        if entry is None or entry["expires_at"] <= time.time():
            return None
        return SignIn.model_validate(entry), str(entry["token"])

    def revoke(self, cookie: str) -> bool:
        with self._lock:
            data = self._load()
            if data.pop(digest(cookie), None) is None:
                return False
            self._save(data)
        return True


def same_origin(request: HTTPConnection) -> bool:
    """The request's Origin, when it has one, is this server as the browser reached it. Browsers send
    Origin on every cross-origin request and every POST; a request without it is no browser's form or
    fetch from another page (an `Origin: null` from a sandboxed frame or a file is refused)."""
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host", "")


def csrf_ok(request: Request, signin: SignIn) -> bool:
    """A state-changing request made with the cookie: same origin, and it carries the sign-in's CSRF
    token (which only a page of this origin can read, from GET /auth/session)."""
    if request.method in SAFE_METHODS:
        return True
    sent = request.headers.get(CSRF_HEADER, "")
    return same_origin(request) and secrets.compare_digest(sent.encode(), signin.csrf_token.encode())
