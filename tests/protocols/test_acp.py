"""`hermetic acp` as an editor drives it: the SDK's own client side over stdio against a real
subprocess, the scripted model answering, the local backend with the editor's directory as workspace."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from acp import (
    PROTOCOL_VERSION,
    Client,
    RequestError,
    resource_link_block,
    spawn_agent_process,
    text_block,
)
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ClientCapabilities,
    DeniedOutcome,
    FileEditToolCallContent,
    FileSystemCapabilities,
    ImageContentBlock,
    Implementation,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
)
from hermetic_cli import scripted_env

from control_plane.acp.server import HermeticAcp
from control_plane.acp.updates import Updates
from control_plane.agent.agent import Agent
from control_plane.config.settings import load_settings
from control_plane.events import ToolEnd, ToolImage, ToolStart
from control_plane.models.fake_llm import FakeLLM

ZED = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True)


class Editor:
    """The client side: records every session/update, answers permission requests with `choose`."""

    def __init__(self, choose: Callable[[list[PermissionOption]], str | None]) -> None:
        self.updates: list[Any] = []
        self.asked: list[ToolCallUpdate] = []
        self.choose = choose
        self.buffers: dict[str, str] = {}
        """Unsaved editor buffers by path: fs/read_text_file answers from them."""
        self.written: dict[str, str] = {}
        self._changed = asyncio.Condition()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        async with self._changed:
            self.updates.append(update)
            self._changed.notify_all()

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.asked.append(tool_call)
        chosen = self.choose(options)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen))

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        text = self.buffers.get(path)
        if text is None:
            raise RequestError.resource_not_found(path)
        lines = text.splitlines(keepends=True)[(line or 1) - 1 :]
        return ReadTextFileResponse(content="".join(lines[:limit] if limit else lines))

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> None:
        self.written[path] = content
        Path(path).write_text(content)  # the editor saves it

    async def wait_for(self, test: Callable[[Any], bool]) -> Any:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: any(map(test, self.updates))), 60)
        return next(update for update in self.updates if test(update))

    def of(self, kind: type) -> list[Any]:
        return [update for update in self.updates if isinstance(update, kind)]

    def text(self) -> str:
        return "".join(u.content.text for u in self.of(AgentMessageChunk) if hasattr(u.content, "text"))


@asynccontextmanager
async def acp_process(env: dict[str, str], editor: Editor) -> AsyncIterator[ClientSideConnection]:
    async with spawn_agent_process(
        cast(Client, editor),
        sys.executable,
        "-m",
        "control_plane",
        "acp",
        env=env,
        # the SDK waits 2 s for the exit after closing stdin, then terminates, and raises
        # ProcessLookupError when the exit lands in between (seen in CI on a loaded machine)
        transport_kwargs={"shutdown_timeout": 60},
    ) as (
        conn,
        _,
    ):
        await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ZED,
            client_info=Implementation(name="zed", title="Zed", version="0.200.0"),
        )
        yield conn


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted model turn that calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 180))


def test_a_zed_session_end_to_end(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """initialize, session/new in the project, a prompt with a file link: plan, an edit with its diff, a
    command with its output, the answer; a slash command; then session/load in a new process replays it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.md").write_text("old line\n")
    env = scripted_env(tmp_path / "home", fake_llm.url, HERMETIC_LEARNING__ENABLED="false")  # no review turns
    plan = [{"id": "1", "content": "rewrite the notes", "status": "in_progress"}]
    fake_llm.load(
        [
            call("todo", items=plan),
            call("patch", path="notes.md", old="old", new="new"),
            call("read_file", path="draft.md"),
            call("write_file", path="/workspace/made.md", content="made through the editor\n"),
            call("terminal", command="cat notes.md made.md; echo from-sandbox"),
            {"reasoning": "The edit took; say so.", "text": "The notes now say new line."},
        ]
    )
    editor = Editor(lambda options: None)
    (project / "draft.md").write_text("saved text\n")
    editor.buffers[str(project / "draft.md")] = "unsaved text\nsecond line\n"

    async def session() -> str:
        async with acp_process(env, editor) as conn:
            started = await conn.new_session(cwd=str(project), mcp_servers=[])
            commands = await editor.wait_for(lambda u: isinstance(u, AvailableCommandsUpdate))
            names = {command.name for command in commands.available_commands}
            assert {"status", "model", "memory", "skills", "help"} <= names and "new" not in names
            link = resource_link_block("notes.md", (project / "notes.md").as_uri())
            reply = await conn.prompt(
                session_id=started.session_id, prompt=[text_block("Fix the notes"), link]
            )
            assert reply.stop_reason == "end_turn"
            status = await conn.prompt(session_id=started.session_id, prompt=[text_block("/status")])
            assert status.stop_reason == "end_turn"
            return started.session_id

    session_id = run(session())
    assert (project / "notes.md").read_text() == "new line\n"  # the workspace is the project, read-write
    assert "/workspace/notes.md" in json.dumps(fake_llm.requests[0]["messages"])
    plans = editor.of(AgentPlanUpdate)
    assert plans and plans[0].entries[0].content == "rewrite the notes"
    assert plans[0].entries[0].status == "in_progress"
    starts = {start.title.split(":")[0]: start for start in editor.of(ToolCallStart)}
    edit = starts["patch"]
    assert edit.kind == "edit"
    diff = edit.content[0]
    assert isinstance(diff, FileEditToolCallContent)
    assert (diff.path, diff.old_text, diff.new_text) == (
        str(project / "notes.md"),
        "old line\n",
        "new line\n",
    )
    assert starts["terminal"].kind == "execute"
    ends = [u for u in editor.of(ToolCallProgress) if u.tool_call_id == starts["terminal"].tool_call_id]
    assert ends[-1].status == "completed"
    assert "from-sandbox" in ends[-1].content[0].content.text
    assert "new line" in ends[-1].content[0].content.text
    assert "The notes now say new line." in editor.text()
    thoughts = "".join(u.content.text for u in editor.of(AgentThoughtChunk))
    assert thoughts == "The edit took; say so.", "the reasoning streams as thoughts, not as the message"
    assert "The edit took" not in editor.text()
    assert f"session {session_id}" in editor.text()  # /status answered without the model
    assert len(fake_llm.requests) == 6
    results = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert results[2].startswith("     1\tunsaved text\n     2\tsecond line")  # the editor's buffer
    assert editor.written == {str(project / "made.md"): "made through the editor\n"}
    assert "through the editor" in results[3]
    assert "made through the editor" in ends[-1].content[0].content.text  # the sandbox sees the file

    loaded = Editor(lambda options: None)
    fake_llm.load([{"text": "Still here."}])

    async def load() -> None:
        async with acp_process(env, loaded) as conn:
            listed = await conn.list_sessions(cwd=str(project))  # the editor's history of this project
            assert [(s.session_id, s.cwd) for s in listed.sessions] == [(session_id, str(project))]
            assert listed.sessions[0].updated_at and listed.next_cursor is None
            assert (await conn.list_sessions(cwd=str(tmp_path))).sessions == []
            assert [s.session_id for s in (await conn.list_sessions()).sessions] == [session_id]
            with pytest.raises(RequestError, match="Invalid params"):
                await conn.list_sessions(cursor="not-ours")
            await conn.load_session(cwd=str(project), session_id=session_id, mcp_servers=[])
            said = [u.content.text for u in loaded.of(UserMessageChunk)]
            assert said and said[0].startswith("Fix the notes")
            assert "The notes now say new line." in loaded.text()
            reply = await conn.prompt(session_id=session_id, prompt=[text_block("and now?")])
            assert reply.stop_reason == "end_turn"

    run(load())
    assert "Still here." in loaded.text()
    assert "The notes now say new line." in json.dumps(fake_llm.requests[-1]["messages"])


def test_cancel_stops_a_running_command(tmp_path: Path, fake_llm: FakeLLM) -> None:
    project = tmp_path / "project"
    project.mkdir()
    env = scripted_env(tmp_path / "home", fake_llm.url)
    fake_llm.load(
        [
            call("terminal", command="echo started; sleep 120; touch late"),
            {"text": "after the cancel"},
        ]
    )
    editor = Editor(lambda options: None)

    async def session() -> None:
        async with acp_process(env, editor) as conn:
            started = await conn.new_session(cwd=str(project), mcp_servers=[])
            prompt = asyncio.create_task(
                conn.prompt(session_id=started.session_id, prompt=[text_block("go")])
            )
            await editor.wait_for(lambda u: isinstance(u, ToolCallProgress) and "started" in str(u.content))
            await conn.cancel(session_id=started.session_id)
            reply = await prompt  # long before the sleep is over (the whole test is bounded well under it)
            assert reply.stop_reason == "cancelled"
            again = await conn.prompt(session_id=started.session_id, prompt=[text_block("still there?")])
            assert again.stop_reason == "end_turn"

    run(session())
    assert not (project / "late").exists()
    assert "after the cancel" in editor.text()


def test_a_denied_host_and_a_clarify_pick(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """The network approval goes to the editor as a permission request; its reject is the agent's no.
    A clarify question with choices is one too, and the pick is the answer."""
    project = tmp_path / "project"
    project.mkdir()
    env = scripted_env(
        tmp_path / "home",
        fake_llm.url,
        HERMETIC_SANDBOX__NETWORK="allowlist",
        HERMETIC_TOOLSETS="terminal,network,clarify",
    )
    fake_llm.load(
        [
            call("network_request", host="pypi.example.test", port=443, reason="to install a package"),
            call("clarify", question="Which one?", choices=["red", "blue"]),
            {"text": "ok"},
        ]
    )

    def choose(options: list[PermissionOption]) -> str | None:
        kinds = {option.kind: option.option_id for option in options}
        return kinds.get("reject_once") or options[-1].option_id

    editor = Editor(choose)

    async def session() -> None:
        async with acp_process(env, editor) as conn:
            started = await conn.new_session(cwd=str(project), mcp_servers=[])
            reply = await conn.prompt(session_id=started.session_id, prompt=[text_block("install it")])
            assert reply.stop_reason == "end_turn"

    run(session())
    assert str(editor.asked[0].title).startswith("The agent asks to reach pypi.example.test:443")
    assert editor.asked[1].title == "Which one?"
    started = {start.title.split(":")[0]: start.tool_call_id for start in editor.of(ToolCallStart)}
    assert [call.tool_call_id for call in editor.asked] == [started["network_request"], started["clarify"]]
    tool_results = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert "did not allow pypi.example.test:443" in tool_results[0]
    assert tool_results[1] == "the user answered: blue"


def test_bad_messages_get_errors_and_the_process_lives_on(tmp_path: Path, fake_llm: FakeLLM) -> None:
    env = scripted_env(tmp_path / "home", fake_llm.url)
    fake_llm.load([{"text": "alive"}])

    async def session() -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "control_plane", "acp",
            env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdin is not None and process.stdout is not None

        async def call(line: bytes) -> dict[str, Any]:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(line + b"\n")
            await process.stdin.drain()
            return json.loads(await process.stdout.readline())

        assert (await call(b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {'))["error"][
            "code"
        ] == -32700
        wrong = await call(b'{"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": 5}}')
        assert wrong["id"] == 2 and wrong["error"]["code"] == -32602
        relative = await call(
            b'{"jsonrpc": "2.0", "id": 3, "method": "session/new", '
            b'"params": {"cwd": "rel", "mcpServers": []}}'
        )
        assert relative["error"]["code"] == -32602 and "absolute" in json.dumps(relative["error"])
        missing = await call(
            b'{"jsonrpc": "2.0", "id": 6, "method": "session/load", '
            b'"params": {"cwd": "/tmp", "sessionId": "nope", "mcpServers": []}}'
        )
        assert missing["error"]["code"] == -32602 and "no session nope" in json.dumps(missing["error"])
        unknown = await call(b'{"jsonrpc": "2.0", "id": 4, "method": "session/fly", "params": {}}')
        assert unknown["error"]["code"] == -32601
        hello = await call(
            b'{"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {"protocolVersion": 1}}'
        )
        assert hello["result"]["protocolVersion"] == PROTOCOL_VERSION
        assert hello["result"]["agentCapabilities"]["loadSession"] is True
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), 60) == 0

    run(session())


def test_backends_that_cannot_mount_the_editors_directory_refuse_it(tmp_path: Path) -> None:
    """ssh sandboxes live on another machine (nothing is synced): session/new says so. In process: the
    ssh backend is built without connecting, so no host is needed to see the refusal."""
    ssh = {"host": "127.0.0.1", "port": 22, "user": "nobody"}
    agent = Agent(load_settings(root=tmp_path, backend="ssh", ssh=ssh))
    try:
        asyncio.run(HermeticAcp(agent).new_session(cwd=str(tmp_path), mcp_servers=[]))
    except RequestError as exc:
        assert exc.code == -32602 and "ssh backend runs sandboxes on another machine" in json.dumps(exc.data)
    else:
        raise AssertionError("session/new on the ssh backend succeeded")
    finally:
        agent.close()


def test_a_tools_images_reach_the_editor_beside_its_text(tmp_path: Path) -> None:
    """A screenshot or a figure a tool returned is an image block in the call's final update (its text
    first); an edit's update keeps only its diff."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
    updates = Updates(tmp_path, "/workspace")
    updates.of(ToolStart(call_id="c1", name="browser_screenshot", arguments={}))
    image = ToolImage(mime="image/png", data=png, label="screenshot.png (PNG 1x1)")
    (done,) = updates.of(
        ToolEnd(
            call_id="c1", name="browser_screenshot", ok=True, result="saved", duration_ms=1, images=[image]
        )
    )
    assert isinstance(done, ToolCallProgress) and done.status == "completed"
    text, shown = [item.content for item in done.content or []]
    assert isinstance(text, TextContentBlock) and "saved" in text.text
    assert isinstance(shown, ImageContentBlock) and (shown.data, shown.mime_type) == (png, "image/png")
