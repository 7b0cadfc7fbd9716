"""The API against requests generated from its own OpenAPI document (schemathesis, in-process): no
request is a server error, and every answer is one the document lists, with the listed content type
and body shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from conftest import get_backend
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from control_plane.api.app import create_app
from control_plane.api.profiles import current_profile, live_session
from control_plane.api.tokens import TokenStore
from control_plane.settings import Settings, load_settings

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 12
"""Generated requests per operation and mode: the whole run stays well under a minute."""
STREAMING = ("/sessions/{session_id}/events", "/sessions/{session_id}/watch")
"""Left out: an event stream stays open until the session's next turn ends (tests/test_api.py covers it),
a watch until its path goes away (tests/test_sandbox_api.py covers it)."""


@pytest.fixture
def served(tmp_path: Path, fake_llm: Any) -> Iterator[tuple[FastAPI, str, str]]:
    """The app (profile alpha, the scripted model, the local backend), a token, and one real session."""
    get_backend("local")
    fake_llm.load([{"text": "ok"}] * 2000)
    model = {"name": "openai/scripted", "api_base": fake_llm.url, "api_key": "k-123456", "retries": 0}

    def settings_for(profile: str) -> Settings:
        return load_settings(profile, root=tmp_path, model=model, backend="local")

    token = TokenStore(tmp_path).create("alpha")
    app = create_app(tmp_path, settings_for)
    profile = app.state.hub.profile("alpha")
    session = profile.agent.new_conversation(title="fuzzed", source="api").id
    yield app, token, session
    app.state.hub.close()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_generated_requests_get_documented_answers(
    served: tuple[FastAPI, str, str], mode: GenerationMode
) -> None:
    app, token, session = served
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in STREAMING:
            continue
        known = {"session_id": session} if "{session_id}" in operation.path else None
        for path_parameters in (None, known) if known else (None,):

            @seed(12)
            @settings(
                max_examples=EXAMPLES,
                derandomize=True,
                database=None,
                deadline=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(mode, path_parameters=path_parameters))
            def check(case: Any) -> None:
                case.call_and_validate(headers={**(case.headers or {}), **headers}, checks=CHECKS)

            try:
                check()
            except Unsatisfiable:  # nothing to make invalid (GET /health in negative mode)
                continue
            except (
                Exception,
                BaseExceptionGroup,
            ) as exc:  # collect every operation's failure, not just the first
                failures.append(f"{operation.label} ({mode}, known={bool(path_parameters)}): {exc}")
    assert not failures, "\n\n".join(failures)


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def test_every_route_documents_its_token_and_body_errors(served: tuple[FastAPI, str, str]) -> None:
    """What any new route answers before its own code runs: 401 when it takes a bearer token, 404 when
    it takes a live session, 400 when it takes a JSON body FastAPI cannot parse. Checked here route by
    route, whatever the fuzzer's examples happen to try (a router's `responses=bounds.AUTHENTICATED`
    gives 400 and 401)."""
    app = served[0]
    document = app.openapi()["paths"]
    missing = []
    for route in iter_route_contexts(app.routes):  # the routes of included routers too
        if not isinstance(route.original_route, APIRoute) or not route.include_in_schema:
            continue
        calls = set(_calls(route.dependant))
        needed = {
            code
            for dependency, code in ((current_profile, "401"), (live_session, "404"))
            if dependency in calls
        }
        needed |= {"400"} if route.body_field is not None else set()
        for method in route.methods or ():
            documented = document[route.path_format][method.lower()]["responses"]
            missing += [f"{method} {route.path_format}: {code}" for code in sorted(needed - set(documented))]
    assert not missing, "undocumented: " + ", ".join(missing)
