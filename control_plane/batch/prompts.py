"""A batch's prompts file (JSON lines) and its results file, read and checked before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..tools import TOOLS


class BatchError(ValueError):
    """A prompts or results file that cannot be used; the message says where and why."""


class BatchItem(BaseModel):
    """One line of prompts.jsonl: `{"prompt": ...}` with an optional id, category and toolsets."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=200_000, pattern=r"^[^\x00]*$")
    """No NUL: PostgreSQL text cannot hold one."""
    id: str = Field("", max_length=200)
    """Default: line-N (its line number), so a resumed run names it the same."""
    category: str | None = Field(None, max_length=200)
    toolsets: list[str] | None = Field(None, max_length=50)


def read_prompts(path: Path) -> list[BatchItem]:
    """Every prompt of the file. Raises BatchError naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchError(f"cannot read {path}: {exc}") from None
    return parse_prompts(text, str(path))


def parse_prompts(text: str, path: str) -> list[BatchItem]:
    """Every prompt of a prompts file's text (`path` names it in errors); a JSON string on a line is a
    prompt, the toolsets must be known. Raises BatchError naming the line."""
    lines = text.splitlines()
    items: list[BatchItem] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            item = BatchItem(prompt=data) if isinstance(data, str) else BatchItem.model_validate(data)
        except json.JSONDecodeError as exc:
            raise BatchError(f"{path}:{number}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors()
            )
            raise BatchError(f"{path}:{number}: {problems}") from None
        item.id = item.id or f"line-{number}"
        if item.id in seen:
            raise BatchError(f"{path}:{number}: id {item.id!r} is used twice")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise BatchError(f"{path}: no prompts")
    unknown = {t for item in items for t in item.toolsets or []} - TOOLS.toolsets
    if unknown:
        raise BatchError(f"{path}: unknown toolset(s) {', '.join(sorted(unknown))}")
    return items


def finished_ids(results: Path) -> set[str]:
    """Ids with a completed result in results.jsonl. A line torn by a crash is cut off first, so the next
    result starts on a line of its own."""
    if not results.exists():
        return set()
    raw = results.read_bytes()
    if raw and not raw.endswith(b"\n"):
        raw = raw[: raw.rfind(b"\n") + 1]
        results.write_bytes(raw)
    done: set[str] = set()
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("status") == "completed":
            done.add(str(entry.get("id")))
    return done
