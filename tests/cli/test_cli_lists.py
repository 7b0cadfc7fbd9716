"""What a user trips on in the CLI's lists and help: `skills list` at 80 columns and for a skill never
run, `--json` on every list command, help that names what the code has (platforms, backends, toolsets)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import get_backend
from fastapi.testclient import TestClient
from hermetic_cli import hermetic, scripted_env
from typer.testing import CliRunner

from backends import BACKEND_NAMES
from control_plane.api.app import create_app
from control_plane.cli.main import app as cli_app
from control_plane.config.chat import PLATFORMS
from control_plane.config.settings import SkillsSettings, load_settings
from control_plane.gateway.platforms import ADAPTERS
from control_plane.models.fake_llm import FakeLLM
from control_plane.skills.install import Installer
from control_plane.skills.library import SkillLibrary
from control_plane.skills.listing import SkillInfo
from control_plane.skills.sources import Limits
from control_plane.store.tokens import TokenStore
from control_plane.tools import TOOLS

CORPUS = Path(__file__).resolve().parents[1] / "support" / "skill_corpus"
SKILLS = ["maps-geocoding", "rest-api-recipes", "uv-python-setup"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A home with installed skills, a tap, a session, a cron job, a snapshot, a token and an MCP server."""
    get_backend("local")
    with FakeLLM() as fake_llm:
        env = scripted_env(tmp_path_factory.mktemp("lists"), fake_llm.url, HERMETIC_LEARNING__ENABLED="false")
        yield _fill(env, fake_llm)


def _fill(env: dict[str, str], fake_llm: FakeLLM) -> dict[str, str]:
    root = Path(env["HERMETIC_ROOT"])
    installer = Installer(
        SkillLibrary(root / "skills", SkillsSettings(), backend=lambda: get_backend("local")), Limits()
    )
    for kind, name in [("pass", SKILLS[0]), ("pass", SKILLS[1]), ("review", SKILLS[2])]:
        installer.commit(installer.plan_install(str(CORPUS / kind / name), accept=("all",)))
    installer.taps.add("team", str(CORPUS / "pass"))
    installer.library.close()
    TokenStore(root).create("default", "ci")
    fake_llm.load([{"text": "hello"}])
    for args in [("run", "say hello"), ("sandbox", "shell", "--backend", "local", "--snapshot", "built")]:
        done = hermetic(*args, env=env, stdin="echo hi\n")  # each starts a sandbox: as a user runs them
        assert done.returncode == 0, (args, done.stderr)
    in_process("cron", "add", "every 2h", "check the build", "--deliver", "file:build.md", env=env)
    in_process(
        "mcp",
        "add",
        "clock",
        "--command",
        "python3",
        "--arg=-m",
        "--arg",
        "mcp_server_time",
        "--env",
        "K=v",
        env=env,
    )
    return env


def in_process(*args: str, env: dict[str, str]) -> str:
    """The CLI in this process (the settings come from `env`): output that no terminal width shapes."""
    done = CliRunner().invoke(cli_app, list(args), env=env)
    assert done.exit_code == 0, (args, done.output)
    return done.output


def test_skills_list_at_80_columns_cuts_no_cell(home: dict[str, str]) -> None:
    shown = hermetic("skills", "list", env={**home, "COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in shown.stdout
    header = lines[0].split()
    assert header == ["name", "ver", "status", "state", "runs", "ok", "description"]
    for name in SKILLS:  # each row: the whole name, version, status, state and runs on one line
        [row] = [line for line in lines if line.startswith(name + " ")]
        assert re.match(rf"{name}\s+1\s+unverified\s+active\s+never run\s+\S", row), row
    assert "0/0" not in shown.stdout and "50%" not in shown.stdout
    words = " ".join(shown.stdout.split())
    assert "Geocode addresses and compute routes with the Google Maps Platform web services." in words


def test_a_skill_never_run_has_no_success_rate_in_json(home: dict[str, str]) -> None:
    listed = json.loads(in_process("skills", "list", "--json", env=home))
    assert [s["name"] for s in listed] == SKILLS
    assert all(s["runs"] == 0 and s["success_rate"] is None for s in listed)


def test_a_skill_never_run_has_no_success_rate_over_the_api(tmp_path: Path) -> None:
    root = tmp_path / "home"
    installer = Installer(
        SkillLibrary(root / "skills", SkillsSettings(), backend=lambda: get_backend("local")), Limits()
    )
    installer.commit(installer.plan_install(str(CORPUS / "pass" / SKILLS[0])))
    installer.library.close()
    token = TokenStore(root).create("default")
    app = create_app(root, lambda profile: load_settings(profile, root=root, backend="local"))
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        listed = client.get("/skills").json()
        assert [(s["name"], s["runs"], s["success_rate"]) for s in listed] == [(SKILLS[0], 0, None)]
        assert client.get(f"/skills/{SKILLS[0]}").json()["success_rate"] is None
    ran = SkillInfo("s", "d", 1, "pass", "active", False, uses=4, successes=3, failures=1, last_used=0)
    assert ran.observed_rate == 0.75 and ran.success_rate < 0.75  # reported as run; smoothed to rank


LISTS: dict[tuple[str, ...], set[str]] = {
    ("skills", "list"): {
        "name",
        "description",
        "version",
        "status",
        "state",
        "runs",
        "success_rate",
        "provenance",
    },
    ("sessions", "list"): {"id", "title", "created_at", "updated_at", "message_count", "cost"},
    ("cron", "list"): {"id", "name", "schedule", "state", "next_run_at", "paused"},
    ("snapshot", "list"): {"id", "label", "backend", "bytes", "created"},
    ("token", "list"): {"id", "profile", "created", "name"},
    ("model", "list"): {"name", "api_base", "role"},
    ("skills", "tap", "list"): {"name", "url"},
    ("mcp", "list"): {"name", "runs", "command", "args", "url", "include", "exclude", "env"},
}


@pytest.mark.parametrize("command", LISTS, ids=" ".join)
def test_every_list_command_prints_a_json_array_with_its_fields(
    home: dict[str, str], command: tuple[str, ...]
) -> None:
    output = in_process(*command, "--json", env=home)
    rows = json.loads(output)
    assert isinstance(rows, list) and rows, output
    assert all(isinstance(row, dict) and LISTS[command] <= set(row) for row in rows), rows


def test_json_lists_hold_no_secret(home: dict[str, str]) -> None:
    [server] = json.loads(in_process("mcp", "list", "--json", env=home))
    assert server["env"] == ["K"] and "v" not in json.dumps(server["env"])
    [token] = json.loads(in_process("token", "list", "--json", env=home))
    assert set(token) == {"id", "profile", "created", "name"} and token["name"] == "ci"


def help_text(*command: str) -> str:
    done = CliRunner().invoke(cli_app, [*command, "--help"], terminal_width=300)
    assert done.exit_code == 0, done.output
    return " ".join(done.output.replace("│", " ").split())


def test_help_names_every_platform_backend_and_toolset_the_code_has() -> None:
    assert "signed webhook" not in (gateway := help_text("gateway"))
    expected = (
        "telegram", "slack", "discord", "irc", "xmpp", "email", "mattermost", "matrix", "whatsapp", "wecom",
        "wecom_bot", "dingtalk", "feishu", "teams", "webhook",
    )  # fmt: skip
    assert expected == PLATFORMS == tuple(ADAPTERS)  # each platform configurable has its adapter
    assert f"one agent reached from {', '.join(PLATFORMS)}" in gateway
    backends = f"{', '.join(BACKEND_NAMES[:-1])} or {BACKEND_NAMES[-1]}"
    assert "modal" in backends
    for command in (("sandbox", "exec"), ("sandbox", "shell"), ("run",), ("chat",)):
        assert backends in help_text(*command), command
    toolsets = ", ".join(sorted(TOOLS.toolsets))
    assert {"browser", "memory", "skills", "delegate", "todo", "clarify", "network"} <= TOOLS.toolsets
    for command in (("run",), ("chat",)):
        assert f"Comma-separated, of: {toolsets}" in help_text(*command)
