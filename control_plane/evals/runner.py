"""An evaluation run: every (task, attempt) pair not yet in results.jsonl, `workers` at a time, each
result appended as it ends; stopping closes the sandboxes in flight and records none of their results."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from backends import Sandbox

from .attempt import EVAL_LABEL, AttemptSetup, run_attempt
from .results import AttemptResult, ResultsFile
from .task import Task


class EvalRunner:
    def __init__(self, setup: AttemptSetup, out: Path, *, attempts: int, workers: int) -> None:
        self.setup = setup
        self.out = out
        self.attempts = attempts
        self.workers = workers
        out.mkdir(parents=True, exist_ok=True)
        self.results = ResultsFile(out / "results.jsonl")
        self._open: dict[int, Sandbox] = {}
        """Each worker thread's sandbox of the moment (closing a closed one is a no-op)."""
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        setup.logs = out / "logs"
        setup.on_sandbox = self._track
        setup.release = self._release
        self._closer: ThreadPoolExecutor | None = None

    def pending(self, tasks: list[Task]) -> list[tuple[Task, int]]:
        """The pairs still to run: a finished attempt is never run again."""
        done = {(r.task, r.attempt) for r in self.results.read()}
        return [(t, n) for t in tasks for n in range(1, self.attempts + 1) if (t.id, n) not in done]

    def run(self, tasks: list[Task], on_result: Callable[[AttemptResult], None] = lambda r: None) -> None:
        todo = self.pending(tasks)
        pool = ThreadPoolExecutor(
            max_workers=max(1, min(self.workers, len(todo) or 1)), thread_name_prefix="eval"
        )
        # A scored attempt's sandbox is removed in the background, off the next attempt's path; the run
        # ends once every removal has, and then its tasks' prepared environments go too.
        self._closer = ThreadPoolExecutor(max_workers=max(1, self.workers), thread_name_prefix="eval-close")
        self.setup.environments.expect(Counter(task.id for task, _ in todo))
        futures = [pool.submit(self._one, task, n, on_result) for task, n in todo]
        try:
            wait(futures)
            for future in futures:
                future.result()  # an error in the bookkeeping itself is not swallowed
        except BaseException:
            self.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            self._closer.shutdown(wait=True)
            self._closer = None
            self.setup.environments.close()
        pool.shutdown()

    def stop(self) -> None:
        """Abandon the attempts in flight: their sandboxes closed now, their results not recorded."""
        self._stopping.set()
        with self._guard:
            sandboxes = list(self._open.values())
        for sandbox in sandboxes:
            sandbox.close()

    def _one(self, task: Task, attempt: int, on_result: Callable[[AttemptResult], None]) -> None:
        if self._stopping.is_set():
            return
        try:
            result = run_attempt(self.setup, task, attempt)
        finally:
            with self._guard:
                self._open.pop(threading.get_ident(), None)
        if self._stopping.is_set():
            return
        self.setup.agent.scored(
            result, self.setup.labels.get(EVAL_LABEL, "")
        )  # first: a crash leaves it labelled
        self.results.append(result)
        on_result(result)

    def _release(self, sandbox: Sandbox) -> None:
        if self._closer is None:
            sandbox.close()
        else:
            self._closer.submit(sandbox.close)

    def _track(self, sandbox: Sandbox) -> None:
        with self._guard:
            self._open[threading.get_ident()] = sandbox
        if self._stopping.is_set():
            sandbox.close()
