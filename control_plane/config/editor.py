"""config.yaml from the command line: dotted keys checked against the settings model, comments kept.

`hermetic config set sandbox.memory 4g` finds the field through the settings models, validates the
value with the field's own type and constraints, writes it with ruamel.yaml (comments, order and
quoting of the rest of the file stay as they were), and checks that the whole file still loads. Keys
(`SecretStr` fields) are refused here: they belong in the profile's .env.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import tempfile
import textwrap
import types
import typing
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, SecretStr, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from .settings import Settings

CONFIG_FILE = "config.yaml"


class ConfigError(ValueError):
    """A key or value the settings model refuses; the message names the field and what it takes."""


@dataclass
class Field:
    """One setting as the settings model defines it."""

    key: str
    annotation: Any
    info: FieldInfo
    doc: str

    @property
    def allowed(self) -> list[str]:
        """The values a Literal field takes (empty for other types)."""
        return [str(v) for v in _literals(self.annotation)]

    @property
    def secret(self) -> bool:
        return SecretStr in _leaves(self.annotation)

    @property
    def type_name(self) -> str:
        return _type_name(self.annotation)

    @property
    def section(self) -> type[BaseModel] | None:
        """The settings model this key holds (`sandbox`, `model`, ...); None for a single value."""
        return _submodel(self.annotation)

    def describe(self) -> str:
        parts = [
            f"{self.key}: {self.doc.rstrip('.') or 'no description'}",
            f"type: {self.type_name}",
        ]
        if self.allowed:
            parts.append("allowed: " + ", ".join(self.allowed))
        constraints = [str(m) for m in self.info.metadata]
        if constraints:
            parts.append("constraints: " + ", ".join(constraints))
        if not self.info.is_required():
            parts.append(f"default: {self.info.get_default(call_default_factory=True)!r}")
        return "; ".join(parts)


def config_path(settings: Settings) -> Path:
    return settings.home / CONFIG_FILE


def fields_of(model: type[BaseModel], prefix: str = "") -> list[Field]:
    """Every field of one settings model, keyed `prefix + name`, documented as `field` documents it
    (the configuration reference is generated from this)."""
    docs = _docs(model)
    return [
        Field(prefix + name, info.annotation, info, docs.get(name, info.description or ""))
        for name, info in model.model_fields.items()
    ]


def field(key: str) -> Field:
    """The settings field a dotted key names. Raises ConfigError naming the keys that exist there."""
    model: type[BaseModel] = Settings
    parts = key.split(".")
    for depth, part in enumerate(parts):
        info = model.model_fields.get(part)
        prefix = ".".join(parts[:depth]) or "the top level"
        if info is None:
            known = ", ".join(sorted(model.model_fields))
            raise ConfigError(f"unknown setting {key!r}: {prefix} has {known}")
        annotation = info.annotation
        if depth == len(parts) - 1:
            return Field(key, annotation, info, _docs(model).get(part, info.description or ""))
        sub = _submodel(annotation)
        if sub is None:
            raise ConfigError(f"{'.'.join(parts[: depth + 1])} is a single value ({_type_name(annotation)})")
        model = sub
    raise ConfigError("an empty key")  # unreachable: split gives at least one part


def parse(key: str, raw: str) -> Any:
    """The value to store for `raw` (YAML, so 4, true and [a, b] mean what they look like), checked
    against the field. Raises ConfigError with the field's description."""
    target = field(key)
    if target.secret:
        raise ConfigError(
            f"{key} is a key: keys go in the profile's .env, never in {CONFIG_FILE} (hermetic setup)"
        )
    adapter: TypeAdapter[Any] = TypeAdapter(Annotated[target.annotation, target.info])  # type: ignore[arg-type]
    try:
        candidates = [yaml.safe_load(raw), raw]
    except yaml.YAMLError:
        candidates = [raw]
    error: ValidationError | None = None
    for candidate in candidates:
        try:
            adapter.validate_python(candidate)
            return candidate
        except ValidationError as exc:
            error = error or exc
    assert error is not None
    reasons = "; ".join(e["msg"] for e in error.errors())
    raise ConfigError(f"{key}: {raw!r} is not a valid value ({reasons}). {target.describe()}")


def read(path: Path) -> CommentedMap:
    """The file as an editable tree (empty when there is none)."""
    if not path.exists():
        return CommentedMap()
    loaded = _yaml().load(path.read_text())
    if loaded is None:
        return CommentedMap()
    if not isinstance(loaded, CommentedMap):
        raise ConfigError(f"{path} does not hold a mapping of settings")
    return loaded


def set_value(path: Path, key: str, raw: str) -> Any:
    """Set one key in the file; returns the stored value. The file is left as it was on any error."""
    value = parse(key, raw)
    doc = read(path)
    node = doc
    *parents, last = key.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = CommentedMap()
        node = child
    node[last] = value
    _check_whole(doc, path)
    _write(path, doc)
    return value


def unset_value(path: Path, key: str) -> bool:
    """Remove one key from the file (its default or the environment applies again)."""
    field(key)
    doc = read(path)
    node: Any = doc
    *parents, last = key.split(".")
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or last not in node:
        return False
    del node[last]
    _write(path, doc)
    return True


def effective(settings: Settings, key: str) -> Any:
    """The value in force (environment over config.yaml over default); keys shown masked."""
    field(key)
    value: Any = settings
    for part in key.split("."):
        value = getattr(value, part, None)
    if isinstance(value, SecretStr):
        return "**********"
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def dump(doc: CommentedMap) -> str:
    out = StringIO()
    _yaml().dump(doc, out)
    return out.getvalue()


def _check_whole(doc: CommentedMap, path: Path) -> None:
    try:
        Settings.model_validate(yaml.safe_load(dump(doc)) or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path} would not load: {where}: {first['msg']}") from None


def _write(path: Path, doc: CommentedMap) -> None:
    """Atomically: a temp file beside it, then rename, keeping the old file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-")
    try:
        with os.fdopen(fd, "w") as fh:
            _yaml().dump(doc, fh)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _yaml() -> YAML:
    handler = YAML()  # round-trip mode: comments and key order survive
    handler.preserve_quotes = True
    handler.indent(mapping=2, sequence=4, offset=2)
    return handler


@functools.cache
def _docs(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the docstring under it (how this project documents settings), first paragraph."""
    docs: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split("\n\n")[0].split())
    return docs


def _args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is Annotated:
        return _args(typing.get_args(annotation)[0])
    return typing.get_args(annotation)


def _leaves(annotation: Any) -> list[Any]:
    """The types a (possibly Optional, Union or Annotated) annotation is made of."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _leaves(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [leaf for arg in typing.get_args(annotation) for leaf in _leaves(arg)]
    return [annotation]


def _submodel(annotation: Any) -> type[BaseModel] | None:
    for leaf in _leaves(annotation):
        if isinstance(leaf, type) and issubclass(leaf, BaseModel):
            return leaf
    return None


def _literals(annotation: Any) -> list[Any]:
    return [
        v for leaf in _leaves(annotation) if typing.get_origin(leaf) is Literal for v in typing.get_args(leaf)
    ]


def _type_name(annotation: Any) -> str:
    names = []
    for leaf in _leaves(annotation):
        if typing.get_origin(leaf) is Literal:
            names.append("one of " + "/".join(str(v) for v in typing.get_args(leaf)))
        elif leaf is type(None):
            names.append("none")
        elif typing.get_origin(leaf) in (list, dict):  # list of str, dict of MCPServerConfig
            names.append(f"{typing.get_origin(leaf).__name__} of {_type_name(typing.get_args(leaf)[-1])}")
        else:
            names.append(getattr(leaf, "__name__", str(leaf)))
    return " or ".join(names)
