"""The agent core: the Agent that conversations share, the Conversation that runs a turn,
and what a turn uses (prompt, compression, learning, events)."""
