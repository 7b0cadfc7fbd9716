"""Evaluation on verifiable tasks (Terminal-Bench 2 / Harbor layout): tasks, suites, attempts in
sandboxes, verifier rewards, pass@k and paired comparisons."""

from .metrics import Comparison, Summary, compare, pass_at_k, summarize
from .results import AttemptResult, ResultsFile, RunRecord
from .run import EvalRun, RunError, open_run, record_for_resume
from .suite import BUILTIN, Filters, Suite, SuiteError, load_suite, resolve
from .task import Task, TaskConfig, TaskError, load_task

__all__ = [
    "BUILTIN",
    "AttemptResult",
    "Comparison",
    "EvalRun",
    "Filters",
    "ResultsFile",
    "RunError",
    "RunRecord",
    "Suite",
    "SuiteError",
    "Summary",
    "Task",
    "TaskConfig",
    "TaskError",
    "compare",
    "load_suite",
    "load_task",
    "open_run",
    "pass_at_k",
    "record_for_resume",
    "resolve",
    "summarize",
]
