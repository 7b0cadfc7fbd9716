"""Sessions exported as training trajectories: selection, redaction, quality filters, formats."""

from .export import export
from .formats import CHATML_TEMPLATE, FORMATS
from .quality import REASONS, Quality
from .reader import Selection, Trajectory, parse_since, read

__all__ = [
    "CHATML_TEMPLATE",
    "FORMATS",
    "REASONS",
    "Quality",
    "Selection",
    "Trajectory",
    "export",
    "parse_since",
    "read",
]
