"""The API against requests generated from its own OpenAPI document (schemathesis, against the served
app): no request is a server error, every answer is one the document lists (status, content type, body
shape, headers), an undocumented method is a 405 whose `Allow` lists the path's documented methods, and
sequences of calls chained by the document's links (a session created, then used) hold the same.

Every operation of the document is covered, whatever routes it gains: the stateless phases run per
operation, the stateful phase follows the links schemathesis infers. The profile is at its sandbox limit
(one, held by a session the fuzzer finds through GET /sessions), so any route that would start another
sandbox must answer its documented 429."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import schemathesis
from conftest import get_backend
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.api.profiles import LiveSession, current_profile, live_session
from control_plane.models.fake_llm import FakeLLM
from control_plane.store.tokens import TokenStore

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
"""The checks on what the server answers. Left out: positive_data_acceptance and negative_data_rejection
(a schema-valid cron schedule or skill source can still be refused with a 400 that says why), the auth
checks (test_api.py covers tokens and profiles), and the coverage phase's method checks, which
schemathesis's pytest loader cannot run under pytest 9 (test_undocumented_methods_... does their work)."""
EXAMPLES = 10
"""Generated requests per operation, generation mode and session."""
SCENARIOS = 100
"""Stateful scenarios, each up to STEPS linked calls; the whole file stays near a minute and a half here."""
STEPS = 8
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Served:
    app: FastAPI
    url: str
    token: str
    holder: str
    """The session holding the profile's only sandbox."""
    other: str
    """A session with no sandbox."""


def _endless(ctx: Any) -> bool:
    """An operation whose answer is only an event stream, open until something else happens (a turn's
    end): a fuzzer would wait on it. test_api.py follows those streams."""
    ok = ctx.operation.definition.raw.get("responses", {}).get("200", {})
    return set(ok.get("content", {})) == {"text/event-stream"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The app over HTTP (profile alpha, the scripted model, the local backend) at limits.max_sandboxes=1,
    and two sessions: the holder of its one sandbox (at_the_limit) and another. Exposed ports bind
    127.0.0.2, where no other test listens."""
    get_backend("local")
    root = tmp_path_factory.mktemp("fuzz")
    with FakeLLM([{"text": "ok"}] * 5000) as model:
        settings_for = scripted_profiles(
            root,
            model.url,
            limits={"max_sandboxes": 1},
            sandbox={"idle_seconds": None},
            network={"expose_bind": "127.0.0.2"},
        )
        token = TokenStore(root).create("alpha")
        app = create_app(root, settings_for)
        with serve_app(app) as url:
            profile = app.state.hub.profile("alpha")
            holder = profile.agent.new_conversation(title="holds the sandbox", source="api")
            profile.keep(LiveSession(holder))
            other = profile.agent.new_conversation(title="holds none", source="api")
            yield Served(app, url, token, holder.id, other.id)


def at_the_limit(served: Served) -> None:
    """The holder holds the profile's only sandbox again, whatever the calls so far closed or started."""
    sandboxes = served.app.state.hub.profile("alpha").agent.sandboxes
    for session in sandboxes.held() - {served.holder}:
        sandboxes.release(session)
    sandboxes.get(served.holder)


@pytest.fixture(scope="module")
def api_schema(served: Served) -> Any:
    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json").exclude(func=_endless)
    schema.config.update(headers={"Authorization": f"Bearer {served.token}"}, request_timeout=30)
    return schema


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_generated_requests_get_documented_answers(
    api_schema: Any, served: Served, mode: GenerationMode
) -> None:
    """Each operation on its own; a session's routes also with the holder's id and with another
    session's (which holds no sandbox, so starting one is over the limit)."""
    failures: list[str] = []
    for result in api_schema.get_all_operations():
        operation = result.ok()
        sessions = (None, served.holder, served.other) if "{session_id}" in operation.path else (None,)
        for session in sessions:
            at_the_limit(served)

            @FUZZ
            @given(
                case=operation.as_strategy(mode, path_parameters={"session_id": session} if session else None)
            )
            def check(case: Any) -> None:
                case.call_and_validate(checks=CHECKS)

            try:
                check()
            except Unsatisfiable:  # nothing to make invalid (GET /health in negative mode)
                continue
            except (Exception, BaseExceptionGroup) as exc:  # every operation's failure, not just the first
                failures.append(f"{operation.label} ({mode}, session={session}): {exc}")
    assert not failures, "\n\n".join(failures)


def test_undocumented_methods_are_405_with_the_documented_ones_in_allow(served: Served) -> None:
    """What schemathesis's coverage phase checks (ST204, ST205), for every path of the document: a method
    it does not list is a 405 whose `Allow` names exactly the listed ones (HEAD and OPTIONS aside). A
    path can take the shape of two templates (/skills/install, /skills/{name}): it answers both's."""
    document = served.app.openapi()["paths"]
    shapes = {template: re.compile(re.sub(r"\{[^}]+\}", "[^/]+", template) + "$") for template in document}
    wrong = []
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {served.token}"}) as client:
        for template in document:
            path = re.sub(r"\{[^}]+\}", "x-1", template)  # any value: routing matches the path's shape
            documented = {m.upper() for t, shape in shapes.items() if shape.match(path) for m in document[t]}
            for method in sorted(set(METHODS) - documented):
                answer = client.request(method, path)
                allow = set(answer.headers.get("allow", "").replace(" ", "").split(",")) - {"HEAD", "OPTIONS"}
                if answer.status_code != 405 or allow != documented:
                    wrong.append(f"{method} {path}: {answer.status_code}, Allow {sorted(allow)}")
    assert not wrong, "\n".join(wrong)


def test_linked_calls_get_documented_answers(api_schema: Any, served: Served) -> None:
    """The stateful phase: calls chained by the links schemathesis infers from the document (POST
    /sessions, then that session's routes; GET /sessions, then each listed one's)."""
    machine = api_schema.as_state_machine()

    class Checked(machine):  # type: ignore[misc, valid-type]
        def setup(self) -> None:
            at_the_limit(served)

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS)

    Checked.run(settings=settings(FUZZ, max_examples=SCENARIOS, stateful_step_count=STEPS))
    held = served.app.state.hub.profile("alpha").agent.sandboxes.held()
    assert len(held) <= 1, f"sandboxes over limits.max_sandboxes: {held}"


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def test_every_route_documents_its_token_and_body_errors(served: Served) -> None:
    """What any new route answers before its own code runs: 401 when it takes a bearer token, 404 when
    it takes a live session, 400 when it takes a JSON body FastAPI cannot parse. Checked here route by
    route, whatever the fuzzer's examples happen to try (a router's `responses=bounds.AUTHENTICATED`
    gives 400 and 401)."""
    app = served.app
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
