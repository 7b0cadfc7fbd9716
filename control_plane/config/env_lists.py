"""A list setting given as one environment variable: JSON, or names separated by commas."""

from __future__ import annotations

import json
from typing import Any


def comma_list(value: Any) -> Any:
    """An environment variable's list: JSON, or names separated by commas."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        return json.loads(value)
    return [part.strip() for part in value.split(",") if part.strip()]
