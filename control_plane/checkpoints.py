"""The agent's checkpoints: a snapshot of a session's sandbox taken before a tool call that writes,
at most once per turn, listed and restored by number, and copied into a forked session.

A checkpoint is an ordinary snapshot (backends/snapshots.py) owned by the session, so retention keeps
the newest `snapshots.keep` of each session. Its number (meta "n") never changes, even when older ones
are pruned. When nothing in the workspace changed since the latest checkpoint (same fingerprint of
names, sizes, modes and mtimes), no new copy is made. Rolling back gives the session a sandbox started
from the checkpoint (now if it has one, else when it next needs one) and tells the agent so with its
next tool result. Running processes are never part of a checkpoint.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from backends import SandboxError
from backends.snapshots import Snapshot

from .config.settings import SnapshotSettings
from .sandbox_manager import SandboxManager, session_spec

log = logging.getLogger(__name__)

FILE_TOOLS = frozenset({"write_file", "patch"})
TERMINAL_TOOLS = frozenset({"terminal"})
KIND = "checkpoint"


class NoSuchCheckpoint(LookupError):
    """The session has no checkpoint of that number; says which it has."""


class Checkpoints:
    def __init__(self, sandboxes: SandboxManager, settings: SnapshotSettings) -> None:
        self.sandboxes = sandboxes
        self.settings = settings

    def writes(self, tool: str) -> bool:
        """Whether a call of this tool is checkpointed before it runs."""
        return tool in FILE_TOOLS or (self.settings.checkpoint_terminal and tool in TERMINAL_TOOLS)

    def before_tool(self, session_id: str, tool: str, turn_state: dict[str, Any]) -> Snapshot | None:
        """Checkpoint the session's sandbox before `tool` runs, the first time this turn; returns the
        checkpoint (the latest one when nothing changed since), or None when none was due."""
        if not self.settings.checkpoints or not self.writes(tool) or turn_state.get("checkpointed"):
            return None
        turn_state["checkpointed"] = True
        sandbox = self.sandboxes.get(session_id)
        fingerprint = sandbox.runtime.fs_fingerprint(call_timeout=60)["fingerprint"]
        taken = self.list(session_id)
        if taken and taken[-1].meta.get("fingerprint") == fingerprint:
            return taken[-1]
        n = int(taken[-1].meta["n"]) + 1 if taken else 1
        checkpoint = sandbox.snapshot(
            label=f"checkpoint {n}: before {tool}",
            owner=session_id,
            meta={"kind": KIND, "n": str(n), "tool": tool, "fingerprint": fingerprint},
        )
        self.sandboxes.reap_snapshots()
        return checkpoint

    def before_tool_call(
        self, session_id: str, tool: str, turn_state: dict[str, Any], notify: Callable[[str], None]
    ) -> None:
        """before_tool for the agent loop: a failed checkpoint is told to the user, and the call goes on."""
        try:
            self.before_tool(session_id, tool, turn_state)
        except SandboxError as exc:
            log.warning("session %s: checkpoint before %s failed: %s", session_id, tool, exc)
            notify(f"no checkpoint was taken before this {tool} call: {exc}")

    def list(self, session_id: str) -> list[Snapshot]:
        """The session's checkpoints, by number."""
        found = [s for s in self.sandboxes.snapshots.list(owner=session_id) if s.meta.get("kind") == KIND]
        return sorted(found, key=lambda s: int(s.meta.get("n", "0")))

    def get(self, session_id: str, n: int) -> Snapshot:
        for checkpoint in self.list(session_id):
            if checkpoint.meta.get("n") == str(n):
                return checkpoint
        have = ", ".join(c.meta["n"] for c in self.list(session_id)) or "none"
        raise NoSuchCheckpoint(f"session {session_id} has no checkpoint {n} (it has: {have})")

    def rollback(self, session_id: str, n: int) -> Snapshot:
        """Give the session a sandbox started from checkpoint `n`: now if it has a sandbox in this
        process, else when it next needs one. Raises NoSuchCheckpoint, SnapshotError."""
        checkpoint = self.get(session_id, n)
        when = datetime.datetime.fromtimestamp(checkpoint.created).strftime("%Y-%m-%d %H:%M:%S")
        notice = (
            f"your sandbox was rolled back to checkpoint {n} (taken {when}, before a "
            f"{checkpoint.meta.get('tool', 'tool')} call): the workspace and the shell sessions' directories "
            "and variables are as they were then, everything changed since is gone, and no processes run"
        )
        if self.sandboxes.peek(session_id) is None:
            self.sandboxes.start_next_from(session_id, checkpoint.id, notice)
            return checkpoint
        spec = session_spec(self.sandboxes.settings, session_id).model_copy(
            update={"from_snapshot": checkpoint.id}
        )
        self.sandboxes.replace(session_id, self.sandboxes.backend.create(spec), notice)
        return checkpoint

    def fork_sandbox(self, source: str, target: str) -> str:
        """Give session `target` a copy of session `source`'s sandbox: a fork of the live one, else its
        latest checkpoint when it next needs one. Returns what was done, for people."""
        live = self.sandboxes.peek(source)
        notice = f"this session was forked from session {source}; its sandbox is a copy of that one's"
        if live is not None:
            try:
                self.sandboxes.replace(target, live.fork(), notice)
                return f"forked from its running sandbox {live.id}"
            except SandboxError as exc:
                log.warning(
                    "session %s: forking sandbox %s failed (%s); using its checkpoint", source, live.id, exc
                )
        taken = self.list(source)
        if not taken:
            return "starts fresh (the session has no running sandbox and no checkpoint to copy)"
        self.sandboxes.start_next_from(
            target, taken[-1].id, notice + f" (its checkpoint {taken[-1].meta['n']})"
        )
        return f"starts from checkpoint {taken[-1].meta['n']} of session {source}"
