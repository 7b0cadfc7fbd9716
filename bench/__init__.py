"""Benchmarks: they print figures and write raw samples; tests never assert times."""
