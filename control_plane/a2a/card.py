"""The agent card a profile publishes over A2A: who it is, where its JSON-RPC endpoint is, how a caller
signs in (the API's bearer token) and what it can do: the library's skills and the toolsets it may use."""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from .. import __version__
from ..agent.agent import Agent

RPC_PATH = "/a2a"
"""Where the JSON-RPC endpoint is mounted (the card gives its absolute URL)."""
SCHEME = "bearer"
"""The card's name for the API's bearer token scheme."""
TEXT = "text/plain"


def agent_card(agent: Agent, base_url: str, *, library: bool) -> AgentCard:
    """The card of `agent`'s profile as served at `base_url` (scheme, host and port, no trailing /);
    `library`: with the library's skills (for a caller with the profile's token: they are its own)."""
    card = base_card(base_url)
    card.name = f"Hermetic ({agent.settings.profile})"
    card.skills.extend(skills(agent, library=library))
    return card


def base_card(base_url: str) -> AgentCard:
    """What every profile's card says (the request handler checks its capabilities against it)."""
    return AgentCard(
        name="Hermetic",
        description=(
            "A self-improving agent whose tools run in a sealed sandbox; it keeps a memory, a session "
            "history and a library of skills it writes for itself."
        ),
        version=__version__,
        supported_interfaces=[
            AgentInterface(
                url=base_url + RPC_PATH,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="An API token of the profile: hermetic token create --profile NAME",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=[TEXT],
        default_output_modes=[TEXT],
        skills=[
            AgentSkill(
                id="task",
                name="task",
                description="Any task put in words: it plans, runs tools in its sandbox and answers.",
                tags=["general"],
            )
        ],
    )


def skills(agent: Agent, *, library: bool) -> list[AgentSkill]:
    """The library's skills (when `library`), then one entry per toolset of the profile's runs (its
    tools, in a line each)."""
    found = [
        AgentSkill(id=f"skill:{info.name}", name=info.name, description=info.description, tags=["skill"])
        for info in (agent.skills.list_skills() if library else [])
    ]
    toolsets: dict[str, list[str]] = {}
    for tool in agent.tools.values():
        toolsets.setdefault(tool.toolset, []).append(f"{tool.name}: {_first_sentence(tool.description)}")
    found += [
        AgentSkill(id=f"toolset:{name}", name=name, description="; ".join(tools), tags=["toolset"])
        for name, tools in sorted(toolsets.items())
    ]
    return found


def _first_sentence(text: str) -> str:
    first = text.strip().split("\n", 1)[0]
    return first.split(". ", 1)[0].rstrip(".")
