"""Skills: Agent Skills directories the agent writes, proven by the gate before they join the library."""
