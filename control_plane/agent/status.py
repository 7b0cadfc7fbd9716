"""The one-line status a surface shows when a session opens: profile, model, backend, memory, skills; and
the profile's limits, which the console's settings page lists."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Status:
    profile: str
    model: str
    backend: str
    memory_percent: dict[str, float | None]
    """Share of each memory file's limit in use (MEMORY.md, USER.md), in percent; None if unreadable."""
    skills: int
    """Skills in the library (not archived)."""
    limits: dict[str, float | int | str | None] = field(default_factory=dict)
    """By setting name: a turn's and the server's (`limits.*`), each sandbox's (`sandbox.*`)."""

    def line(self) -> str:
        memory = ", ".join(
            f"{name} {'?' if pct is None else f'{pct:.0f}'}%" for name, pct in self.memory_percent.items()
        )
        return (
            f"profile {self.profile} · model {self.model} · backend {self.backend} · "
            f"memory {memory} · {self.skills} skill{'s' if self.skills != 1 else ''}"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
