"""The toolbox's figures.

- execute_code, with the scripted model (so the model's own time is near zero): 20 terminal calls made
  by one script against the same 20 calls made one per model step through the loop, the whole turn
  timed. Target: the script >= 5x faster.
- the python tool: `1+1` through the tool's handler to the sandbox's kernel and back, on a warm
  kernel. Target: <= 20 ms on docker.
- web_extract of a 200 KB article from a server on loopback (allowed by a CIDR rule), through the
  tool's handler: policy, fetch, extraction. Target: <= 150 ms.

    python -m bench.toolbox [-n 5] [--backends local,docker]
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from backends import SandboxSpec, create_backend
from backends.docker import DockerSandbox
from control_plane.agent.agent import Agent
from control_plane.config.settings import Limits, load_settings
from control_plane.models.fake_llm import FakeLLM
from control_plane.tools import TOOLS, ToolContext, invoke
from images.build import ensure_image

from .stats import console, report, sample

CALLS = 20
TARGET = 5.0
SCRIPT = f"from hermetic_tools import terminal\nfor i in range({CALLS}):\n    terminal(f'echo {{i}}')\n"


def terminal(i: int) -> dict[str, Any]:
    return {"name": "terminal", "arguments": {"command": f"echo {i}"}}


SEPARATE: list[dict[str, Any]] = [*({"tool_calls": [terminal(i)]} for i in range(CALLS)), {"text": "done"}]
ONE_SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "execute_code", "arguments": {"code": SCRIPT}}]},
    {"text": "done"},
]


WARM_UP: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "execute_code", "arguments": {"code": "print(1)"}}]},
    {"text": "warm"},
]


def turn_seconds(agent: Agent, server: FakeLLM, script: list[dict[str, Any]]) -> float:
    """One turn of `script` in a new conversation whose sandbox is settled, as between two messages of
    a session: up, it has run a script (so its spare interpreter is ready: the first script of a sandbox
    pays the interpreter's start-up) and, on docker with checkpoints on, its copy helper for the first
    checkpoint is up (made in the background when the session got its sandbox). The turn still takes
    the session's first checkpoint: a copy of the workspace."""
    conversation = agent.new_conversation()
    try:
        server.load(WARM_UP)
        asyncio.run(conversation.run("warm up", lambda e: None))
        sandbox = agent.sandboxes.peek(conversation.id)
        if isinstance(sandbox, DockerSandbox):
            sandbox.helper_ahead()
        server.load(script)
        started = time.perf_counter()
        end = asyncio.run(conversation.run("go", lambda e: None))
        seconds = time.perf_counter() - started
        assert end.reason == "done", f"the bench's turn ended {end.reason}"
        return seconds
    finally:
        conversation.close()


SEPARATE_LABEL = f"{CALLS} terminal calls, one per model step"
SCRIPT_LABEL = f"{CALLS} terminal calls in one execute_code"
KERNEL_LABEL = "python tool `1+1` round trip (warm kernel)"
KERNEL_TARGET_MS = 20.0


def kernel_round_trips(backend: str, n: int) -> list[float]:
    """Seconds per python-tool call of `1+1`, through the handler, on a warm kernel."""
    image = ensure_image("slim") if backend == "docker" else SandboxSpec().image
    with create_backend(backend).create(SandboxSpec(image=image)) as sandbox:
        ctx = ToolContext(session_id="bench", call_id="bench", limits=Limits(), get_sandbox=lambda: sandbox)
        tool = TOOLS.get("python")

        def once() -> None:
            result = invoke(tool, "python", '{"code": "1+1"}', ctx)
            assert result.ok and "Out: 2" in result.content, result.content

        return sample(once, n, warmup=3)


EXTRACT_LABEL = "control plane: web_extract of a 200 KB page"
EXTRACT_TARGET_MS = 150.0
ARTICLE = (
    "<html><head><title>Bench</title></head><body><nav>Home About Shop</nav><article><h1>Bench</h1>"
    + "".join(
        f"<p>{i}: a paragraph of the benchmark article, with enough words to be a paragraph.</p>"
        for i in range(2400)
    )
    + "</article><footer>Copyright</footer></body></html>"
).encode()


def extract_seconds(n: int) -> list[float]:
    """Seconds per web_extract call of ARTICLE (about 200 KB) served on loopback."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(ARTICLE)))
            self.end_headers()
            self.wfile.write(ARTICLE)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with tempfile.TemporaryDirectory() as root:
            sandbox = {"network": "allowlist", "allow": [f"127.0.0.1/32:{port}"]}
            settings = load_settings(root=root, sandbox=sandbox)
            ctx = ToolContext(
                session_id="bench",
                call_id="bench",
                limits=settings.limits,
                get_sandbox=_none,
                settings=settings,
            )
            tool = TOOLS.get("web_extract")
            arguments = json.dumps({"urls": [f"http://127.0.0.1:{port}/article"]})

            def once() -> None:
                result = invoke(tool, "web_extract", arguments, ctx)
                assert result.ok and "a paragraph of the benchmark article" in result.content, result.content

            return sample(once, n, warmup=3)
    finally:
        server.shutdown()


def _none() -> Any:
    raise AssertionError("web_extract runs on the control plane: it needs no sandbox")


NO_CHECKPOINTS = " (checkpoints off)"
"""Both turns again with `snapshots.checkpoints: false`: the checkpoint before a turn's first writing
call is a fixed cost of a turn (a volume copy on docker), the same for the script and the 20 calls."""


def figures(backend: str, n: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    for suffix, checkpoints in (("", True), (NO_CHECKPOINTS, False)):
        with FakeLLM() as server, tempfile.TemporaryDirectory() as root:
            model = {"name": "openai/bench", "api_base": server.url, "api_key": "bench", "retries": 0}
            settings = load_settings(
                root=root,
                model=model,
                backend=backend,
                learning={"enabled": False},
                snapshots={"checkpoints": checkpoints},
            )
            agent = Agent(settings)
            turns = {SEPARATE_LABEL: SEPARATE, SCRIPT_LABEL: ONE_SCRIPT}
            runs: dict[str, list[float]] = {label: [] for label in turns}
            try:
                for _ in range(n + 1):  # taken in turn: a pair sees the same load on a shared machine
                    for label, script in turns.items():
                        runs[label].append(turn_seconds(agent, server, script))
            finally:
                agent.close()
            for label, seconds in runs.items():
                results[f"hermetic {backend}: {label}{suffix}"] = seconds[1:]  # 1 warm-up
    results[f"hermetic {backend}: {KERNEL_LABEL}"] = kernel_round_trips(backend, n * 10)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=5, help="samples per figure")
    parser.add_argument("--backends", default="local,docker")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    for backend in args.backends.split(","):
        results |= figures(backend, args.iterations)
    results[EXTRACT_LABEL] = extract_seconds(args.iterations * 10)
    path = report("The toolbox (scripted model)", dict(results), args.out, {"backends": args.backends})
    extract = statistics.median(results[EXTRACT_LABEL]) * 1000
    console().print(f"web_extract of a 200 KB page {extract:.1f} ms (target <= {EXTRACT_TARGET_MS:g} ms)")
    for backend in args.backends.split(","):
        kernel = statistics.median(results[f"hermetic {backend}: {KERNEL_LABEL}"]) * 1000
        console().print(
            f"{backend}: python tool `1+1` {kernel:.1f} ms (target <= {KERNEL_TARGET_MS:g} ms on docker)"
        )
        for suffix in ("", NO_CHECKPOINTS):
            separate = statistics.median(results[f"hermetic {backend}: {SEPARATE_LABEL}{suffix}"])
            script = statistics.median(results[f"hermetic {backend}: {SCRIPT_LABEL}{suffix}"])
            ratio = separate / script
            verdict = "met" if ratio >= TARGET else "NOT met"
            console().print(
                f"{backend}{suffix}: execute_code {ratio:.1f}x faster than {CALLS} separate calls "
                f"(target >= {TARGET:g}x: {verdict})"
            )
    print(f"raw samples: {path}")


if __name__ == "__main__":
    main()
