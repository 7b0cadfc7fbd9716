"""Settings: HERMETIC_* environment variables over the profile's config.yaml over defaults.

A profile is a separate home (config, database, memory, skills): `default` lives in HERMETIC_ROOT
(~/.hermetic), any other NAME in HERMETIC_ROOT/profiles/NAME. What a profile creates stays under the root.
"""

from __future__ import annotations

import os
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from backends import DockerConfig, ModalConfig, NetworkConfig, SandboxSpec, SSHConfig

from ..web.settings import WebSettings
from .chat import GatewaySettings
from .env_lists import comma_list
from .keys import load_env_file
from .memory import Mem0ProviderSettings, MemorySettings
from .remote import RemoteAgentsSettings
from .surfaces import MCP_NAME, APISettings, MCPServerConfig, MCPSettings, OpenAISettings

DEFAULT_PROFILE = "default"
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_yaml_file: ContextVar[Path | None] = ContextVar("_yaml_file", default=None)
ModelClient = Literal["auto", "litellm"]


class ModelEndpoint(BaseModel):
    """One model as litellm names it, and where to reach it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """litellm model id: "anthropic/claude-sonnet-4-5", "openai/gpt-4.1", "ollama_chat/qwen3", ..."""
    api_base: str | None = None
    """Server URL for self-hosted or OpenAI-compatible models (Ollama, vLLM, the scripted server)."""
    api_key: SecretStr | None = None
    """Key for this model; default: the provider's usual variable (ANTHROPIC_API_KEY, ...)."""
    client: ModelClient = "auto"
    """How calls are sent: "auto" sends those to an OpenAI-compatible server (`openai/NAME` with an
    api_base) with the openai SDK and every other through litellm; "litellm" sends all through litellm."""


class ModelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    """The primary model (litellm id); none means the agent cannot run until one is set."""
    api_base: str | None = None
    api_key: SecretStr | None = None
    client: ModelClient = "auto"
    """As a fallback's `client`, for the primary."""
    fallbacks: Annotated[list[ModelEndpoint], NoDecode] = []
    """Tried in order when the primary fails after its retries (a plain string is a model name)."""
    timeout: float = Field(120.0, gt=0)
    """Seconds for one model call."""
    vision: bool | None = None
    """The primary model accepts images (vision_analyze); None: as litellm's model table says."""
    retries: int = Field(3, ge=0)
    """Retries per model on rate limits, timeouts and 5xx, with exponential backoff and jitter."""
    backoff: float = Field(1.0, gt=0)
    """First retry delay in seconds; doubles each time, capped at backoff_max."""
    backoff_max: float = Field(30.0, gt=0)
    temperature: float | None = None
    max_tokens: int | None = None
    """Most tokens one reply may have; default: the provider's."""

    @field_validator("fallbacks", mode="before")
    @classmethod
    def _names_are_endpoints(cls, value: Any) -> Any:
        value = comma_list(value)
        return [{"name": item} if isinstance(item, str) else item for item in value or []]

    @property
    def primary(self) -> ModelEndpoint | None:
        if not self.name:
            return None
        return ModelEndpoint(name=self.name, api_base=self.api_base, api_key=self.api_key, client=self.client)

    @property
    def chain(self) -> list[ModelEndpoint]:
        """The primary, then the fallbacks, in the order they are tried."""
        return ([self.primary] if self.primary else []) + self.fallbacks


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_iterations: int = Field(90, ge=1)
    """Model calls one user message may cause before the run stops and says so."""
    max_tool_calls: int = Field(1000, ge=1)
    """Tool calls one user message may cause, the model's own and those of its execute_code scripts;
    past it a call is refused with a readable error (a script gets BudgetSpent)."""
    tool_timeout: float = Field(120.0, gt=0)
    """Default seconds a terminal command may run (the model may ask for up to max_tool_timeout)."""
    max_tool_timeout: float = Field(1800.0, gt=0)
    tool_output: int = Field(20_000, ge=500)
    """Characters of one tool result the model sees (head and tail kept, the middle cut)."""
    parallel_tools: int = Field(8, ge=1)
    """Parallel-safe tool calls run at once."""
    max_running_sessions: int = Field(4, ge=1)
    """Sessions of one profile running a turn at once in the API server; one more is refused (429)."""
    max_sandboxes: int = Field(8, ge=1)
    """Live sandboxes one profile's sessions may hold; a run that would need one more is refused (429)."""
    max_live_sessions: int = Field(256, ge=1)
    """Sessions one profile keeps in the API server's memory; beyond it the least recently used idle ones
    are let go (their history stays in the database and the next request resumes them)."""


class LearningSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Review finished turns in the background and let the reviewer save memories."""
    nudge_every: int = Field(10, ge=0)
    """Review after this many user turns without a memory write (0: never for this reason)."""
    busy_tools: int = Field(5, ge=1)
    """Review after a turn that took at least this many tool calls."""


class CompressionSettings(BaseModel):
    """When and how a long conversation's middle is condensed (control_plane/compression.py)."""

    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(0.75, gt=0, le=1)
    """Share of the model's context window at which the history is compressed before a model call."""
    keep_first: int = Field(1, ge=0)
    """Exchanges kept at the start (a user message and the assistant step answering it)."""
    tail_share: float = Field(0.2, gt=0, lt=1)
    """Share of the window kept verbatim at the end (the latest step is kept whatever its size)."""
    context_window: int | None = Field(None, ge=1000)
    """Tokens the model takes in; default: litellm's model info for the model, else 32,000."""
    summary_model: ModelEndpoint | None = None
    """Model that writes the summary (a plain string is a model name); default: the session's chain."""
    summary_timeout: float = Field(60.0, gt=0)
    """Seconds the summary call may take, retries included, before the fallback summary is used."""
    summary_max_tokens: int = Field(2000, ge=100)
    """Most tokens the summary may have (at most a quarter of the window)."""

    @field_validator("summary_model", mode="before")
    @classmethod
    def _name_is_endpoint(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


class SkillsSettings(BaseModel):
    """The skill library (control_plane/skills) and the gate's policy for the skills the agent writes."""

    model_config = ConfigDict(extra="forbid")

    allow_unverified: bool = False
    """A skill without checks (scripts/verify.sh or tests/) may merge, marked unverified everywhere."""
    allow_network: bool = False
    """A skill's metadata may request network hosts for its checks at all."""
    allowed_hosts: Annotated[list[str], NoDecode] = []
    """Hosts accepted in such a request."""
    timeout: float = Field(120.0, gt=0)
    """Seconds a skill's checks may run."""
    image: str = "hermetic-sandbox:slim"
    """The image the checks run in (the gate records its id with each verdict)."""
    warm_sandboxes: int = Field(1, ge=0)
    """Throwaway sandboxes the gate keeps opened ahead, per spec (image, network, limits), once it has
    verified a skill: the next verification takes one instead of creating it (each still checks one
    skill and is closed). 0: every verification creates its own."""
    warm_seconds: float = Field(120.0, gt=0)
    """How long after a verification the gate keeps its sandboxes warm; a warm one is replaced after a
    tenth of its ttl (20 s at the default timeout), so each verification costs a few more creates."""
    stale_days: float = Field(30.0, gt=0)
    """A skill unused this long is marked stale (pinned skills never are)."""
    archive_days: float = Field(90.0, gt=0)
    """A skill unused this long is archived: out of the listing, kept on disk, restorable."""
    prompt_tokens: int = Field(1500, ge=100)
    """Budget of the skills listing in the system prompt; over it, the most relevant skills are listed."""
    list_max: int = Field(30, ge=1)
    """With more skills than this, none is listed in the system prompt: each user message comes with the
    `list_relevant` skills most relevant to it (hybrid search), and skills_search finds the others."""
    list_relevant: int = Field(8, ge=1, le=50)
    review_below: float = Field(0.5, ge=0, le=1)
    """A skill whose smoothed success rate falls below this (after min_runs runs) is reviewed for repair."""
    min_runs: int = Field(5, ge=1)
    """Runs before a skill's success rate alone gets it reviewed (and between two such reviews)."""
    retire_after: int = Field(10, ge=1)
    """Failed runs in a row after which a skill is marked failing and left out of the prompt listing."""
    duplicate_threshold: float = Field(0.6, gt=0, le=1)
    """Similarity (Jaccard of word 3-shingles over name, description and body) from which curation
    calls two skills near-duplicates and offers them to the reviewer for a merge, when semantic recall
    is off (`memory.embeddings.model: off`) or a skill has no vector yet."""
    duplicate_vector_threshold: float = Field(0.6, gt=0, le=1)
    """Cosine similarity of the skills' vectors (the embedding model's, over name, description and body)
    from which curation calls two skills near-duplicates when semantic recall is on. 0.6 is measured for
    wordllama on bench/duplicate_corpus.py (docs/skills.md); tune it for another model."""

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        return comma_list(value)


class PoolSettings(BaseModel):
    """The warm pool (backends/pool.py): opened sandboxes waiting for new sessions."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(0, ge=0)
    """Warm sandboxes kept ready for new sessions (0: off, each session creates its own)."""
    idle_seconds: float = Field(600.0, gt=0)
    """A warm sandbox unused this long is closed; the pool refills only while sessions keep coming."""
    warm_browser: bool = True
    """With the browser toolset on, each warm sandbox also has its browser up (Playwright's driver,
    Chromium, a blank page), so a session's first browser call navigates at once. It costs each warm
    sandbox about 260 MiB and 135 pids of its own limits (`sandbox.memory`, `sandbox.pids`) while it
    waits, so `size` bounds the total; such a sandbox is replaced after 270 s (the runtime closes a
    browser unused for 300 s). Off: the browser starts on a session's first browser call (1-2 s)."""


class SkillInstallSettings(BaseModel):
    """Fetching skills from outside (control_plane/skills/sources.py): the limits on what a source holds."""

    model_config = ConfigDict(extra="forbid")

    max_bytes: int = Field(50 * 1024 * 1024, gt=0)
    """Bytes a download, an archive's contents or a fetched tree may hold."""
    max_files: int = Field(5_000, gt=0)
    """Entries an archive or a fetched tree may hold."""
    local_sources_over_api: bool = False
    """Let the HTTP API install from (and tap) this server's own paths, file:// and ssh repositories.
    Off, an API caller may name only http(s) and git:// URLs and TAP/NAME of a configured tap: a token
    must not read the server's disk or sign in elsewhere with its SSH keys."""
    allow_private_urls: bool = False
    """Let the HTTP API fetch (install, update, taps) from loopback, private, link-local and metadata
    addresses, the ranges the egress policy refuses. Off, each connection it makes is checked on the
    address it connects to, redirects included: a token must not make the server probe its own network.
    The CLI, run by the operator on the server, is not limited by it."""


class AgentSettings(BaseModel):
    """Delegation to child agents, the plan and questions to the user (agent/delegation.py)."""

    model_config = ConfigDict(extra="forbid")

    max_children: int = Field(4, ge=1, le=16)
    """Most tasks one delegate call may run (in parallel)."""
    max_depth: int = Field(2, ge=1, le=5)
    """Levels of agents, the user's own included: 2 lets it delegate and its children not."""
    child_iterations: int = Field(50, ge=1)
    """A child's model calls unless the call asks fewer; never more than its parent has left."""
    child_timeout: float = Field(900.0, gt=0)
    """Seconds a child may run before it is interrupted and reported failed."""
    question_timeout: float = Field(300.0, gt=0)
    """Seconds a question to the user (clarify) waits for an answer before it counts as none."""


class SandboxSettings(SandboxSpec):
    """The default sandbox spec (what every session's sandbox is made from), and how long it is kept."""

    idle_seconds: float | None = Field(900.0, gt=0)
    """A session's sandbox unused this long is closed; its next use starts a fresh one and says so.
    None: kept until the session ends."""
    root: Path | None = None
    """Where the local backend creates sandboxes' workspaces; default: ROOT/sandboxes."""

    @property
    def spec(self) -> SandboxSpec:
        """The spec alone, as backends take it."""
        return SandboxSpec.model_validate(self.model_dump(exclude={"idle_seconds", "root"}))


class SchedulerSettings(BaseModel):
    """The scheduler (control_plane/scheduler): jobs in the profile's database, each run a session."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Run due jobs inside `hermetic serve` (and the gateway)."""
    timezone: str = "UTC"
    """The profile's IANA time zone for cron expressions and ISO times without an offset."""
    lease_seconds: float = Field(60.0, gt=0)
    """How long a claimed run is this process's without renewal (renewed every third of it)."""
    poll_seconds: float = Field(10.0, gt=0)
    """Longest wait between looks at the database, for jobs other processes added or changed."""
    run_timeout: float = Field(1800.0, gt=0)
    """Seconds one run may take before it is interrupted and counted as failed."""
    max_concurrent: int = Field(4, ge=1)
    """Runs of this profile at once."""
    webhook_secret: SecretStr | None = None
    """Key signing webhook deliveries; default: a random one kept in scheduler/webhook.key in the home."""
    tool_webhooks: Annotated[list[str], NoDecode] = []
    """URL prefixes the agent's schedule tool may deliver to (operators' CLI and API may use any URL)."""

    @field_validator("tool_webhooks", mode="before")
    @classmethod
    def _prefixes(cls, value: Any) -> Any:
        return comma_list(value)


class SnapshotSettings(BaseModel):
    """Snapshots and the agent's checkpoints (backends/snapshots.py, control_plane/checkpoints.py)."""

    model_config = ConfigDict(extra="forbid")

    keep: int | None = Field(20, ge=1)
    """Most snapshots kept per owner (a session's checkpoints count as one owner); older ones go first."""
    max_age_days: float | None = Field(30.0, gt=0)
    """Snapshots older than this are deleted."""
    reap: bool = True
    """Apply keep and max_age_days after each snapshot and when the reaper runs; false keeps them all."""
    checkpoints: bool = True
    """Checkpoint a session's sandbox before a tool call that writes (at most once per turn)."""
    checkpoint_terminal: bool = True
    """Count terminal commands as writing (they may change anything); false checkpoints only file tools."""

    @property
    def max_age(self) -> float | None:
        return self.max_age_days * 86400 if self.max_age_days is not None else None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HERMETIC_", env_nested_delimiter="__", extra="ignore")

    root: Path = Path.home() / ".hermetic"
    """HERMETIC_ROOT: where every profile lives."""
    profile: str = DEFAULT_PROFILE
    """HERMETIC_PROFILE: which profile's home, database, memory and skills to use."""
    database_url: str | None = None
    """SQLAlchemy URL; default: SQLite in the profile home. postgresql+psycopg://... works too."""
    model: ModelSettings = ModelSettings()
    """HERMETIC_MODEL__NAME=..., HERMETIC_MODEL__API_BASE=..., HERMETIC_MODEL__FALLBACKS=a,b"""
    backend: Literal["local", "docker", "ssh", "modal"] | None = None
    """Sandbox backend; default: docker when dockerd answers, else local."""
    docker: DockerConfig | None = None
    """Settings of the docker backend (HERMETIC_DOCKER__NET_VOLUME=hermetic-net under compose, ...)."""
    ssh: SSHConfig | None = None
    """Settings of the ssh backend (HERMETIC_SSH__HOST=..., HERMETIC_SSH__USER=..., ...)."""
    modal: ModalConfig | None = None
    """Settings of the modal backend (HERMETIC_MODAL__APP_NAME=..., ...)."""
    sandbox: SandboxSettings = SandboxSettings()
    """The default sandbox spec (HERMETIC_SANDBOX__MEMORY=2g, ...), HERMETIC_SANDBOX__IDLE_SECONDS=900"""
    keep_sandbox: bool = False
    """Leave a session's sandbox running when the session's process ends (its ttl still applies)."""
    pool: PoolSettings = PoolSettings()
    """HERMETIC_POOL__SIZE=1 keeps a warm sandbox for the next session; HERMETIC_POOL__IDLE_SECONDS=600"""
    toolsets: Annotated[list[str], NoDecode] = [
        "terminal", "files", "code", "memory", "recall", "skills", "delegate", "todo", "clarify"
    ]  # fmt: skip
    """Which tool groups the model sees (`hermetic run --help` lists every one the tool registry has); web
    and vision are off by default: queries, pages and images cross the seal."""
    limits: Limits = Limits()
    learning: LearningSettings = LearningSettings()
    memory: MemorySettings = MemorySettings()
    """HERMETIC_MEMORY__MEMORY_CHARS=..., HERMETIC_MEMORY__USER_CHARS=..., HERMETIC_MEMORY__WARN_AT=0.8"""
    compression: CompressionSettings = CompressionSettings()
    """HERMETIC_COMPRESSION__THRESHOLD=0.8, HERMETIC_COMPRESSION__CONTEXT_WINDOW=32000, ..."""
    skills: SkillsSettings = SkillsSettings()
    """HERMETIC_SKILLS__ALLOW_UNVERIFIED=true, HERMETIC_SKILLS__STALE_DAYS=30, ..."""
    api: APISettings = APISettings()
    gateway: GatewaySettings = GatewaySettings()
    """The chat platforms the gateway serves (config.yaml `gateway:`; secrets as `${ENV_VAR}`)."""
    network: NetworkConfig = NetworkConfig()  # HERMETIC_NETWORK__CONNECT_TIMEOUT=10, ...
    skill_install: SkillInstallSettings = SkillInstallSettings()
    """HERMETIC_SKILL_INSTALL__MAX_BYTES=..., HERMETIC_SKILL_INSTALL__MAX_FILES=..."""
    web: WebSettings = WebSettings()
    """The web toolset: HERMETIC_WEB__SEARCH__PROVIDER=brave, HERMETIC_WEB__SEARCH__BRAVE_API_KEY=..."""
    agent: AgentSettings = AgentSettings()
    """HERMETIC_AGENT__MAX_CHILDREN=4, HERMETIC_AGENT__MAX_DEPTH=2, HERMETIC_AGENT__CHILD_ITERATIONS=50"""
    openai: OpenAISettings = OpenAISettings()
    """HERMETIC_OPENAI__MODEL_ID=hermetic, HERMETIC_OPENAI__ALLOWED_ORIGINS=http://localhost:3000"""
    mcp: MCPSettings = MCPSettings()
    """HERMETIC_MCP__IDLE_SECONDS=900, HERMETIC_MCP__PORT=8766"""
    mcp_servers: dict[str, MCPServerConfig] = {}
    """The MCP servers whose tools the agent gets (`hermetic mcp add|remove|list|test`)."""
    remote_agents: RemoteAgentsSettings = RemoteAgentsSettings()
    """The A2A agents the delegate_remote tool (toolset `remote`, off by default) may call, by exact URL."""

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_names(cls, value: dict[str, MCPServerConfig]) -> dict[str, MCPServerConfig]:
        for name in value:
            if not MCP_NAME.match(name):
                raise ValueError(f"MCP server name {name!r}: 1-32 characters of a-z, 0-9, '-' and '_'")
        return value

    scheduler: SchedulerSettings = SchedulerSettings()
    """HERMETIC_SCHEDULER__TIMEZONE=Europe/Paris, HERMETIC_SCHEDULER__ENABLED=false, ..."""
    snapshots: SnapshotSettings = SnapshotSettings()
    """HERMETIC_SNAPSHOTS__KEEP=20, HERMETIC_SNAPSHOTS__MAX_AGE_DAYS=30, HERMETIC_SNAPSHOTS__REAP=false"""

    @field_validator("profile")
    @classmethod
    def _valid_profile(cls, value: str) -> str:
        if not PROFILE_NAME.match(value):
            raise ValueError("a profile name is 1-64 characters of a-z, 0-9, '-' and '_'")
        return value

    @field_validator("toolsets", mode="before")
    @classmethod
    def _toolsets(cls, value: Any) -> Any:
        return comma_list(value)

    @model_validator(mode="after")
    def _mem0_has_models(self) -> Settings:
        """A mem0 provider needs models it can call: a profile that leaves it none fails to load, saying
        what to set."""
        for provider in self.memory.providers:
            if isinstance(provider, Mem0ProviderSettings):
                provider.endpoints(
                    self.model.name, self.model.api_base, self.model.api_key, self.memory.embeddings
                )
        return self

    @model_validator(mode="after")
    def _default_database(self) -> Settings:
        if self.database_url is None:
            self.database_url = f"sqlite:///{self.home / 'hermetic.db'}"
        return self

    @property
    def home(self) -> Path:
        """This profile's home: config.yaml, hermetic.db, memory and skills."""
        return self.root if self.profile == DEFAULT_PROFILE else self.root / "profiles" / self.profile

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings)
        yaml_file = _yaml_file.get()
        if yaml_file is not None and yaml_file.is_file():
            sources += (YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file),)
        return sources


def profile_home(root: Path, profile: str) -> Path:
    return root if profile == DEFAULT_PROFILE else root / "profiles" / profile


def load_settings(profile: str | None = None, **overrides: Any) -> Settings:
    """Settings for `profile` (else HERMETIC_PROFILE, else default), reading its config.yaml.

    `overrides` win over everything (the CLI's options). The home is created, private to the user.
    The profile's .env is read into the environment first (a variable already set wins). Raises
    KeyFileError when that file is readable by others.
    """
    root = Path(overrides.get("root") or os.environ.get("HERMETIC_ROOT") or Path.home() / ".hermetic")
    name = profile or os.environ.get("HERMETIC_PROFILE") or DEFAULT_PROFILE
    Settings._valid_profile(name)
    load_env_file(profile_home(root, name))  # the profile's keys, beneath the environment
    if profile:
        overrides["profile"] = profile
    token = _yaml_file.set(profile_home(root, name) / "config.yaml")
    try:
        settings = Settings(**overrides)
    finally:
        _yaml_file.reset(token)
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return settings
