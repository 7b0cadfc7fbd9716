"""The python tool against a real Jupyter kernel (Debian's ipykernel) in real sandboxes (local, docker):
state between calls, typed rich output, figures saved as files, interrupt on timeout, restart, a dying
kernel; the agent loop drives it with the scripted model."""

from __future__ import annotations

import base64
import struct
import sys
import zlib
from pathlib import Path

import pytest
from agent_runs import call, run, settings_for, tool_messages

from control_plane.agent.agent import Agent
from control_plane.models.fake_llm import FakeLLM
from images.build import ensure_image
from sandboxes.kernel import Kernel
from sandboxes.protocol import KERNEL_UNAVAILABLE, RpcError


def png(width: int = 4, height: int = 3) -> bytes:
    """A real (tiny, grey) PNG, made without an imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = base64.b64encode(png()).decode()
CELLS = [
    "x = 40 + 2",
    "print('x is', x)\nx * 2",
    "from IPython.display import Markdown, HTML, Image, SVG, display\n"
    "display(Markdown('**bold** note'))\n"
    "display(HTML('<table><tr><td>1</td></tr></table>'))\n"
    f"display(Image(data=__import__('base64').b64decode('{PNG}'), format='png'))\n"
    'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>\'))',
    "1 / 0",
]


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_kernel_keeps_state_and_types_its_rich_output(
    tmp_path: Path, fake_llm: FakeLLM, backend: str
) -> None:
    fake_llm.load([{"tool_calls": [call("python", code=cell)]} for cell in CELLS] + [{"text": "done"}])
    # docker: this recipe's own image by its content-hashed tag (the :slim alias is whoever built last)
    image = {"sandbox": {"image": ensure_image("slim")}} if backend == "docker" else {}
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend, **image))
    conversation = agent.new_conversation()
    end, _ = run(conversation, "go")
    assert end.reason == "done"
    first, second, rich, error = tool_messages(fake_llm.requests[-1])
    assert first == "[a new kernel was started]\n"  # an assignment shows nothing
    assert second == "x is 42\nOut: 84\n"  # the variable survived; stdout then the value
    assert "**bold** note\n" in rich  # Markdown as Markdown
    assert "<table><tr><td>1</td></tr></table>\n" in rich and " object>" not in rich  # HTML, not its repr
    assert "(PNG, " in rich and "(SVG, " in rich
    saved = [line.split(" ")[3] for line in rich.splitlines() if line.startswith("[figure saved to")]
    sandbox = agent.sandboxes.get(conversation.id)
    assert sandbox.call("fs.stat", {"path": saved[0]})["size"] == len(png())  # the figure, as a file
    assert "ZeroDivisionError" in error and "\x1b[" not in error
    conversation.close()


def test_a_cell_over_its_timeout_is_interrupted_and_the_kernel_lives_on(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("python", code="kept = 'still here'")]},
            {
                "tool_calls": [
                    call(
                        "python", code="import time\nprint('sleeping', flush=True)\ntime.sleep(60)", timeout=1
                    )
                ]
            },
            {"tool_calls": [call("python", code="kept")]},
            {"tool_calls": [call("python", restart=True)]},
            {"tool_calls": [call("python", code="'kept' in globals()")]},
            {"tool_calls": [call("python", code="import os\nos._exit(3)")]},
            {"tool_calls": [call("python", code="'back'")]},
            {"text": "done"},
        ]
    )
    conversation = Agent(settings_for(tmp_path, fake_llm.url, "local")).new_conversation()
    end, _ = run(conversation, "go")
    assert end.reason == "done"
    _, slept, kept, restarted, fresh, died, back = tool_messages(fake_llm.requests[-1])
    assert "sleeping" in slept and "KeyboardInterrupt" in slept
    assert "[interrupted after 1 s; the kernel keeps its variables]" in slept
    assert kept == "Out: 'still here'\n"
    assert restarted == "[the kernel was restarted: a fresh Python, no variables]"
    assert fresh == "Out: False\n"
    assert "error: the Python kernel died while running this cell" in died
    assert back == "[a new kernel was started]\nOut: 'back'\n"
    conversation.close()


def test_a_sandbox_without_a_kernel_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "jupyter_client.manager", None)  # the import fails, as without it
    kernel = Kernel(str(tmp_path), {"PATH": "/usr/bin:/bin"})
    with pytest.raises(RpcError) as caught:
        kernel.run(None, "1+1")
    assert caught.value.code == KERNEL_UNAVAILABLE
    assert "needs ipykernel (Debian: apt-get install python3-ipykernel" in caught.value.message
