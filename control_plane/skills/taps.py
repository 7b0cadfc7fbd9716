"""Taps: named places that list skills, so `TAP/NAME` installs one and `skills search` finds them.

A tap is a git repository (every directory holding a SKILL.md is a skill) or an HTTP index: a JSON
document `{"skills": [{"name", "description", "source"}]}` whose `source` is any install source (a
relative URL is taken relative to the index). Taps are kept in `skills/taps.json` of the profile.
The same taps name evaluation suites (`hermetic eval run TAP/NAME`): a repository's directory NAME,
or an index's `"suites": [{"name", "source"}]` entry.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from .lenient import SkillParseError, read_lenient
from .reach import opener
from .sources import HTTP_TIMEOUT, Limits, SourceError, fetch, find_skills, parse_source

TAPS_FILE = "taps.json"
TAP_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class TapError(ValueError):
    """An unknown tap, a bad tap name, or a listing that cannot be read."""


class UnknownTap(TapError):
    """No tap by that name."""


@dataclass(frozen=True)
class TapSkill:
    tap: str
    name: str
    description: str
    source: str
    """What `hermetic skills install` is given for `TAP/NAME`."""


class Taps:
    def __init__(self, root: Path, limits: Limits) -> None:
        self.path = root / TAPS_FILE
        self.root = root
        self.limits = limits

    def all(self) -> dict[str, str]:
        """Tap name -> URL."""
        if not self.path.exists():
            return {}
        return dict(json.loads(self.path.read_text(encoding="utf-8")))

    def add(self, name: str, url: str) -> list[TapSkill]:
        """Add a tap after reading its listing once (a tap that lists nothing readable is refused)."""
        if not TAP_NAME.match(name):
            raise TapError(f"{name!r} is not a tap name: lower-case letters, digits, '-', '_' and '.'")
        taps = self.all()
        if name in taps:
            raise TapError(f"a tap named {name!r} exists ({taps[name]}); remove it first")
        if not _is_http_index(url) and "://" not in url:
            url = str(Path(url).expanduser().resolve())
        listing = self._listing(name, url)
        self._write({**taps, name: url})
        return listing

    def remove(self, name: str) -> None:
        taps = self.all()
        if name not in taps:
            raise UnknownTap(f"there is no tap named {name!r}; `hermetic skills tap list` shows them")
        del taps[name]
        self._write(taps)

    def listing(self, name: str) -> list[TapSkill]:
        taps = self.all()
        if name not in taps:
            raise UnknownTap(f"there is no tap named {name!r}; `hermetic skills tap list` shows them")
        return self._listing(name, taps[name])

    def resolve(self, tap: str, skill: str) -> str:
        """The install source of `TAP/NAME`."""
        for entry in self.listing(tap):
            if entry.name == skill:
                return entry.source
        raise TapError(f"tap {tap!r} lists no skill named {skill!r}; `hermetic skills search` finds skills")

    def suite(self, tap: str, name: str) -> str:
        """The fetch source of the evaluation suite `TAP/NAME`: directory NAME of a repository tap, or
        the `suites` entry NAME of an HTTP index (its source relative to the index)."""
        taps = self.all()
        if tap not in taps:
            raise UnknownTap(f"there is no tap named {tap!r}; `hermetic skills tap list` shows them")
        url = taps[tap]
        if not _is_http_index(url):
            return f"{url}#:{name}"
        suites = _read_index(tap, url, self.limits).get("suites")
        for item in suites if isinstance(suites, list) else []:
            if isinstance(item, dict) and item.get("name") == name and isinstance(item.get("source"), str):
                return urllib.parse.urljoin(url, item["source"])
        raise TapError(f'tap {tap!r} lists no suite named {name!r} (its index\'s "suites")')

    def search(self, query: str) -> tuple[list[TapSkill], list[str]]:
        """Skills of every tap whose name or description holds every word of `query`, and one line per
        tap that could not be read (the others are still searched)."""
        words = query.lower().split()
        found: list[TapSkill] = []
        problems: list[str] = []
        for name in self.all():
            try:
                listing = self.listing(name)
            except (TapError, SourceError) as exc:
                problems.append(f"tap {name}: {exc}")
                continue
            found += [e for e in listing if all(w in f"{e.name} {e.description}".lower() for w in words)]
        return found, problems

    def _listing(self, tap: str, url: str) -> list[TapSkill]:
        if _is_http_index(url):
            return _http_index(tap, url, self.limits)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".tap-") as tmp:
            fetched = fetch(parse_source(url), Path(tmp), self.limits)
            entries = []
            for directory in find_skills(fetched.root):
                try:
                    skill, _ = read_lenient(directory)
                except SkillParseError:
                    continue  # an unreadable skill is not listed; installing it says why
                rel = directory.relative_to(fetched.root).as_posix()
                entries.append(TapSkill(tap, skill.name, skill.description, f"{url}#:{rel}"))
            return entries

    def _write(self, taps: dict[str, str]) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(taps, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(temporary, self.path)


def _is_http_index(url: str) -> bool:
    return url.startswith(("http://", "https://")) and urllib.parse.urlsplit(url).path.endswith(".json")


def _read_index(tap: str, url: str, limits: Limits) -> dict[str, object]:
    try:
        with opener(limits.public_only).open(url, timeout=HTTP_TIMEOUT) as response:
            data = json.loads(response.read(limits.max_bytes))
    except (OSError, ValueError) as exc:
        raise TapError(f"tap {tap}: the index {url} could not be read: {exc}") from None
    if not isinstance(data, dict):
        raise TapError(f"tap {tap}: {url} is not an index (a JSON object)")
    return data


def _http_index(tap: str, url: str, limits: Limits) -> list[TapSkill]:
    skills = _read_index(tap, url, limits).get("skills")
    if not isinstance(skills, list):
        raise TapError(f'tap {tap}: {url} is not a skills index ({{"skills": [...]}})')
    entries = []
    for item in skills:
        if isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("name", "source")):
            source = urllib.parse.urljoin(url, item["source"])
            entries.append(TapSkill(tap, item["name"], str(item.get("description", "")), source))
    return entries
