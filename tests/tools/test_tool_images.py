"""Images in tool results, end to end: a figure of the python tool (a real kernel) reaches a vision model
as an image part (the scripted server records the request), downscaled, the newest three kept, while
the sessions database and the run log keep only where it is; Anthropic's form puts it inside the
tool_result; an MCP client (the real SDK) gets a browser screenshot as ImageContent; a /v1 stream
carries it; Telegram (its stand-in) receives it as a file, and a platform without files says where it is."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_runs import call, run, settings_for, tool_messages
from conftest import get_backend
from gateway_harness import OWNER, Running, gateway_settings, wait_answered
from mcp import Client, StdioServerParameters
from PIL import Image
from served_app import scripted_profiles, serve_app
from telegram_standin import TelegramStandin

from control_plane.agent.agent import Agent
from control_plane.agent.tool_images import IMAGES_MARK, show_images
from control_plane.api.app import create_app
from control_plane.config.chat import WebhookSettings
from control_plane.config.settings import ModelSettings
from control_plane.events import ToolEnd, ToolImage
from control_plane.gateway.files import send_images
from control_plane.gateway.webhook import WebhookAdapter
from control_plane.models.fake_llm import FakeLLM
from control_plane.models.router import Router
from control_plane.store.tokens import TokenStore
from control_plane.tools import ToolOutcome
from control_plane.tools.images import MAX_ENCODED, MAX_SIDE, ImageError, bounded, tool_image


def png(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


def figure_cell(width: int, height: int) -> str:
    """A cell that displays a grey PNG of this size, made in the kernel with the standard library (the
    cell stays short however large the image)."""
    return (
        "import struct, zlib\n"
        "from IPython.display import Image, display\n"
        "def chunk(kind, data):\n"
        "    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))\n"
        f"rows = b''.join(b'\\x00' + b'\\x80' * {width} for _ in range({height}))\n"
        f"header = struct.pack('>IIBBBBB', {width}, {height}, 8, 0, 0, 0, 0)\n"
        "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(rows))\n"
        "display(Image(data=png + chunk(b'IEND', b''), format='png'))"
    )


def image_parts(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


def decoded(url: str) -> Image.Image:
    assert url.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def test_a_figure_reaches_a_vision_model_as_an_image_and_the_database_keeps_its_path(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    three = "\n".join([figure_cell(40, 20)] * 3)
    fake_llm.load(
        [
            {"tool_calls": [call("python", code=figure_cell(3000, 1500))]},
            {"tool_calls": [call("python", code=three)]},
            {"text": "done"},
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, "local", model={"vision": True}))
    conversation = agent.new_conversation()
    end, events = run(conversation, "plot it")
    assert end.reason == "done"

    after_first = fake_llm.requests[1]["messages"]
    tool, shown = after_first[-2:]
    assert tool["role"] == "tool" and tool["content"].startswith(
        "[a new kernel was started]\n[figure saved to figures/"
    )
    assert shown["role"] == "user"  # OpenAI's tool messages hold text only: the images follow them
    label, image = shown["content"]
    assert label["text"].startswith(IMAGES_MARK) and "figures/figure-" in label["text"]
    assert "PNG 3000x1500" in label["text"] and "sent as 1568x784" in label["text"]
    assert decoded(image["image_url"]["url"]).size == (MAX_SIDE, 784)
    newest = image_parts(fake_llm.requests[2])
    assert [decoded(part["image_url"]["url"]).size for part in newest] == [(40, 20)] * 3  # the oldest left

    stored = json.dumps([m.to_chat() for m in agent.store.messages(conversation.id)])
    assert (
        "base64" not in stored
        and IMAGES_MARK not in stored
        and stored.count("[figure saved to figures/") == 4
    )
    ends = [event for event in events if isinstance(event, ToolEnd)]
    assert [len(e.images) for e in ends] == [1, 3] and all(i.data for e in ends for i in e.images)
    log = (agent.settings.home / "logs" / "events.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in log if '"type":"tool_end"' in line]
    assert [[set(image) for image in end["images"]] for end in logged] == [
        [{"mime", "label", "to_model"}],
        [{"mime", "label", "to_model"}] * 3,
    ]  # the run log keeps labels, not data

    # /model to a model without vision: the images leave the history; the text says where they are
    fake_llm.load([{"tool_calls": [call("python", code=figure_cell(40, 20))]}, {"text": "done"}])
    conversation.router = Router(agent.settings.model.model_copy(update={"vision": False}))
    end, events = run(conversation, "plot it again")
    assert end.reason == "done" and not image_parts(fake_llm.requests[-1])
    assert "[figure saved to figures/" in tool_messages(fake_llm.requests[-1])[-1]
    assert [len(e.images) for e in events if isinstance(e, ToolEnd)] == [1]  # the surfaces still get it
    conversation.close()


def test_anthropic_models_get_the_image_inside_the_tool_result() -> None:
    from litellm.litellm_core_utils.prompt_templates.factory import anthropic_messages_pt

    image = tool_image(png(64, 32), "figures/a.png")
    outcome = ToolOutcome("[figure saved to figures/a.png]", True, None, 1.0, images=(image,))
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "plot"},
        {"role": "assistant", "content": None, "tool_calls": [_wire_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "name": "python", "content": outcome.content},
    ]
    show_images(history, {"c1": outcome}, ModelSettings(name="anthropic/claude-sonnet-4-5", vision=True))
    assert len(history) == 4  # no extra message: the image is part of the result
    sent = anthropic_messages_pt(history[1:], model="claude-sonnet-4-5", llm_provider="anthropic")
    (result,) = [block for m in sent for block in m["content"] if block.get("type") == "tool_result"]
    text, picture = result["content"]
    assert text == {"type": "text", "text": "[figure saved to figures/a.png]"}
    assert picture["type"] == "image" and picture["source"]["media_type"] == "image/png"
    assert Image.open(io.BytesIO(base64.b64decode(picture["source"]["data"]))).size == (64, 32)


def _wire_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "python", "arguments": "{}"}}


def test_images_are_bounded_and_bad_ones_are_readable_errors() -> None:
    noise = Image.frombytes("RGB", (2400, 1800), os.urandom(2400 * 1800 * 3))
    out = io.BytesIO()
    noise.save(out, "PNG")
    mime, data, described = bounded(out.getvalue())
    assert mime == "image/jpeg" and len(data) <= MAX_ENCODED  # a photo as PNG would be megabytes
    assert max(Image.open(io.BytesIO(data)).size) <= MAX_SIDE and described.startswith("PNG 2400x1800")
    transparent = io.BytesIO()
    Image.new("RGBA", (10, 10), (0, 0, 0, 0)).save(transparent, "PNG")
    assert bounded(transparent.getvalue())[0] == "image/png"  # small: stays a PNG, transparency kept
    for bad in (b"not an image", png(64, 64)[:90]):
        with pytest.raises(ImageError, match="not an image that can be read"):
            bounded(bad)


def test_an_mcp_client_gets_a_screenshot_as_image_content(tmp_path: Path, fake_llm: FakeLLM) -> None:
    get_backend("local")
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "HERMETIC_ROOT": str(tmp_path),
        "HERMETIC_BACKEND": "local",
        "HERMETIC_TOOLSETS": "terminal,files,browser",
        "HERMETIC_MODEL__NAME": "openai/scripted",
        "HERMETIC_MODEL__API_BASE": fake_llm.url,
        "HERMETIC_LEARNING__ENABLED": "false",
    }
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "control_plane", "mcp", "serve"], env=env
    )
    page = "data:text/html,<html><body style='background:rgb(0,0,255)'><h1>Blue</h1></body></html>"

    async def session() -> Any:
        async with Client(server) as client:
            await client.call_tool("browser_navigate", {"url": page})
            return await client.call_tool("browser_screenshot", {})

    result = asyncio.run(session())
    assert not result.is_error
    text, image = result.content
    assert text.type == "text" and text.text.startswith("[screenshot saved to screenshots/screenshot-")
    assert image.type == "image" and image.mime_type == "image/png"
    shot = Image.open(io.BytesIO(base64.b64decode(image.data))).convert("RGB")
    assert shot.getpixel((shot.width - 5, shot.height - 5)) == (0, 0, 255)


@pytest.fixture
def served(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[tuple[str, str]]:
    get_backend("local")
    settings_for_profile = scripted_profiles(tmp_path, fake_llm.url, learning={"enabled": False})
    token = TokenStore(tmp_path).create("alpha")
    with serve_app(create_app(tmp_path, settings_for_profile)) as url:
        yield url, token


def test_a_v1_stream_carries_the_image_in_its_tool_event(served: tuple[str, str], fake_llm: FakeLLM) -> None:
    url, token = served
    fake_llm.load([{"tool_calls": [call("python", code=figure_cell(30, 20))]}, {"text": "Here it is."}])
    body = {"model": "x", "stream": True, "messages": [{"role": "user", "content": "plot"}]}
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    tool_events = [json.loads(line)["hermetic"] for line in lines[:-1] if '"hermetic"' in line]
    (end,) = [event for event in tool_events if event["type"] == "tool_end"]
    (image,) = end["images"]
    assert image["mime"] == "image/png" and image["label"].startswith("figures/figure-")
    assert Image.open(io.BytesIO(base64.b64decode(image["data"]))).size == (30, 20)


def test_telegram_receives_the_image_as_a_file_and_a_platform_without_files_says_where_it_is(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.load([{"tool_calls": [call("python", code=figure_cell(30, 20))]}, {"text": "Here is the plot."}])
    standin = TelegramStandin()
    try:
        with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
            standin.user_says(OWNER, "plot it")
            wait_answered(gateway, 1)
            (sent,) = [m for m in standin.bot_messages(OWNER) if m.document is not None]
            assert sent.filename is not None and sent.filename.endswith(".png")
            assert sent.document is not None and Image.open(io.BytesIO(sent.document)).size == (30, 20)
            assert any(m.text == "Here is the plot." for m in standin.bot_messages(OWNER))
    finally:
        standin.close()

    webhook = WebhookAdapter(WebhookSettings(secret="s" * 32))
    image = ToolImage(
        mime="image/png", data=base64.b64encode(png(4, 4)).decode(), label="figures/f.png (PNG 4x4)"
    )
    said = asyncio.run(send_images(webhook, "chat", None, [image]))
    assert said == ["[an image not shown here: figures/f.png (PNG 4x4)]"]


PICTURES = '''
import io
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image
from PIL import Image as Picture

server = MCPServer("pictures")


@server.tool()
def picture() -> list:
    """A red square, and an image block that is not an image."""
    out = io.BytesIO()
    Picture.new("RGB", (2000, 2000), (255, 0, 0)).save(out, "PNG")
    return ["a red square", Image(data=out.getvalue(), format="png"), Image(data=b"garbage", format="png")]


server.run()
'''


def test_an_mcp_servers_image_reaches_the_model_checked_and_bounded(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    script = tmp_path / "pictures.py"
    script.write_text(PICTURES)
    servers = {"pictures": {"command": sys.executable, "args": [str(script)], "host": True, "timeout": 30.0}}
    fake_llm.load([{"tool_calls": [call("mcp_pictures_picture")]}, {"text": "A red square."}])
    agent = Agent(settings_for(tmp_path, fake_llm.url, "local", model={"vision": True}, mcp_servers=servers))
    conversation = agent.new_conversation()
    try:
        end, events = run(conversation, "show me")
        assert end.reason == "done"
        (result,) = tool_messages(fake_llm.requests[1])
        assert result.startswith("a red square\n[image: image/png, ")  # the text names every block
        (part,) = image_parts(fake_llm.requests[1])  # the garbage block was left out, with a warning
        picture = decoded(part["image_url"]["url"])
        assert picture.size == (MAX_SIDE, MAX_SIDE) and picture.convert("RGB").getpixel((5, 5)) == (255, 0, 0)
        (end_event,) = [e for e in events if isinstance(e, ToolEnd)]
        assert end_event.ok and end_event.images[0].label.startswith(
            "an image from MCP server pictures (PNG 2000x2000"
        )
    finally:
        conversation.close()
        agent.close()
