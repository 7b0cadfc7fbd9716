"""Hermetic as an A2A (Agent2Agent, protocol 1.0) server inside `hermetic serve`, on the `a2a-sdk`."""
