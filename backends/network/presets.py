"""Named allowlists users expect (`@python` in `sandbox.allow`), expanded before a policy is parsed."""

from __future__ import annotations

PRESETS: dict[str, tuple[str, ...]] = {
    "python": ("pypi.org", "files.pythonhosted.org"),
    "node": ("registry.npmjs.org",),
    "github": ("github.com", "*.github.com", "*.githubusercontent.com"),
    "debian": ("deb.debian.org", "security.debian.org"),
}
"""What each preset allows: the package index and its files host, the registry, the forge and its
content hosts, the archive. Ports 80 and 443, like any host rule."""


class UnknownPreset(ValueError):
    """`@name` names no preset."""


def expand(rules: list[str]) -> list[str]:
    """`rules` with each `@name` replaced by that preset's hosts, in order. Raises UnknownPreset."""
    out: list[str] = []
    for rule in rules:
        name = rule.strip()
        if not name.startswith("@"):
            out.append(rule)
        elif name[1:] in PRESETS:
            out.extend(PRESETS[name[1:]])
        else:
            raise UnknownPreset(f"allow rule {rule!r}: no such preset; presets: {', '.join(sorted(PRESETS))}")
    return out
