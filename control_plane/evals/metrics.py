"""Scores of a run: pass@1, the unbiased pass@k estimator, mean reward, per task and per tag, the
infrastructure's failures apart from the agent's; and a paired bootstrap comparison of two runs."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from math import comb

from pydantic import BaseModel

from .results import AttemptResult

BOOTSTRAP_SAMPLES = 2000


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k attempts drawn from n (c of them passed) passes
    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"); k > n is clipped to n."""
    k = min(k, n)
    if n == 0 or k == 0:
        return 0.0
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


class Score(BaseModel):
    """Scores over a group of tasks (one task, one tag, or all)."""

    tasks: int
    attempts: int
    """Attempts scored: those the infrastructure did not fail."""
    passed: int
    pass_at_1: float
    pass_at_k: float
    mean_reward: float
    infrastructure_failures: int
    errors: dict[str, int]


class Summary(BaseModel):
    """summary.json."""

    k: int
    overall: Score
    per_task: dict[str, Score]
    per_tag: dict[str, Score]
    prompt_tokens: int
    completion_tokens: int
    cost: float
    tool_calls: int
    seconds: float
    """Sum of the attempts' durations."""
    unreadable_tasks: dict[str, str] = {}
    """Task id -> the file and why it could not be read."""


def _score(by_task: dict[str, list[AttemptResult]], k: int) -> Score:
    scored_tasks = 0
    p1 = pk = reward = 0.0
    attempts = passed = infra = 0
    errors: Counter[str] = Counter()
    for results in by_task.values():
        errors.update(r.error_class for r in results if r.error_class)
        scored = [r for r in results if not r.infrastructure]
        infra += len(results) - len(scored)
        if not scored:
            continue
        n, c = len(scored), sum(r.passed for r in scored)
        scored_tasks += 1
        attempts, passed = attempts + n, passed + c
        p1 += pass_at_k(n, c, 1)
        pk += pass_at_k(n, c, k)
        reward += sum(r.reward for r in scored) / n
    per = max(scored_tasks, 1)
    return Score(
        tasks=len(by_task),
        attempts=attempts,
        passed=passed,
        pass_at_1=round(p1 / per, 4),
        pass_at_k=round(pk / per, 4),
        mean_reward=round(reward / per, 4),
        infrastructure_failures=infra,
        errors=dict(errors),
    )


def summarize(results: list[AttemptResult], k: int, unreadable: dict[str, str] | None = None) -> Summary:
    by_task: dict[str, list[AttemptResult]] = defaultdict(list)
    for result in results:
        by_task[result.task].append(result)
    by_tag: dict[str, dict[str, list[AttemptResult]]] = defaultdict(dict)
    for task, task_results in by_task.items():
        for tag in task_results[0].tags:
            by_tag[tag][task] = task_results
    return Summary(
        k=k,
        overall=_score(by_task, k),
        per_task={task: _score({task: rs}, k) for task, rs in sorted(by_task.items())},
        per_tag={tag: _score(tasks, k) for tag, tasks in sorted(by_tag.items())},
        prompt_tokens=sum(r.prompt_tokens for r in results),
        completion_tokens=sum(r.completion_tokens for r in results),
        cost=round(sum(r.cost for r in results), 6),
        tool_calls=sum(r.tool_calls for r in results),
        seconds=round(sum(r.duration_s for r in results), 3),
        unreadable_tasks=unreadable or {},
    )


class TaskDelta(BaseModel):
    task: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a


class Comparison(BaseModel):
    """B minus A in mean reward over the tasks both runs scored, with a 95% paired bootstrap interval."""

    tasks: list[TaskDelta]
    only_a: list[str]
    only_b: list[str]
    mean_a: float
    mean_b: float
    delta: float
    low: float
    high: float


def _mean_rewards(results: list[AttemptResult]) -> dict[str, float]:
    rewards: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if not r.infrastructure:
            rewards[r.task].append(r.reward)
    return {task: sum(v) / len(v) for task, v in rewards.items()}


def compare(a: list[AttemptResult], b: list[AttemptResult], seed: int = 0) -> Comparison:
    """Tasks are the resampled unit (attempts of one task are not independent samples)."""
    ra, rb = _mean_rewards(a), _mean_rewards(b)
    common = sorted(set(ra) & set(rb))
    deltas = [TaskDelta(task=t, a=ra[t], b=rb[t]) for t in common]
    diffs = [d.delta for d in deltas]
    n = len(diffs)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(BOOTSTRAP_SAMPLES)) if n else [0.0]
    return Comparison(
        tasks=deltas,
        only_a=sorted(set(ra) - set(rb)),
        only_b=sorted(set(rb) - set(ra)),
        mean_a=round(sum(d.a for d in deltas) / n, 4) if n else 0.0,
        mean_b=round(sum(d.b for d in deltas) / n, 4) if n else 0.0,
        delta=round(sum(diffs) / n, 4) if n else 0.0,
        low=round(means[int(0.025 * (len(means) - 1))], 4),
        high=round(means[int(0.975 * (len(means) - 1))], 4),
    )
