"""Batch runs: a file of prompts run in parallel, each its own session and sandbox, results as JSON lines."""

from .prompts import BatchError, BatchItem, finished_ids, read_prompts
from .runner import BatchResult, BatchRunner, Summary, write_summary

__all__ = [
    "BatchError",
    "BatchItem",
    "BatchResult",
    "BatchRunner",
    "Summary",
    "finished_ids",
    "read_prompts",
    "write_summary",
]
