"""The web console: its static files at / and /assets (plain ES modules and CSS, all served from here),
the security headers they are served with, and the sign-in routes that trade an API token for an
HttpOnly, SameSite=Strict cookie. Everything the console shows comes from the ordinary API routes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..store.tokens import digest
from .bounds import TokenText, errors
from .profiles import Cookie
from .signins import COOKIE, SignIn, csrf_ok, same_origin

STATIC = Path(__file__).parent / "console_static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""No inline script or style, no eval, nothing from another origin, never framed."""
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]

router = APIRouter(tags=["console"])


class TokenLogin(BaseModel):
    token: TokenText
    """An API token (hermetic token create)."""


class SignedOut(BaseModel):
    signed_out: bool


def _signin(request: Request, cookie: Cookie) -> tuple[str, SignIn]:
    """The request's own console sign-in (a bearer token is not one), with its cookie value."""
    found = request.app.state.signins.get(cookie) if cookie else None
    if cookie is None or found is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "not signed in to the console (POST /auth/login)")
    if not csrf_ok(request, found[0]) or request.app.state.tokens.profile_of_digest(found[1]) is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "this console sign-in cannot do that")
    return cookie, found[0]


CurrentSignIn = Annotated[tuple[str, SignIn], Depends(_signin)]


@router.post("/auth/login", responses=errors(400, 401, 403))
def login(request: Request, response: Response, body: TokenLogin) -> SignIn:
    """Trade an API token for a console sign-in: an HttpOnly, SameSite=Strict cookie (valid on every
    route the token is) and the CSRF token to send with state-changing requests."""
    if not same_origin(request):  # no other site signs a browser in as someone (login CSRF)
        raise HTTPException(status.HTTP_403_FORBIDDEN, "sign in from the console of this server")
    tokens = request.app.state.tokens
    profile = tokens.profile_of(body.token)
    if profile is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "that is not a valid API token")
    lifetime = request.app.state.signin_lifetime
    cookie, signin = request.app.state.signins.create(profile, digest(body.token), lifetime)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(lifetime),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return signin


@router.get("/auth/session", responses=errors(401))
def current_signin(signin: CurrentSignIn) -> SignIn:
    """The console's own sign-in: profile, CSRF token, expiry."""
    return signin[1]


@router.post("/auth/logout", responses=errors(401))
def logout(request: Request, response: Response, signin: CurrentSignIn) -> SignedOut:
    """End this console sign-in on the server (the cookie stops working everywhere at once)."""
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return SignedOut(signed_out=request.app.state.signins.revoke(signin[0]))


@router.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def assets() -> StaticFiles:
    """The console's scripts and styles, mounted at /assets."""
    return StaticFiles(directory=STATIC)


class ConsoleHeaders:
    """Adds the console's security headers to / and /assets/* (the API's JSON needs none, and the
    OpenAPI pages at /docs load FastAPI's own scripts)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == "/" or path.startswith("/assets/")):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)
