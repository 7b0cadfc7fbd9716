"""The python tool's stateful kernel: one Jupyter kernel (ipykernel) per sandbox, driven with
jupyter_client over unix sockets (no network needed). Both come from the image (Debian's
python3-ipykernel); the runtime's stdlib-only core never imports this module's dependencies until a
cell runs, and without them a cell is a readable error."""

from __future__ import annotations

import base64
import os
import queue
import shutil
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from .protocol import KERNEL_UNAVAILABLE, RpcError

if TYPE_CHECKING:  # the shapes are for mypy: importing them would cost the runtime's start-up
    from .contract_tools import KernelRestartResult, KernelShutdownResult

IDLE_WAIT = 5.0
"""Seconds to wait for a kernel to settle after an interrupt."""
IMAGE_TYPES = {"image/png": "png", "image/svg+xml": "svg", "image/jpeg": "jpg"}
TEXT_TYPES = ("text/markdown", "text/html", "text/latex", "application/json", "text/plain")


class Kernel:
    """The sandbox's kernel: started on the first cell, again after it died or a restart."""

    def __init__(self, workspace: str, env: dict[str, str]) -> None:
        self._workspace = workspace
        self._env = dict(env, PYDEVD_DISABLE_FILE_VALIDATION="1")
        self._lock = threading.Lock()
        self._km: Any = None
        self._kc: Any = None
        self._dir = ""

    def methods(self) -> dict[str, Callable[..., Any]]:
        return {"kernel.run": self.run, "kernel.restart": self.restart, "kernel.shutdown": self.shutdown}

    def run(self, req: Any, code: str, timeout: float = 60.0, figures: str = "figures") -> dict[str, Any]:
        """Run one cell; its outputs in order, images saved under `figures` (relative to the workspace).
        On timeout the kernel is interrupted and keeps its state."""
        with self._lock:
            started = self._ensure()
            kc = self._kc
            msg_id = kc.execute(code, store_history=True, allow_stdin=False)
            outputs: list[dict[str, Any]] = []
            deadline = time.monotonic() + float(timeout)
            status, count = "ok", None
            while True:
                left = deadline - time.monotonic()
                if left <= 0 and status != "timeout":
                    status = "timeout"
                    self._km.interrupt_kernel()
                    deadline = time.monotonic() + IDLE_WAIT
                    continue
                if left <= 0:
                    break  # interrupted and still busy: the caller may restart it
                try:
                    msg = kc.get_iopub_msg(timeout=min(left, 0.5))
                except queue.Empty:
                    if not self._km.is_alive():
                        status = "died"
                        self._stop()
                        break
                    continue
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "status" and content["execution_state"] == "idle":
                    break
                if kind == "error" and status == "ok":
                    status = "error"
                if kind == "execute_result":
                    count = content.get("execution_count")
                output = _output(kind, content, figures, self._workspace, len(outputs))
                if output is not None:
                    outputs.append(output)
            return {"status": status, "outputs": outputs, "execution_count": count, "started": started}

    def restart(self, req: Any) -> KernelRestartResult:
        with self._lock:
            self._stop()
            self._ensure()
        return {"restarted": True}

    def shutdown(self, req: Any = None) -> KernelShutdownResult:
        with self._lock:
            was = self._km is not None
            self._stop()
        return {"stopped": was}

    def _ensure(self) -> bool:
        """Start the kernel unless it runs; True when this call started it."""
        if self._km is not None and self._km.is_alive():
            return False
        self._stop()
        try:
            from jupyter_client.manager import KernelManager
        except ImportError as exc:
            raise RpcError(
                KERNEL_UNAVAILABLE,
                "this sandbox has no Jupyter kernel (%s): its image needs ipykernel "
                "(Debian: apt-get install python3-ipykernel; or pip install ipykernel)" % exc,
            ) from exc
        self._dir = tempfile.mkdtemp(prefix="hermetic-kernel-")
        km = KernelManager(
            kernel_name="python3",
            connection_file=os.path.join(self._dir, "kernel.json"),
            transport="ipc",
            ip=os.path.join(self._dir, "ipc"),
        )
        try:
            ipython = os.path.join(self._dir, "ipython")  # its history and profile: not in the user's home
            km.start_kernel(cwd=self._workspace, env=dict(self._env, IPYTHONDIR=ipython))
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
        except Exception as exc:  # no python3 kernelspec, or it died starting
            km.shutdown_kernel(now=True)
            raise RpcError(KERNEL_UNAVAILABLE, "the Python kernel did not start: %s" % exc) from exc
        self._km, self._kc = km, kc
        return True

    def _stop(self) -> None:
        if self._kc is not None:
            self._kc.stop_channels()
        if self._km is not None:
            self._km.shutdown_kernel(now=True)
        self._km = self._kc = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""


def _output(
    kind: str, content: dict[str, Any], figures: str, workspace: str, n: int
) -> dict[str, Any] | None:
    """One iopub message as a typed output: stream text, an error, or rich data (text forms kept,
    images written to files)."""
    if kind == "stream":
        return {"type": "stream", "name": content.get("name", "stdout"), "text": content.get("text", "")}
    if kind == "error":
        return {
            "type": "error",
            "ename": content.get("ename", ""),
            "evalue": content.get("evalue", ""),
            "traceback": content.get("traceback", []),
        }
    if kind not in ("execute_result", "display_data"):
        return None
    data = content.get("data", {})
    out: dict[str, Any] = {"type": "result" if kind == "execute_result" else "display", "data": {}}
    for mime in TEXT_TYPES:
        if isinstance(data.get(mime), str):
            out["data"][mime] = data[mime]
        elif mime == "application/json" and mime in data:
            out["data"][mime] = repr(data[mime])
    for mime, ext in IMAGE_TYPES.items():
        if mime in data:
            out["image"] = _save(data[mime], mime, ext, figures, workspace, n)
            break
    return out


def _save(value: Any, mime: str, ext: str, figures: str, workspace: str, n: int) -> dict[str, Any]:
    raw = value.encode("utf-8") if mime == "image/svg+xml" else base64.b64decode(value)
    where = os.path.join(workspace, figures)
    os.makedirs(where, exist_ok=True)
    name = "figure-%d-%d.%s" % (int(time.time() * 1000), n, ext)
    with open(os.path.join(where, name), "wb") as fh:
        fh.write(raw)
    return {"mime": mime, "path": os.path.join(figures, name), "bytes": len(raw)}
