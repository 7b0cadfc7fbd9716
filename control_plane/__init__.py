"""Hermetic's control plane: the agent loop, model router, tools, sessions, CLI and API."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hermetic-agent")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0.0.0"
