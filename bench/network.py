"""The network doors' cost, local backend: `python -m bench.network [-n 200] [--bulk-mb 200]`.

- connection set-up through the egress proxy vs direct: a fresh connection and a 16-byte answer, from
  a sandbox on `allowlist` (CONNECT through the bridge and the proxy) and one on `full` (straight to it);
- bulk download through the proxy vs direct (MB/s, the median of 5 alternated downloads, and the worst
  pair), with the time the proxy's pump threads spent on a CPU and waiting for one (run queue) in each
  download through it: on a loaded machine the wait is most of the difference;
- an exposed port's request round trip (keep-alive) vs the same server reached directly from the host.

The upstream runs in its own process on 127.0.0.1 (the `full` sandbox shares the host's network, so
"direct" is the same upstream); the proxy path needs a CIDR rule for 127.0.0.1, as any IP literal does.
Docker is left out: its `full` network cannot reach the host's loopback, so there is no same-upstream
direct path to compare with.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from upstream import send_zeros  # the test upstream's /bytes/N (bench/__init__ puts tests/ on the path)

from backends import Sandbox, SandboxSpec, create_backend
from backends.network import pump

from .stats import Results, cpu_noise, print_targets, report

HERE = Path(__file__).resolve().parent
BULK_RUNS = 5


class _Bytes(http.server.BaseHTTPRequestHandler):
    """GET /bytes/N: N zero bytes; HTTP/1.1 keep-alive."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        send_zeros(self, int(self.path.rsplit("/", 1)[1]))

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def serve() -> None:
    """The upstream process: prints its port, serves until killed."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Bytes)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


def _probe(sb: Sandbox, port: int, n: int, bulk: int, proxy: int | None) -> dict[str, object]:
    args = f"{port} {n} {bulk}" + (f" {proxy}" if proxy else "")
    out = sb.run(f"python3 /tmp/network_probe.py {args}", timeout=600)
    if out["exit_code"] != 0:
        raise SystemExit(f"probe failed: {out['output']}")
    result: dict[str, object] = json.loads(out["output"])
    return result


class PumpClock:
    """What the proxy's pump threads (this process) did during a download: seconds on a CPU, and seconds
    runnable but waiting for one (the kernel's schedstat of each thread, read as it starts and ends)."""

    def __init__(self) -> None:
        self.running = self.waiting = 0.0
        self._lock = threading.Lock()
        original = pump._pump

        def clocked(source: socket.socket, sink: socket.socket, idle: float) -> int:
            before = _schedstat()
            try:
                return original(source, sink, idle)
            finally:
                after = _schedstat()
                with self._lock:
                    self.running += (after[0] - before[0]) / 1e9
                    self.waiting += (after[1] - before[1]) / 1e9

        pump._pump = clocked  # type: ignore[assignment]

    def take(self) -> tuple[float, float]:
        with self._lock:
            taken, self.running, self.waiting = (self.running, self.waiting), 0.0, 0.0
        return taken


def _schedstat() -> tuple[int, int]:
    """This thread's nanoseconds on a CPU and waiting in the run queue (/proc/thread-self/schedstat)."""
    running, waiting, _ = Path("/proc/thread-self/schedstat").read_text().split()
    return int(running), int(waiting)


def _round_trips(port: int, n: int) -> list[float]:
    """Seconds per keep-alive request of 16 bytes to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    samples = []
    for i in range(n + 3):
        start = time.perf_counter()
        conn.request("GET", "/bytes/16")
        conn.getresponse().read()
        if i >= 3:
            samples.append(time.perf_counter() - start)
    conn.close()
    return samples


def collect(n: int, bulk_mb: int) -> tuple[Results, list[tuple[str, str, bool]]]:
    serve_cmd = [sys.executable, "-m", "bench.network", "--serve"]
    upstream = subprocess.Popen(serve_cmd, stdout=subprocess.PIPE, text=True)
    assert upstream.stdout is not None
    port = int(upstream.stdout.readline())
    bulk = bulk_mb * 1_000_000
    backend = create_backend("local")
    results: Results = {}
    try:
        proxied = SandboxSpec(network="allowlist", allow=[f"127.0.0.1/32:{port}"], memory="512m")
        direct_spec = SandboxSpec(network="full", memory="512m")
        with backend.create(proxied) as via, backend.create(direct_spec) as full:
            for sb in (via, full):
                sb.upload(HERE / "network_probe.py", "/tmp")
            bridge = int(via.run("echo ${http_proxy##*:}")["output"])
            through = _probe(via, port, n, 0, bridge)
            direct = _probe(full, port, n, 0, None)
            results["egress: connection set-up, direct (network full)"] = direct["setup"]  # type: ignore[assignment]
            results["egress: connection set-up, through the proxy"] = through["setup"]  # type: ignore[assignment]
            bulk_direct: list[float] = []
            bulk_through: list[float] = []
            running: list[float] = []
            waiting: list[float] = []
            clock = PumpClock()
            for _ in range(BULK_RUNS):  # alternated, so a burst of load on this machine hits both
                clock.take()
                bulk_through.append(_probe(via, port, 0, bulk, bridge)["bulk"])  # type: ignore[arg-type]
                on_cpu, queued = clock.take()
                running.append(on_cpu)
                waiting.append(queued)
                bulk_direct.append(_probe(full, port, 0, bulk, None)["bulk"])  # type: ignore[arg-type]
            results["egress: bulk download, direct (s)"] = bulk_direct
            results["egress: bulk download, through the proxy (s)"] = bulk_through
            results["egress: bulk download, the proxy's pumps on a CPU (s)"] = running
            results["egress: bulk download, the proxy's pumps waiting for a CPU (s)"] = waiting
            web = f'exec python3 -c "{_INNER_SERVER}"'
            full.call("proc.spawn", {"command": web})
            inner = 18080
            full.run("for i in $(seq 200); do grep -qi ':469F .* 0A' /proc/net/tcp && break; sleep .05; done")
            assert full.ingress is not None
            exposed = full.ingress.expose(inner)
            results["expose: request round trip, direct"] = _round_trips(inner, n)
            results["expose: request round trip, through the exposure"] = _round_trips(exposed.host_port, n)
    finally:
        upstream.kill()
        upstream.wait()
    return results, _targets(results, bulk_mb)


# The server inside the exposed sandbox: one write per answer (headers and body), so neither path
# waits on Nagle and delayed ACKs.
_INNER_SERVER = (
    "import http.server as h;"
    "R=b'HTTP/1.1 200 OK\\r\\nContent-Length: 16\\r\\n\\r\\n'+bytes(16);"
    "B=type('B',(h.BaseHTTPRequestHandler,),{'protocol_version':'HTTP/1.1','log_message':lambda *a:None,"
    "'do_GET':lambda s:s.wfile.write(R)});h.ThreadingHTTPServer(('127.0.0.1',18080),B).serve_forever()"
)


def _targets(results: Results, bulk_mb: int) -> list[tuple[str, str, bool]]:
    def median_ms(name: str) -> float:
        return statistics.median(results[name]) * 1000  # type: ignore[arg-type]

    setup = median_ms("egress: connection set-up, through the proxy") - median_ms(
        "egress: connection set-up, direct (network full)"
    )
    direct_runs: list[float] = results["egress: bulk download, direct (s)"]  # type: ignore[assignment]
    proxied_runs: list[float] = results["egress: bulk download, through the proxy (s)"]  # type: ignore[assignment]
    direct, proxied = bulk_mb / statistics.median(direct_runs), bulk_mb / statistics.median(proxied_runs)
    worst = min(d / p for d, p in zip(direct_runs, proxied_runs, strict=True))  # each alternated pair
    expose = median_ms("expose: request round trip, through the exposure") - median_ms(
        "expose: request round trip, direct"
    )
    return [
        ("connection set-up added by the proxy <= 2 ms", f"{setup:.2f} ms", setup <= 2),
        (
            f"bulk download ({bulk_mb} MB) through the proxy >= 90% of direct (issue 38)",
            f"{proxied:.0f} vs {direct:.0f} MB/s = {proxied / direct:.0%}",
            proxied / direct >= 0.9,
        ),
        (
            f"bulk download, the worst of {len(direct_runs)} alternated pairs >= 80% of direct (issue 38)",
            f"{worst:.0%}",
            worst >= 0.8,
        ),
        ("exposed port's round trip added <= 1 ms", f"{expose:.2f} ms", expose <= 1),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=200)
    parser.add_argument("--bulk-mb", type=int, default=200)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    noise_start = cpu_noise()
    results, targets = collect(args.iterations, args.bulk_mb)
    noise_end = cpu_noise()
    path = report("Network doors (local)", results, HERE / "results", {"targets": targets})
    print_targets(targets, (noise_start, noise_end), path)


if __name__ == "__main__":
    main()
