"""The HTTP API (FastAPI): a surface over the core, with bearer tokens bound to a profile."""
