"""The configuration reference: every settings field with its type, default, description and variable."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic_settings import NoDecode

from control_plane.config.editor import Field, fields_of
from control_plane.config.settings import Settings
from refgen import cell

PREFIX = "HERMETIC_"


def settings_reference() -> str:
    top = fields_of(Settings)
    out = [_table("Top level", [f for f in top if f.section is None], env=True)]
    for section in (f for f in top if f.section is not None):
        out.append(_section(section, env=True))
    return "\n\n".join(out) + "\n"


def _section(section: Field, env: bool, level: int = 1) -> str:
    assert section.section is not None
    fields = fields_of(section.section, section.key + ".")
    heading = "#" * (level + 1)
    parts = [f"{heading} `{section.key}`\n\n{section.doc}".rstrip()]
    parts.append(_table(None, [f for f in fields if f.section is None], env))
    parts += [_section(f, env, level + 1) for f in fields if f.section is not None]
    parts += [_entries(f) for f in fields if _entry_model(f) is not None]
    return "\n\n".join(p for p in parts if p)


def _entries(container: Field) -> str:
    """A list or dict of models (model.fallbacks, mcp_servers): the fields of one entry."""
    model = _entry_model(container)
    assert model is not None
    key = f"{container.key}[]" if typing.get_origin(container.annotation) is list else f"{container.key}.NAME"
    rows = fields_of(model, key + ".")
    return f"Each entry of `{container.key}` (config.yaml):\n\n" + _table(None, rows, env=False)


def _entry_model(f: Field) -> type[BaseModel] | None:
    if typing.get_origin(f.annotation) not in (list, dict):
        return None
    inner = typing.get_args(f.annotation)[-1]
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _table(title: str | None, fields: list[Field], env: bool) -> str:
    if not fields:
        return ""
    lines = [f"## {title}\n"] if title else []
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    for f in fields:
        names = f"`{f.key}`" + (f"<br>`{env_name(f.key)}`" if env else "")
        doc = f.doc or ""
        if f.secret:
            doc += " A key: set it in the profile's `.env` or the environment, never in config.yaml."
        if _entry_model(f) is None and (limits := _constraints(f)):
            doc += f" ({limits})"
        if env and NoDecode in f.info.metadata:  # its validator splits a plain string (settings.comma_list)
            doc += " The variable also takes a comma-separated list."
        lines.append(f"| {names} | {cell(f.type_name)} | {cell(_default(f))} | {cell(doc.strip())} |")
    return "\n".join(lines)


def env_name(key: str) -> str:
    """The variable that sets a dotted key: sandbox.memory -> HERMETIC_SANDBOX__MEMORY."""
    return PREFIX + key.upper().replace(".", "__")


def _default(f: Field) -> str:
    if f.info.is_required():
        return "required"
    value = f.info.get_default(call_default_factory=True)
    return f"`{_plain(value)}`"


def _plain(value: Any) -> str:
    if isinstance(value, Path):
        home = str(Path.home())
        text = str(value)
        return "~" + text[len(home) :] if text.startswith(home) else text
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json"))
    return json.dumps(value, default=str)


def _constraints(f: Field) -> str:
    signs = {
        "gt": ">",
        "ge": ">=",
        "lt": "<",
        "le": "<=",
        "min_length": "length >=",
        "max_length": "length <=",
    }
    found = []
    for meta in f.info.metadata:
        for attr, sign in signs.items():
            if getattr(meta, attr, None) is not None:
                found.append(f"{sign} {getattr(meta, attr)}")
    return ", ".join(found)
