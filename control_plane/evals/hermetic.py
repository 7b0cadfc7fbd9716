"""The `hermetic` agent in an evaluation: the real agent loop with the profile's settings, each attempt an
ordinary session (source `eval`) whose sandbox is the attempt's, in a home the learning mode chooses:

- off: a fresh, empty home per attempt (no memory, no skills carried between attempts);
- on: one home for the whole run, so what an attempt learned (memory, skills through the gate) is there
  for the next ones; the user's own library is never touched, unless `into_profile`: then that home is
  the profile's own (it starts from the profile's memory and skills, and keeps what the run learned);
- frozen: per attempt a copy of a given profile's memory and skills, its writes thrown away.

Every attempt's session is an ordinary session of the profile (source `eval`), labelled with its task,
attempt and reward once the verifier ran, so `hermetic sessions export --source eval` finds it."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

from backends import Sandbox

from ..agent.agent import Agent
from ..agent.unattended import Tally, run_until
from ..config.settings import Settings
from ..store import EvalAttemptRecord, Store
from .attempt import AgentOutcome
from .results import AttemptResult, Learning
from .task import Task

LEARNED = ("MEMORY.md", "USER.md", "skills")
"""What a home carries from one attempt to the next: the curated memory and the skill library."""
PROMPT = "{instruction}\n\n(You are in {workdir}. The task is checked when you end your turn.)"


class HermeticAgent:
    def __init__(
        self,
        settings: Settings,
        out: Path,
        learning: Learning,
        seed: Path | None = None,
        *,
        into_profile: bool = False,
    ) -> None:
        """`settings`: the profile's (model, toolsets, limits); `seed`: the home a frozen run starts from."""
        if learning == "frozen" and seed is None:
            raise ValueError("--learning frozen needs a profile to start from")
        self.out = out
        self.into_profile = into_profile
        self.learning = learning
        self.seed = seed
        self.base = settings.model_copy(  # the homes change; the database stays the profile's
            update={
                # the run's own review only when it learns; a sample of a fixed agent is reviewed by nobody
                "learning": settings.learning.model_copy(update={"enabled": learning == "on"}),
            }
        )
        self.store = Store(str(settings.database_url))
        self._shared: Agent | None = None
        self._lock = threading.Lock()

    def solve(self, task: Task, sandbox: Sandbox, workdir: str, attempt: int) -> AgentOutcome:
        agent, own = self._agent_for(task, attempt)
        try:
            return asyncio.run(self._turn(agent, task, sandbox, workdir, attempt))
        finally:
            if own:
                agent.close()

    def scored(self, result: AttemptResult, run: str) -> None:
        """Label the attempt's session with its task, attempt and reward."""
        if result.session_id:
            label = EvalAttemptRecord(
                session_id=result.session_id, run=run, task=result.task, attempt=result.attempt,
                reward=result.reward, passed=result.passed,
            )  # fmt: skip
            self.store.label_eval_attempt(label)

    def close(self) -> None:
        if self._shared is not None:
            self._shared.background.wait(120)  # the last review still writes what it learned
            self._shared.close()
        self.store.close()

    def _agent_for(self, task: Task, attempt: int) -> tuple[Agent, bool]:
        if self.learning == "on":
            with self._lock:
                if self._shared is None:
                    own = {} if self.into_profile else {"root": self.out / "home"}
                    self._shared = Agent(self.base.model_copy(update=own))
                return self._shared, False
        home = self.out / "homes" / task.id / str(attempt)
        shutil.rmtree(home, ignore_errors=True)  # a resumed attempt starts over
        home.mkdir(parents=True)
        if self.seed is not None:
            for name in LEARNED:
                source = self.seed / name
                if source.is_dir():
                    shutil.copytree(source, home / name)
                elif source.is_file():
                    shutil.copy2(source, home / name)
        return Agent(self.base.model_copy(update={"root": home})), True

    async def _turn(
        self, agent: Agent, task: Task, sandbox: Sandbox, workdir: str, attempt: int
    ) -> AgentOutcome:
        tally = Tally()
        conversation = await asyncio.to_thread(
            agent.new_conversation, title=f"eval: {task.id} #{attempt}", source="eval"
        )
        agent.sandboxes.replace(conversation.id, sandbox)  # the attempt's sandbox is the session's
        timeout = task.config.agent.timeout_sec
        try:
            prompt = PROMPT.format(instruction=task.instruction, workdir=workdir)
            end, timed_out = await run_until(conversation, prompt, tally, timeout)
        finally:
            agent.sandboxes.detach(conversation.id)  # the verifier still needs it
            await asyncio.to_thread(conversation.close)
        outcome = AgentOutcome(
            prompt_tokens=tally.prompt_tokens,
            completion_tokens=tally.completion_tokens,
            cost=round(tally.cost, 6),
            tool_calls=tally.tool_calls,
            session_id=conversation.id,
            log=[end.content, *tally.errors],
        )
        if timed_out:
            outcome.error_class, outcome.error = "agent-timeout", f"the agent ran past {timeout:g}s"
        elif end.reason == "error":
            outcome.error_class, outcome.error = (
                "model-error",
                "; ".join(tally.errors) or "the turn ended in an error",
            )
        return outcome
