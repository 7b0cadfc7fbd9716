"""An injected credential's cost, local backend: `python -m bench.credentials [-n 200]` (root: it makes a
network namespace for the upstream, as the egress tests do).

From inside one sandbox, a fresh HTTPS request (CONNECT, TLS handshake, GET, answer) to the same upstream
server by two names: one with a credential (the proxy terminates TLS, adds the header, opens TLS to the
upstream) and one without (an opaque tunnel, its server name checked). Target: the median of the
injected request at most 3 ms above the opaque one's.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import tempfile
from pathlib import Path

from netns import Upstream, test_resolver  # bench/__init__ puts tests/ on the path

from backends import SandboxSpec, create_backend
from backends.network import Credential
from backends.network.proxy import egress_proxy

from .stats import Results, cpu_noise, print_targets, report

HERE = Path(__file__).resolve().parent
PROBE = """
import json, os, socket, ssl, sys, time, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
def once(host, context):
    start = time.perf_counter()
    sock = socket.create_connection((proxy.hostname, proxy.port))
    sock.sendall(b"CONNECT %s:443 HTTP/1.1\\r\\n\\r\\n" % host.encode())
    sock.recv(4096)
    tls = context.wrap_socket(sock, server_hostname=host)
    tls.sendall(b"GET /host HTTP/1.1\\r\\nHost: %s\\r\\nConnection: close\\r\\n\\r\\n" % host.encode())
    while tls.recv(65536):
        pass
    tls.close()
    return time.perf_counter() - start
n = int(sys.argv[1])
injected, opaque = ssl.create_default_context(), ssl.create_default_context(cafile="/tmp/upstream-ca.pem")
samples = {"injected": [], "opaque": []}
pairs = (("injected", "pypi.hm14.test", injected), ("opaque", "git.hm14.test", opaque))
for i in range(n + 3):
    for name, host, context in pairs:
        took = once(host, context)
        if i >= 3:
            samples[name].append(took)
print(json.dumps(samples))
"""


def collect(n: int) -> tuple[Results, list[tuple[str, str, bool]]]:
    upstream = Upstream(Path(tempfile.mkdtemp(prefix="hm14-bench-")))
    proxy = egress_proxy()
    saved = proxy.resolver, proxy.upstream_context
    os.environ["HM14_BENCH_TOKEN"] = "bench-token"
    try:
        upstream.start()
        proxy.resolver = test_resolver
        proxy.upstream_context = ssl.create_default_context(cafile=str(upstream.ca_pem))
        spec = SandboxSpec(
            network="allowlist",
            allow=["pypi.hm14.test", "git.hm14.test"],
            credentials=[
                Credential(host="pypi.hm14.test", header="Authorization", value="${HM14_BENCH_TOKEN}")
            ],
        )
        with create_backend("local").create(spec) as sb:
            sb.upload(upstream.ca_pem, "/tmp")
            sb.run("mv /tmp/ca.pem /tmp/upstream-ca.pem")
            sb.call("fs.write", {"path": "/tmp/probe.py", "content": PROBE})
            out = sb.run(f"python3 /tmp/probe.py {n}", timeout=600)
            if out["exit_code"] != 0:
                raise SystemExit(f"probe failed: {out['output']}")
            samples = json.loads(out["output"])
    finally:
        proxy.resolver, proxy.upstream_context = saved
        upstream.stop()
    results: Results = {
        "local: HTTPS request, credential injected": samples["injected"],
        "local: HTTPS request, opaque tunnel": samples["opaque"],
    }
    added = (statistics.median(samples["injected"]) - statistics.median(samples["opaque"])) * 1000
    return results, [
        ("injected credential adds <= 3 ms to a fresh HTTPS request", f"{added:.2f} ms", added <= 3)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=200)
    args = parser.parse_args()
    noise_start = cpu_noise()
    results, targets = collect(args.iterations)
    noise_end = cpu_noise()
    path = report(
        "Credentials injected at the egress proxy (local)", results, HERE / "results", {"targets": targets}
    )
    print_targets(targets, (noise_start, noise_end), path)


if __name__ == "__main__":
    main()
