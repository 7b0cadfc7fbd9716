"""The Agent Client Protocol surface (`hermetic acp`): the agent for editors over stdio."""
