"""Interactive terminals and file watching, local and docker:
`python -m bench.sandbox_features [-n 200] [--backends local,docker]`.

- interactive `send` round trip: type a line into `cat` on a terminal and get the rendered screen back,
  with the runtime's settle window at 5 ms (the default is 50 ms: a screen counts as settled after that
  much quiet, so a default round trip is about 50 ms plus the figure's overhead); target <= 30 ms;
- file event from write to watcher: a file written in the sandbox (fs.write) until its event is read
  from `Sandbox.watch` on this side (the 5 ms debounce included); target <= 20 ms;
- stats call: `Sandbox.stats()` (the runtime's sys.stats, the cgroup's files, the audit log); <= 5 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from backends import Sandbox, SandboxSpec, create_backend

from .stats import Results, cpu_noise, print_targets, report, sample

HERE = Path(__file__).resolve().parent
TARGETS = {"interactive send round trip": 30.0, "file event write to watcher": 20.0, "stats call": 5.0}


def send_round_trips(sb: Sandbox, n: int) -> list[float]:
    term, _ = sb.terminals.open("cat", timeout=0.2)
    samples = []
    try:
        for i in range(n + 3):
            start = time.perf_counter()
            screen = term.send([f"line {i}", "Enter"], settle=0.005, expect=f"^line {i}$")
            if i >= 3:
                samples.append(time.perf_counter() - start)
            assert f"line {i}" in screen.text
            if i % 20 == 19:
                term.send(["Ctrl-L"], settle=0.005)  # cat passes it on; keeps the screen short
    finally:
        term.close()
    return samples


def event_latencies(sb: Sandbox, n: int) -> list[float]:
    sb.run("rm -rf bench-watch && mkdir bench-watch")
    samples = []
    with sb.watch("bench-watch") as watch:
        for i in range(n + 3):
            target = f"{watch.path}/f{i}"
            start = time.perf_counter()
            sb.call("fs.write", {"path": f"bench-watch/f{i}", "content": "x"})
            while (event := watch.get(10)) is not None and event.path != target:
                pass  # fs.write's temporary file, then its move into place
            if i >= 3:
                samples.append(time.perf_counter() - start)
    return samples


def collect(backends: list[str], n: int) -> Results:
    results: Results = {}
    for name in backends:
        with create_backend(name).create(SandboxSpec()) as sb:
            results[f"{name}: interactive send round trip"] = send_round_trips(sb, n)
            results[f"{name}: file event write to watcher"] = event_latencies(sb, n)
            results[f"{name}: stats call"] = sample(sb.stats, n)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=200)
    parser.add_argument("--backends", default="local,docker", help="comma-separated")
    args = parser.parse_args()
    noise_start = cpu_noise()
    results = collect([b for b in args.backends.split(",") if b], args.iterations)
    noise_end = cpu_noise()
    checked = []
    for figure, samples in results.items():
        bound = next(ms for text, ms in TARGETS.items() if figure.endswith(text))
        median = statistics.median(samples) * 1000 if isinstance(samples, list) else float("nan")
        checked.append((f"{figure} <= {bound:g} ms", f"{median:.2f} ms", median <= bound))
    path = report("Interactive terminals and file watching", results, HERE / "results", {"targets": checked})
    print_targets(checked, (noise_start, noise_end), path)


if __name__ == "__main__":
    main()
