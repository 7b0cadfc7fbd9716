"""Evaluation harness overhead and throughput on docker.

1. Attempts of a trivial task through a run with one worker (each a fork of the task's prepared
   environment: a container from its cached image; the oracle's solve.sh, the verifier, the reward
   read back, the result written; the sandbox removed in the background, the run's wall time
   counting every removal) per attempt, against the same scripts run by hand in one
   `docker run --rm --network none` of the same image. Target: at most 1.3x. A single attempt on its
   own, its sandbox removed before it returns, is printed beside them.
2. Attempts per minute with 4 workers for a task whose oracle takes 2 seconds. Target: at least 60.

    python -m bench.eval [-n 10] [--attempts 24] [--workers 4]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from backends.docker import DockerBackend
from control_plane.evals import load_suite
from control_plane.evals.attempt import EVAL_LABEL, AttemptSetup, OracleAgent, run_attempt
from control_plane.evals.environment import task_image
from control_plane.evals.runner import EvalRunner

from .stats import Figure, as_figure, console, report, sample

HARNESS = "eval harness: an attempt of a trivial task in a run, 1 worker (docker)"
BY_HAND = "by hand: docker run --rm of the oracle and the verifier"
ROUNDS = 3
SOLVE = "echo hello > /app/out.txt\n"
TEST = 'if [ "$(cat /app/out.txt)" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'


def write_task(root: Path, name: str, solve: str) -> Path:
    task = root / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "instruction.md").write_text("Write hello to /app/out.txt.")
    (task / "environment" / "Dockerfile").write_text("FROM hermetic-sandbox:slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text(solve)
    (task / "tests" / "test.sh").write_text(TEST)
    return task


def collect(n: int, attempts: int, workers: int) -> tuple[dict[str, list[float] | Figure], dict[str, float]]:
    backend = DockerBackend()
    setup = AttemptSetup(backend=backend, agent=OracleAgent(), labels={EVAL_LABEL: "bench"})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (task,) = load_suite(write_task(root / "quick", "trivial", SOLVE)).tasks
        image, _ = task_image(backend.client, task)

        def alone() -> None:
            result = run_attempt(setup, task, 1)
            if result.reward != 1.0:
                raise SystemExit(f"the trivial task did not pass: {result.error}")

        def in_a_run(round_: int) -> float:
            runner = EvalRunner(setup, root / f"run-{round_}", attempts=n, workers=1)
            started = time.perf_counter()
            runner.run([task])
            seconds = time.perf_counter() - started
            failed = [r for r in runner.results.read() if r.reward != 1.0]
            if failed:
                raise SystemExit(f"the trivial task did not pass: {failed[0].error}")
            return seconds / n

        script = f"mkdir -p /logs/verifier && {SOLVE.strip()} && {TEST.strip()}"
        script += " && cat /logs/verifier/reward.txt"

        def by_hand() -> None:
            done = subprocess.run(
                ["docker", "run", "--rm", "--network", "none", image, "bash", "-c", script],
                capture_output=True,
                text=True,
            )
            if done.stdout.strip() != "1":
                raise SystemExit(f"docker run by hand failed: {done.stderr}")

        alone()  # warm: the image cached, the first connection made
        rounds = [in_a_run(r) for r in range(ROUNDS)]
        figures: dict[str, list[float] | Figure] = {
            HARNESS: Figure(rounds, f"{ROUNDS} runs of {n} attempts, wall time / attempts"),
            BY_HAND: sample(by_hand, n, warmup=1),
            "eval harness: one attempt alone, its sandbox removed before it returns": sample(
                alone, n, warmup=0
            ),
        }
        (slow,) = load_suite(write_task(root / "slow", "two-seconds", "sleep 2\n" + SOLVE)).tasks
        runner = EvalRunner(setup, root / "out", attempts=attempts, workers=workers)
        started = time.perf_counter()
        runner.run([slow])
        seconds = time.perf_counter() - started
        passed = sum(r.passed for r in runner.results.read())
    per_minute = attempts / seconds * 60
    note = f"{attempts} attempts ({passed} passed) with {workers} workers in {seconds:.1f} s"
    figures[f"eval throughput: a 2-second task, {workers} workers (s per attempt)"] = Figure(
        [seconds / attempts], note
    )
    return figures, {"attempts_per_minute": round(per_minute, 1)}


def check(figures: dict[str, list[float] | Figure], extra: dict[str, float]) -> None:
    harness, by_hand = (statistics.median(as_figure(figures[k]).samples) for k in (HARNESS, BY_HAND))
    ratio = harness / by_hand
    out = console()
    out.print(f"overhead: harness / docker run by hand = {ratio:.2f}x (target <= 1.3x): {_ok(ratio <= 1.3)}")
    rate = extra["attempts_per_minute"]
    out.print(f"throughput: {rate:.1f} attempts per minute (target >= 60): {_ok(rate >= 60)}")


def _ok(met: bool) -> str:
    return "met" if met else "NOT met"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.eval", description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=10)
    parser.add_argument("--attempts", type=int, default=24)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    figures, extra = collect(args.iterations, args.attempts, args.workers)
    report("Evaluation harness", figures, Path(__file__).parent / "results", extra)
    check(figures, extra)
