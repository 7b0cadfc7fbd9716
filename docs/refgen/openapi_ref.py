"""The HTTP API reference: the FastAPI app's own OpenAPI document, rendered as Markdown at build time
(routes, parameters, request bodies, statuses, schemas), so the page works offline and never drifts."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from refgen import cell

METHODS = ("get", "post", "put", "patch", "delete")


def openapi_schema() -> dict[str, Any]:
    """The schema of an app over an empty, throwaway root (nothing of the user's home is read)."""
    from control_plane.api.app import create_app

    with tempfile.TemporaryDirectory() as root:
        saved = os.environ.get("HERMETIC_ROOT")
        os.environ["HERMETIC_ROOT"] = root
        try:
            return create_app().openapi()
        finally:
            if saved is None:
                del os.environ["HERMETIC_ROOT"]
            else:
                os.environ["HERMETIC_ROOT"] = saved


def http_reference() -> str:
    schema = openapi_schema()
    groups: dict[str, list[str]] = {}
    for path, item in sorted(schema["paths"].items()):
        group = "/" + path.strip("/").split("/")[0]
        for method in METHODS:
            if method in item:
                groups.setdefault(group, []).append(_operation(method, path, item[method]))
    out = []
    for group in sorted(groups):
        out.append(f"## `{group}`\n\n" + "\n\n".join(groups[group]))
    out.append(
        "## Schemas\n\n"
        + "\n\n".join(_model(n, s) for n, s in sorted(schema["components"]["schemas"].items()))
    )
    return "\n\n".join(out) + "\n"


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    parts = [f"### {method.upper()} `{path}`"]
    if op.get("description"):
        parts.append(op["description"].strip())
    if not op.get("security"):
        parts.append("No token.")
    else:  # a route that answers 401 requires the token; one that does not only reads it when given
        required = "401" in op.get("responses", {})
        parts.append("Bearer token required." if required else "Bearer token optional.")
    if params := op.get("parameters"):
        rows = ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            rows.append(
                f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                f"{'yes' if p.get('required') else 'no'} | {cell(p.get('description', ''))} |"
            )
        parts.append("\n".join(rows))
    if body := op.get("requestBody"):
        kinds = [f"`{kind}` {_type(c.get('schema', {}))}" for kind, c in body.get("content", {}).items()]
        parts.append(
            "Body " + ("(required)" if body.get("required") else "(optional)") + ": " + ", ".join(kinds)
        )
    rows = ["| status | meaning | body |", "|---|---|---|"]
    for status, answer in op.get("responses", {}).items():
        bodies = [f"`{kind}` {_type(c.get('schema', {}))}" for kind, c in answer.get("content", {}).items()]
        rows.append(f"| {status} | {cell(answer.get('description', ''))} | {', '.join(bodies)} |")
    parts.append("\n".join(rows))
    return "\n\n".join(parts)


def _model(name: str, schema: dict[str, Any]) -> str:
    parts = [f"### {name} {{#schema-{name}}}"]
    if schema.get("description"):
        parts.append(cell(schema["description"]))
    props = schema.get("properties", {})
    if props:
        required = set(schema.get("required", []))
        rows = ["| field | type | required | description |", "|---|---|---|---|"]
        for field, sub in props.items():
            rows.append(
                f"| `{field}` | {_type(sub)} | {'yes' if field in required else 'no'} | "
                f"{cell(sub.get('description', ''))}{_limits(sub)} |"
            )
        parts.append("\n".join(rows))
    elif "enum" in schema:
        parts.append("One of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    return "\n\n".join(parts)


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name})"
    for union in ("anyOf", "oneOf", "allOf"):
        if union in schema:
            return " or ".join(_type(s) for s in schema[union])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if (
        kind == "object"
        and "additionalProperties" in schema
        and isinstance(schema["additionalProperties"], dict)
    ):
        return f"map of {_type(schema['additionalProperties'])}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    return str(kind or "any")


def _limits(schema: dict[str, Any]) -> str:
    keys = (
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "maxItems",
        "pattern",
        "default",
    )
    found = [f"{k} `{schema[k]}`" for k in keys if k in schema]
    return f" ({'; '.join(found)})" if found else ""
