"""Reaching a model: the litellm router with retries and fallbacks, and the scripted
OpenAI-compatible server for tests and the demo."""
