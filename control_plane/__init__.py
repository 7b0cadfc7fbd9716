"""Hermetic's control plane: settings, CLI, and (later) the agent loop, memory and skills."""
