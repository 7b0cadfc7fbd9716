"""Curated memory: MEMORY.md and USER.md with hard limits, threat-scanned on every write and load."""
