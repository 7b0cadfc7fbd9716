"""Skills found by relevance: over `skills.list_max` skills the system prompt lists none and each user
message comes with the few most relevant (hybrid: BM25 and WordLlama vectors), stable through the turn;
the skills_search tool finds the rest; a small library is listed whole as before. 500 skills, the scripted
model."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from control_plane.agent.agent import Agent
from control_plane.config.settings import SkillsSettings, load_settings
from control_plane.recall.embeddings import WordLlamaEmbedder
from control_plane.skills.library import SkillLibrary
from control_plane.skills.model import GatePolicy, Verdict
from control_plane.tools import TOOLS, ToolContext, invoke

FILLER = ["garden", "cook", "paint", "knit", "bake", "sew", "fish", "hike", "sing", "dance", "brew", "carve"]
TARGETS = {
    "renew-tls-certificate": "Renew the HTTPS certificate with certbot before it expires and reload nginx.",
    "postgres-backup": "Back up a PostgreSQL database with pg_dump to a compressed archive.",
    "rotate-logs": "Rotate and compress application log files with logrotate.",
}


def passes(candidate: Path, policy: GatePolicy, backend: object, pool: object) -> Verdict:
    return Verdict(candidate.name, "pass")


def fill(home: Path, fillers: int) -> SkillLibrary:
    rng = random.Random(3)
    library = SkillLibrary(home / "skills", SkillsSettings(), backend=lambda: None, verify=passes)  # type: ignore[arg-type, return-value]
    skills = {f"{rng.choice(FILLER)}-{rng.choice(FILLER)}-{i}": "" for i in range(fillers)}
    skills = {name: f"How to {' '.join(rng.sample(FILLER, 4))} at home." for name in skills} | TARGETS
    for name, description in skills.items():
        body = f"1. {description}\n2. {' '.join(rng.sample(FILLER, 6))}\n"
        library.write(
            name, "SKILL.md", f"---\nname: {name}\ndescription: {description}\n---\n{body}", new=True
        )
        library.submit(name, proposer="test")
    return library


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("big")
    fill(home, 500 - len(TARGETS))
    return home


def test_over_list_max_the_prompt_lists_none_and_each_message_the_right_few(big: Path, fake_llm: Any) -> None:
    model = {"name": "openai/scripted", "api_base": fake_llm.url, "api_key": "test-key", "retries": 0}
    settings = load_settings(root=big, model=model, backend="local", toolsets=["skills"])
    agent = Agent(settings)
    try:
        assert len(agent.skills.list_skills()) == 500
        prompt = agent.system_prompt()
        assert "The library holds 500 skills" in prompt and "renew-tls-certificate" not in prompt
        # two model calls in one turn (a tool call, then the answer) send the same user message
        search = {"name": "skills_search", "arguments": {"query": "compress the logs of the app"}}
        fake_llm.load([{"tool_calls": [search]}, {"text": "Use renew-tls-certificate."}])
        conversation = agent.new_conversation()
        asyncio.run(conversation.run("my website's SSL cert is about to lapse, what now?", lambda e: None))
        requests = list(fake_llm.requests)
        fake_llm.load([{"text": "Use postgres-backup."}])
        asyncio.run(conversation.run("save a copy of the postgresql data", lambda e: None))
        requests += fake_llm.requests
    finally:
        agent.close()
    turn = [_user_messages(r)[-1] for r in requests[:2]]
    assert turn[0] == turn[1] and turn[0].endswith("my website's SSL cert is about to lapse, what now?")
    listed = [line for line in turn[0].splitlines() if line.startswith("- ")]
    assert 1 <= len(listed) <= settings.skills.list_relevant and "- renew-tls-certificate: " in turn[0]
    assert requests[0]["messages"][0]["content"] == requests[2]["messages"][0]["content"]  # the system prompt
    found = [m["content"] for m in requests[1]["messages"] if m["role"] == "tool"][-1]
    assert found.splitlines()[0].startswith("rotate-logs (v1)")
    second = _user_messages(requests[2])[-1]
    listed = [line.split(":")[0] for line in second.splitlines() if line.startswith("- ")]
    assert listed[0] == "- postgres-backup" and set(listed) <= {f"- {name}" for name in TARGETS}
    assert _user_messages(requests[2])[0] == turn[0]  # the earlier turn is replayed as it was sent


def _user_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def test_hybrid_search_finds_by_meaning_what_words_miss(big: Path) -> None:
    library = SkillLibrary(big / "skills", SkillsSettings(), backend=lambda: None, verify=passes)  # type: ignore[arg-type, return-value]
    query = "my website's SSL cert is about to lapse"
    assert "renew-tls-certificate" not in [s.name for s in library.search(query, 8)]  # words alone
    library.embedder = WordLlamaEmbedder()
    assert "renew-tls-certificate" in [s.name for s in library.search(query, 8)]
    ctx = ToolContext(session_id="s", call_id="c", limits=None, get_sandbox=lambda: None, skills=library)  # type: ignore[arg-type]
    result = invoke(TOOLS.get("skills_search"), "skills_search", json.dumps({"query": "pg_dump"}), ctx)
    assert result.ok and result.content.startswith("postgres-backup (v1): Back up a PostgreSQL")


def test_a_small_library_is_listed_whole_in_the_prompt(tmp_path: Path) -> None:
    library = fill(tmp_path, 0)
    library.embedder = WordLlamaEmbedder()
    prompt = library.skills_prompt("")
    assert all(f"- {name}: " in prompt for name in TARGETS)
    assert library.relevant_listing("back up postgres") == ""
