"""Batch runs: a file of prompts run in parallel, each its own session and sandbox, results as JSON lines."""

from .prompts import BatchError, BatchItem, finished_ids, parse_prompts, read_prompts
from .runner import BatchResult, BatchRunner, Summary, batch_settings, write_summary

__all__ = [
    "BatchError",
    "BatchItem",
    "BatchResult",
    "BatchRunner",
    "Summary",
    "batch_settings",
    "finished_ids",
    "parse_prompts",
    "read_prompts",
    "write_summary",
]
