"""The OpenAI-compatible endpoint under /v1: chat front ends and scripts talk to the agent as a model."""

from .routes import router

__all__ = ["router"]
