"""The methods a path answers, for the `Allow` header of a 405: every documented route of the path, not
only the first one Starlette matched (FastAPI makes a route per method: GET and POST /sessions are two)."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.routing import APIRoute, iter_route_contexts
from starlette.routing import BaseRoute, Match
from starlette.types import Scope


def allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """The methods of the documented routes whose path matches the request's (none: the path is not one)."""
    methods: set[str] = set()
    for route in iter_route_contexts(routes):  # included routers' routes, each with its prefix
        documented = isinstance(route.original_route, APIRoute) and route.include_in_schema
        if documented and route.matches(scope)[0] != Match.NONE:
            methods |= route.methods or set()
    return sorted(methods)
