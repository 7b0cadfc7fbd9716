"""A task in the Terminal-Bench 2 / Harbor layout, read as it is: instruction.md, task.toml, environment/,
tests/test.sh, solution/solve.sh. Keys we do not know are kept (extra="allow"), never refused."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backends.spec import parse_size

INSTRUCTION, CONFIG = "instruction.md", "task.toml"
VERIFIER, ORACLE, DOCKERFILE = "tests/test.sh", "solution/solve.sh", "environment/Dockerfile"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Metadata(_Open):
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = []


class VerifierConfig(_Open):
    timeout_sec: float = Field(120.0, gt=0)
    """Seconds tests/test.sh may run."""
    env: dict[str, str] = {}
    """Environment variables the verifier runs with."""


class AgentConfig(_Open):
    timeout_sec: float = Field(600.0, gt=0)
    """Seconds the agent (or the oracle's solve.sh) may work."""


class SolutionConfig(_Open):
    env: dict[str, str] = {}


class EnvironmentConfig(_Open):
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    """A prebuilt image to use instead of environment/Dockerfile (it must be present here: no pulls)."""
    cpus: float = Field(1.0, gt=0)
    memory_mb: int = Field(2048, ge=64)
    storage_mb: int = Field(10240, ge=16)
    allow_internet: bool = False
    allow: list[str] = []
    """Our extension: the hosts an allow_internet task may reach (the sandbox's network allowlist)."""
    workdir: str | None = None
    """Our extension: where the agent starts (default: the image's WORKDIR, else /app)."""


class TaskConfig(_Open):
    """task.toml. Harbor's older spellings (`memory = "4G"`, `storage`) are read as well."""

    version: str = "1.0"
    metadata: Metadata = Metadata()
    verifier: VerifierConfig = VerifierConfig()
    agent: AgentConfig = AgentConfig()
    solution: SolutionConfig = SolutionConfig()
    environment: EnvironmentConfig = EnvironmentConfig()

    @property
    def unknown_keys(self) -> list[str]:
        """Keys kept from the file that this reader does not act on ("environment.gpus"), for the log."""
        found = list(self.model_extra or {})
        for name in ("metadata", "verifier", "agent", "solution", "environment"):
            section: BaseModel = getattr(self, name)
            if name != "metadata":  # metadata is free-form by design
                found += [f"{name}.{key}" for key in section.model_extra or {}]
        return found


class Task(BaseModel):
    """A readable task: its directory, instruction and configuration."""

    id: str
    """The directory's name: unique within a suite."""
    path: Path
    instruction: str
    config: TaskConfig

    @property
    def tags(self) -> list[str]:
        return self.config.metadata.tags

    @property
    def dockerfile(self) -> Path | None:
        found = self.path / DOCKERFILE
        return found if found.is_file() else None

    @property
    def oracle(self) -> Path | None:
        found = self.path / ORACLE
        return found if found.is_file() else None


class TaskError(BaseModel):
    """A task that could not be read: which file, and why. The run goes on with the others."""

    id: str
    path: Path
    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.id}: {self.file}: {self.reason}"


def load_task(path: Path) -> Task | TaskError:
    """Read one task directory; every problem becomes a TaskError naming the file."""
    task_id = path.name

    def error(file: str, reason: str) -> TaskError:
        return TaskError(id=task_id, path=path, file=file, reason=reason)

    instruction_file = path / INSTRUCTION
    if not instruction_file.is_file():
        return error(INSTRUCTION, "missing: a task needs an instruction for the agent")
    try:
        instruction = instruction_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        return error(INSTRUCTION, f"unreadable: {exc}")
    if not instruction:
        return error(INSTRUCTION, "empty: a task needs an instruction for the agent")
    raw: dict[str, Any] = {}
    config_file = path / CONFIG
    if config_file.is_file():
        try:
            raw = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            return error(CONFIG, f"not valid TOML: {exc}")
    try:
        config = TaskConfig.model_validate(_legacy(raw))
    except (ValidationError, ValueError) as exc:
        return error(CONFIG, _first_problem(exc))
    if not (path / VERIFIER).is_file():
        return error(VERIFIER, "missing: a task needs a verifier that writes /logs/verifier/reward.txt")
    return Task(id=task_id, path=path, instruction=instruction, config=config)


def _legacy(raw: dict[str, Any]) -> dict[str, Any]:
    """Harbor's pre-1.3 `memory = "4G"` / `storage = "10G"` as memory_mb / storage_mb."""
    environment = raw.get("environment")
    if isinstance(environment, dict):
        environment = dict(environment)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if old in environment and new not in environment:
                environment[new] = parse_size(str(environment.pop(old))) // 2**20
        raw = {**raw, "environment": environment}
    return raw


def _first_problem(exc: ValidationError | ValueError) -> str:
    if isinstance(exc, ValidationError):
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        return f"{where}: {problem['msg']}"
    return str(exc)
