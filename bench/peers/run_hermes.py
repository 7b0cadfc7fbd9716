"""hermes-agent 0.19.0 figures, run by the python of its own venv; prints one JSON object to stdout.

DockerEnvironment spawns `docker exec <id> bash -c <snapshot-sourcing wrapper>` per command and polls
the child (5 ms first, backing off); LocalEnvironment spawns `bash -c` per command the same way.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from typing import Any

# hermes-agent writes its state under HERMES_HOME (~/.hermes by default): keep the user's untouched.
SCRATCH = tempfile.mkdtemp(prefix="hermes-bench-")
os.environ["HERMES_HOME"] = os.path.join(SCRATCH, "home")

from runner_kit import (  # noqa: E402  (a sibling module: this file runs as a script)
    LABEL_KEY,
    OUTPUT_100K,
    Runner,
    counts,
    figure,
    fleet,
    parse_args,
    sample,
    sweep,
)
from tools.environments.docker import DockerEnvironment  # noqa: E402
from tools.environments.local import LocalEnvironment  # noqa: E402
from tools.file_operations import ShellFileOperations  # noqa: E402

SUBJECT = "hermes-agent"
FILE_CONTENT = ("x" * 99 + "\n") * 10_000  # 1 MB of text, as an agent writes it
FILE_PATH = "/tmp/hermes-bench-1mb.txt"


def run(env: Any, command: str) -> str:
    result = env.execute(command)
    if result["returncode"] != 0:
        raise RuntimeError(f"{command!r} exited {result['returncode']}: {result['output'][-300:]}")
    return str(result["output"])


def docker_env(image: str, run_id: str) -> DockerEnvironment:
    return DockerEnvironment(
        image=image,
        task_id=f"bench-{uuid.uuid4().hex[:8]}",
        network=False,
        persist_across_processes=False,  # cleanup() then really stops and removes the container
        extra_args=["--label", f"{LABEL_KEY}={run_id}"],
    )


def close_docker(env: DockerEnvironment) -> None:
    env.cleanup()
    env.wait_for_cleanup()  # cleanup() stops and removes on a thread; the figure includes it


def file_write_read(env: DockerEnvironment, n: int) -> dict[str, Any]:
    """The agent's own file tools: ShellFileOperations over the environment's execute()."""
    ops = ShellFileOperations(env)
    calls = 0
    execute = env.execute

    def counting_execute(*args: Any, **kwargs: Any) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return execute(*args, **kwargs)

    env.execute = counting_execute  # type: ignore[method-assign]

    def write_read() -> None:
        written = ops.write_file(FILE_PATH, FILE_CONTENT)
        if written.error:
            raise RuntimeError(f"write_file: {written.error}")
        read = ops.read_file_raw(FILE_PATH)
        if read.error or read.content != FILE_CONTENT:
            raise RuntimeError(f"read_file_raw did not return what was written ({read.error})")

    samples = sample(write_read, n)
    per_op = calls / (n + 3)
    env.execute = execute  # type: ignore[method-assign]
    return figure(
        samples,
        f"ShellFileOperations.write_file + read_file_raw: {per_op:.0f} docker execs (content via stdin)",
        {"execs_per_write_read": per_op},
    )


def docker_figures(runner: Runner, image: str, n: int, concurrency: list[int], run_id: str) -> None:
    k = counts(n)
    env = docker_env(image, run_id)
    try:
        runner.measure(
            f"{SUBJECT} docker: `true` round trip", lambda: sample(lambda: run(env, "true"), k["fast"])
        )
        runner.measure(
            f"{SUBJECT} docker: 100 KB output", lambda: sample(lambda: run(env, OUTPUT_100K), k["100k"])
        )
        runner.measure(f"{SUBJECT} docker: 1 MB file write+read", lambda: file_write_read(env, k["100k"]))
    finally:
        close_docker(env)

    def create_first() -> None:
        fresh = docker_env(image, run_id)
        try:
            run(fresh, "true")
        finally:
            close_docker(fresh)

    runner.measure(
        f"{SUBJECT} docker: create to first command", lambda: sample(create_first, k["create"], warmup=1)
    )
    for size in concurrency:
        runner.measure(
            f"{SUBJECT} docker: {size} sandboxes x 20 commands",
            lambda size=size: fleet(
                lambda: docker_env(image, run_id), lambda e: run(e, "true"), close_docker, size
            ),
        )


def local_figures(runner: Runner, n: int) -> None:
    k = counts(n)
    workdir = os.path.join(SCRATCH, "cwd")
    os.makedirs(workdir)
    env = LocalEnvironment(cwd=workdir)
    try:
        runner.measure(
            f"{SUBJECT} local: `true` round trip", lambda: sample(lambda: run(env, "true"), k["fast"])
        )
        runner.measure(
            f"{SUBJECT} local: 100 KB output", lambda: sample(lambda: run(env, OUTPUT_100K), k["100k"])
        )
    finally:
        env.cleanup()

    def create_first() -> None:
        fresh = LocalEnvironment(cwd=workdir)
        try:
            run(fresh, "true")
        finally:
            fresh.cleanup()

    runner.measure(
        f"{SUBJECT} local: create to first command", lambda: sample(create_first, k["create"], warmup=1)
    )


def main() -> None:
    args = parse_args(__doc__ or "")
    runner = Runner()
    try:
        if "docker" in args.targets:
            docker_figures(runner, args.image, args.n, args.concurrency, args.run_id)
        if "local" in args.targets:
            local_figures(runner, args.n)
        runner.emit()
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
        left = sweep(args.run_id)
        if left:
            print(f"removed {left} containers left behind", file=sys.stderr)


if __name__ == "__main__":
    main()
