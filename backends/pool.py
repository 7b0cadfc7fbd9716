"""A warm pool: per spec, a few opened sandboxes that nobody has used yet, handed out in a millisecond.

Semantics worth knowing:

- Key: the spec's JSON. Labels are part of the spec and docker fixes them at create, so a caller
  pools a spec without per-use labels (the sandbox manager leaves out the session label).
- Warm means opened (substrate up, runtime handshake done) with the "default" shell session started,
  so the first command does not pay for bash's start either; a pool's `Warmup` starts more (the browser
  image's Chromium). A sandbox is handed out once, then it belongs to the caller, who closes it (or hands
  it to `discard`, which closes it off the caller's path); it never returns to the pool.
- ttl runs from creation, as for any sandbox (docker's `sleep ttl` and its expiry label are fixed at
  create). So that a caller still gets most of it, a warm sandbox is retired after 10% of its ttl, and
  before what its `Warmup` started stops by itself (`Warmup.lasts`).
- Idle reaper: a warm sandbox is closed after `idle_seconds` in the pool (or the 10% of ttl above).
  A spec stays warm, retired ones replaced, while it was asked for (acquire or prefill) within
  `idle_seconds`; after that it goes dormant until it is asked for again. Each ask is owed one refill
  however late the spec's thread gets to it.
- Crash: warm sandboxes carry the backend's usual labels (docker: org.hermetic.managed and the
  owner's pid), so the orphan reaper removes them after the control plane dies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential_jitter

from .base import Backend, Sandbox
from .spec import SandboxSpec

log = logging.getLogger("hermetic.backends.pool")

TTL_SHARE_IN_POOL = 0.1
"""Share of its ttl a sandbox may spend warm in the pool before it is retired."""
BACKOFF_MAX = 60.0
"""Longest wait between attempts of a failing refill (they start at about half a second, doubling)."""
JOIN_SECONDS = 60.0
"""How long close() waits for a refill in flight (one sandbox create) to finish and be removed."""
LASTS_MARGIN = 0.9
"""Share of `Warmup.lasts` after which a warm sandbox is retired, so what it started is still up."""


@dataclass(frozen=True)
class Warmup:
    """What a pool starts in each warm sandbox beyond its default shell, e.g. the browser."""

    start: Callable[[Sandbox], None]
    """Called on the refill thread once the sandbox is open; an exception discards the sandbox."""
    lasts: float | None = None
    """Seconds what `start` started stays up unused (None: for good)."""


@dataclass
class _Slot:
    """The warm sandboxes of one spec, and when that spec was last asked for."""

    spec: SandboxSpec
    max_age: float
    last_demand: float
    ready: deque[tuple[Sandbox, float]] = field(default_factory=deque)
    """(sandbox, monotonic time it became warm), oldest first."""
    retry_now: bool = False
    """Set when a create just succeeded elsewhere: a refill waiting out its backoff tries again now."""
    owed: bool = False
    """Set by each demand, cleared when a refill starts: a demand gets its refill even when this slot's
    thread wakes after `idle_seconds` (a loaded machine), which recency alone would call no demand."""
    thread: threading.Thread | None = None


class WarmPool:
    """Keeps up to `size` warm sandboxes per spec of `backend`; see the module's docstring."""

    def __init__(
        self, backend: Backend, size: int, idle_seconds: float, warmup: Warmup | None = None
    ) -> None:
        if size < 1 or idle_seconds <= 0:
            raise ValueError(f"a warm pool needs size >= 1 and idle_seconds > 0 (got {size}, {idle_seconds})")
        self.backend = backend
        self.size = size
        self.idle_seconds = idle_seconds
        self.warmup = warmup
        self._slots: dict[str, _Slot] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._closer = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"pool-{backend.name}-discard")

    # -- what callers use -----------------------------------------------------------------

    def prefill(self, spec: SandboxSpec) -> None:
        """Start warming `spec` in the background (and keep it warm while it is asked for)."""
        with self._cond:
            if not self._closed:
                self._demand(spec)

    def acquire(self, spec: SandboxSpec) -> Sandbox:
        """A warm sandbox of `spec`, else one created now; the pool refills in the background.

        Raises what the backend's create raises (BackendUnavailable, UnsupportedSpec, ...)."""
        if spec.from_snapshot:  # made for one caller from one snapshot: never worth keeping warm
            return self.backend.create(spec)
        slot: _Slot | None = None
        while True:
            with self._cond:
                if self._closed:  # never worse than no pool
                    break
                slot = self._demand(spec)
                if not slot.ready:
                    break
                sandbox, _ = slot.ready.popleft()
                self._cond.notify_all()  # the refill
            if sandbox.responsive():
                return sandbox
            log.warning("warm sandbox %s died in the pool; discarding it", sandbox.id)
            sandbox.close()
        sandbox = self.backend.create(spec)
        if slot is not None:
            with self._cond:  # whatever made refills fail is gone: retry without waiting out the backoff
                slot.retry_now = True
                self._cond.notify_all()
        return sandbox

    def discard(self, sandbox: Sandbox) -> None:
        """Close a sandbox this pool handed out, on a background thread: its teardown (a container's
        removal) is off the caller's path. close() waits for the ones still closing."""
        try:
            self._closer.submit(sandbox.close)
        except RuntimeError:  # the pool closed meanwhile: close it here
            sandbox.close()

    def wait_ready(self, spec: SandboxSpec, timeout: float | None = None) -> bool:
        """Block until `spec` has `size` warm sandboxes; False at timeout or when the pool closes."""
        key = spec.model_dump_json()

        def full() -> bool:
            slot = self._slots.get(key)
            return slot is not None and len(slot.ready) >= self.size

        with self._cond:
            return self._cond.wait_for(lambda: self._closed or full(), timeout) and not self._closed

    def warm_count(self, spec: SandboxSpec) -> int:
        """How many warm sandboxes of `spec` the pool holds now."""
        with self._cond:
            slot = self._slots.get(spec.model_dump_json())
            return len(slot.ready) if slot else 0

    def close(self) -> None:
        """Destroy every warm sandbox and stop the refills (a create in flight is finished, then removed).
        Sandboxes already handed out are the callers' to close."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            warm = [sandbox for slot in self._slots.values() for sandbox, _ in slot.ready]
            for slot in self._slots.values():
                slot.ready.clear()
            threads = [slot.thread for slot in self._slots.values() if slot.thread is not None]
            self._cond.notify_all()
        for sandbox in warm:
            sandbox.close()
        for thread in threads:
            thread.join(JOIN_SECONDS)
            if thread.is_alive():
                log.warning("pool refill %s did not finish within %s s", thread.name, JOIN_SECONDS)
        self._closer.shutdown(wait=True)

    # -- the refill and reaper thread, one per spec -------------------------------------------

    def _demand(self, spec: SandboxSpec) -> _Slot:
        """The spec's slot, marked as asked for now; its thread started on first demand. Holds _cond."""
        key = spec.model_dump_json()
        slot = self._slots.get(key)
        now = time.monotonic()
        if slot is None:
            max_age = min(self.idle_seconds, spec.ttl * TTL_SHARE_IN_POOL if spec.ttl else self.idle_seconds)
            if self.warmup is not None and self.warmup.lasts is not None:
                max_age = min(max_age, self.warmup.lasts * LASTS_MARGIN)
            slot = self._slots[key] = _Slot(spec, max_age, now)
            slot.thread = threading.Thread(
                target=self._tend,
                args=(slot,),
                name=f"pool-{self.backend.name}-{len(self._slots)}",
                daemon=True,
            )
            slot.thread.start()
        slot.last_demand = now
        slot.owed = True
        self._cond.notify_all()
        return slot

    def _wanted(self, slot: _Slot, now: float) -> bool:
        recent = slot.owed or now - slot.last_demand < self.idle_seconds
        return not self._closed and len(slot.ready) < self.size and recent

    def _tend(self, slot: _Slot) -> None:
        """Retire warm sandboxes past their age, and refill while the spec is in demand."""
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    stale = []
                    while slot.ready and now - slot.ready[0][1] >= slot.max_age:
                        stale.append(slot.ready.popleft()[0])
                    wanted = self._wanted(slot, now)
                    if stale or wanted or self._closed:
                        break
                    oldest = slot.ready[0][1] + slot.max_age - now if slot.ready else None
                    self._cond.wait(oldest)
            for sandbox in stale:
                log.info("closing warm sandbox %s: unused for %.0f s", sandbox.id, slot.max_age)
                sandbox.close()
            if self._closed:
                return
            if wanted:
                self._refill(slot)

    def _refill(self, slot: _Slot) -> None:
        """Warm one sandbox, retrying failures with backoff while the spec is in demand."""
        retrying = Retrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential_jitter(multiplier=0.5, max=BACKOFF_MAX),
            stop=lambda state: not self._wanted(slot, time.monotonic()),
            sleep=lambda seconds: self._backoff(slot, seconds),
            before_sleep=self._log_failure,
            retry_error_callback=lambda state: None,  # stopped: closed, or nobody asks any more
        )
        sandbox = retrying(self._warm, slot)
        if sandbox is None:
            return
        with self._cond:
            if not self._closed:
                slot.ready.append((sandbox, time.monotonic()))
                self._cond.notify_all()
                return
        sandbox.close()

    def _warm(self, slot: _Slot) -> Sandbox | None:
        with self._cond:
            if not self._wanted(slot, time.monotonic()):
                return None
            slot.owed = False  # retries after a failure go on only while the spec is asked for
        sandbox = self.backend.create(slot.spec)
        try:
            sandbox.runtime.shell_open(session="default", call_timeout=30)
            if self.warmup is not None:
                self.warmup.start(sandbox)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def _backoff(self, slot: _Slot, seconds: float) -> None:
        """Wait out a retry delay; close() or a successful create elsewhere cuts it short."""
        with self._cond:
            slot.retry_now = False
            self._cond.wait_for(lambda: self._closed or slot.retry_now, seconds)

    def _log_failure(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning("warming a %s sandbox failed (%s); retrying in %.1f s", self.backend.name, exc, delay)
