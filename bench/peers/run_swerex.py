"""SWE-ReX 1.4.0 figures, run by the python of its own venv; prints one JSON object to stdout.

DockerDeployment runs `swerex-remote` (FastAPI under uvicorn) in the container behind a published
port; every runtime call is one HTTP POST on a fresh aiohttp session and TCP connection, and the
server drives a pexpect bash on a pty (the command, then `echo $?`). LocalDeployment drives the same
pexpect bash in-process.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

from runner_kit import LABEL_KEY, OUTPUT_100K, Runner, counts, figure, fleet, parse_args, sample, sweep
from swerex.deployment.abstract import AbstractDeployment
from swerex.deployment.docker import DockerDeployment
from swerex.deployment.local import LocalDeployment
from swerex.runtime.abstract import BashAction, CreateBashSessionRequest, ReadFileRequest, WriteFileRequest

SUBJECT = "swe-rex"
FILE_CONTENT = ("x" * 99 + "\n") * 10_000  # 1 MB of text
FILE_PATH = "/tmp/swerex-bench-1mb.txt"


class Sandbox:
    """A started deployment with one bash session, driven synchronously on its own event loop."""

    def __init__(self, deployment: AbstractDeployment) -> None:
        self.deployment = deployment
        self.loop = asyncio.new_event_loop()
        try:
            self.call(deployment.start())
            self.call(deployment.runtime.create_session(CreateBashSessionRequest()))
        except BaseException:
            self.close()
            raise

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def run(self, command: str) -> str:
        observation = self.call(self.deployment.runtime.run_in_session(BashAction(command=command)))
        if observation.exit_code != 0:  # check="raise" raises first; kept for a clear message anyway
            raise RuntimeError(f"{command!r} exited {observation.exit_code}: {observation.output[-300:]}")
        return str(observation.output)

    def close(self) -> None:
        try:
            self.call(self.deployment.stop())
        finally:
            self.loop.close()


def docker_sandbox(image: str, run_id: str) -> Sandbox:
    return Sandbox(
        DockerDeployment(
            image=image,
            pull="never",
            python_standalone_dir=None,
            docker_args=["--label", f"{LABEL_KEY}={run_id}"],
        )
    )


def file_write_read(sandbox: Sandbox, n: int) -> dict[str, Any]:
    runtime = sandbox.deployment.runtime

    def write_read() -> None:
        sandbox.call(runtime.write_file(WriteFileRequest(content=FILE_CONTENT, path=FILE_PATH)))
        read = sandbox.call(runtime.read_file(ReadFileRequest(path=FILE_PATH)))
        if read.content != FILE_CONTENT:
            raise RuntimeError("read_file did not return what was written")

    return figure(sample(write_read, n), "runtime.write_file + read_file: 2 HTTP requests, JSON bodies")


def target_figures(runner: Runner, target: str, make: Any, n: int) -> None:
    """`true` and 100 KB on one sandbox, then create-to-first-command, for one target."""
    k = counts(n)
    sandbox = make()
    try:
        runner.measure(
            f"{SUBJECT} {target}: `true` round trip", lambda: sample(lambda: sandbox.run("true"), k["fast"])
        )
        runner.measure(
            f"{SUBJECT} {target}: 100 KB output", lambda: sample(lambda: sandbox.run(OUTPUT_100K), k["100k"])
        )
        if target == "docker":
            runner.measure(
                f"{SUBJECT} docker: 1 MB file write+read", lambda: file_write_read(sandbox, k["100k"])
            )
    finally:
        sandbox.close()

    def create_first() -> None:
        fresh = make()
        try:
            fresh.run("true")
        finally:
            fresh.close()

    runner.measure(
        f"{SUBJECT} {target}: create to first command", lambda: sample(create_first, k["create"], warmup=1)
    )


def main() -> None:
    args = parse_args(__doc__ or "")
    runner = Runner()
    try:
        if "docker" in args.targets:
            make = lambda: docker_sandbox(args.image, args.run_id)  # noqa: E731
            target_figures(runner, "docker", make, args.n)
            for size in args.concurrency:
                runner.measure(
                    f"{SUBJECT} docker: {size} sandboxes x 20 commands",
                    lambda size=size: fleet(make, lambda s: s.run("true"), Sandbox.close, size),
                )
        if "local" in args.targets:
            target_figures(runner, "local", lambda: Sandbox(LocalDeployment()), args.n)
        runner.emit()
    finally:
        left = sweep(args.run_id)
        if left:
            print(f"removed {left} containers left behind", file=sys.stderr)


if __name__ == "__main__":
    main()
