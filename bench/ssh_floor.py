"""Where the ssh round trip's floor is: `python -m bench.ssh_floor [-n 1000]`.

One sample of each in turn, in one process (a burst of load on a shared machine hits all of them):

- our `true` round trip over the ssh backend (paramiko, as a sandbox runs it);
- the same runtime copy on the same sshd behind an OpenSSH client's byte stream (`ssh` started once,
  spoken to over its pipes): what swapping paramiko for the `ssh` binary could reach;
- our local backend: the runtime's own round trip, with no ssh at all, which no transport removes;
- the floor: a persistent bash over one OpenSSH session.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from sshd import start_sshd

import sandboxes
from backends import SandboxSpec, create_backend
from backends.channel import Channel, PipeTransport
from backends.runtime_client import Runtime
from backends.ssh import SSHSandbox
from backends.sshhost import BOOT

from .roundtrip import PersistentBash
from .stats import Results, as_figure, cpu_noise, print_targets, report

HERE = Path(__file__).resolve().parent
OURS = "hermetic ssh: `true` round trip"
OPENSSH = "our runtime over an OpenSSH client's stream: `true` round trip"
LOCAL = "hermetic local: `true` round trip"
FLOOR = "floor: persistent bash over one ssh session"


def openssh_channel(sandbox: SSHSandbox, argv: Callable[[str], list[str]]) -> tuple[Channel, PipeTransport]:
    """The runtime `sandbox` uses, started again through the `ssh` binary in the same workspace."""
    cache = sandbox.run("cd ~/.cache/hermetic && pwd -P")["output"].strip()
    command = shlex.join(["python3", "-c", BOOT, f"{cache}/{sandboxes.code_hash()}"])
    proc = subprocess.Popen(argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    transport = PipeTransport(proc, "openssh")
    workspace = sandbox.workspace
    env = {"HERMETIC_WORKSPACE": workspace, "HERMETIC_ROOTS": f"{workspace}:/tmp"}
    settings = json.dumps({"env": env, "cwd": workspace, "path": []}).encode()
    transport.send(b"%016d" % len(settings) + settings)
    channel = Channel(transport, "openssh")
    channel.handshake()
    return channel, transport


def collect(n: int) -> Results:
    server = start_sshd()
    ours = create_backend("ssh", server.config()).create(SandboxSpec(network="full"))
    local = create_backend("local").create(SandboxSpec())
    bash = PersistentBash(server.ssh_argv("bash"))
    assert isinstance(ours, SSHSandbox)
    channel, transport = openssh_channel(ours, lambda command: server.ssh_argv(command))
    over_openssh = Runtime(channel.call)
    figures: dict[str, Callable[[], object]] = {
        OURS: lambda: ours.run("true"),
        OPENSSH: lambda: over_openssh.shell_run(command="true", timeout=120.0, limit=ours.spec.output_limit),
        LOCAL: lambda: local.run("true"),
        FLOOR: lambda: bash.run("true"),
    }
    samples: dict[str, list[float]] = {name: [] for name in figures}
    try:
        for _ in range(3):  # warm up
            for fn in figures.values():
                fn()
        for _ in range(n):
            for name, fn in figures.items():
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    finally:
        channel.close()
        transport.proc.wait(10)
        for close in (ours.close, local.close, bash.close, server.stop):
            close()
    return dict(samples)


def median(results: Results, name: str) -> float:
    return statistics.median(as_figure(results[name]).samples)


def targets(results: Results) -> list[tuple[str, str, bool]]:
    floor = median(results, FLOOR)
    rows = []
    for name, what in ((OURS, "ssh backend"), (OPENSSH, "an OpenSSH client's stream"), (LOCAL, "no ssh")):
        ratio = median(results, name) / floor
        rows.append((f"{what}: `true` within 2x of the ssh floor (issue 38)", f"{ratio:.2f}x", ratio <= 2))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=1000)
    args = parser.parse_args()
    noise_start = cpu_noise()
    results = collect(args.iterations)
    noise_end = cpu_noise()
    rows = targets(results)
    path = report(
        "The ssh round trip and its floors (interleaved)", results, HERE / "results", {"targets": rows}
    )
    print_targets(rows, (noise_start, noise_end), path)


if __name__ == "__main__":
    main()
