"""The A2A routes of `hermetic serve`: the agent card at the well-known path (public, as A2A wants;
with a token it is the caller's profile's) and the JSON-RPC endpoint, behind the API's bearer tokens.

The SDK's dispatcher does the protocol (v1.0 methods `SendMessage`, `SendStreamingMessage`, `GetTask`,
`CancelTask`, ...; and the v0.3 names `message/send`, `message/stream`, `tasks/get`, `tasks/cancel`
beside them): errors in the JSON-RPC envelope, streams as SSE. Tasks are kept in each profile's database
(a2a_store.py; the profile's name is the SDK's task owner).
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.requests import Request as StarletteRequest

from ..a2a.card import RPC_PATH, agent_card, base_card
from .a2a_store import ProfileTasks, ProfileUser
from .a2a_tasks import HermeticExecutor
from .bounds import errors
from .profiles import Auth, Hub, OptionalAuth


class _Calls(DefaultServerCallContextBuilder):
    """The SDK's call context, with the caller's profile (the route's bearer token found it)."""

    def build(self, request: StarletteRequest) -> ServerCallContext:
        context = super().build(request)
        profile = request.state.a2a_profile
        context.user = ProfileUser(profile.settings.profile)
        context.state["profile"] = profile
        context.state["headers"].pop("authorization", None)  # the token goes no further than this
        return context


def a2a_router(default_profile: str, tasks: ProfileTasks) -> APIRouter:
    """The routes; the public card (no token) is `default_profile`'s."""
    handler = DefaultRequestHandler(HermeticExecutor(), tasks, base_card(""))
    dispatcher = JsonRpcDispatcher(handler, _Calls(), enable_v0_3_compat=True)
    router = APIRouter(tags=["a2a"])

    @router.get(AGENT_CARD_WELL_KNOWN_PATH, include_in_schema=False)  # a discovery document, not an operation
    def card(request: Request, profile: OptionalAuth) -> JSONResponse:
        """The A2A agent card: the caller's profile with its library's skills when the request has a
        token, else the server's default profile without them (a skill's name and description are the
        profile's own business)."""
        hub: Hub = request.app.state.hub
        agent = (profile or hub.profile(default_profile)).agent
        card = agent_card(agent, str(request.base_url).rstrip("/"), library=profile is not None)
        return JSONResponse(agent_card_to_dict(card))

    @router.post(RPC_PATH, responses=errors(401))
    async def rpc(request: Request, profile: Auth) -> Response:
        """A2A JSON-RPC 2.0 (protocol 1.0, with the v0.3 method names too): one request per POST; a
        streaming method answers with server-sent events."""
        request.state.a2a_profile = profile
        return await dispatcher.handle_requests(request)

    return router
