"""A2A (Agent2Agent, protocol 1.0) on the `a2a-sdk`: the agent card and the run's events as task
updates. The client that sends a task to another agent is tools/a2a_client.py, beside the other tools'
clients (a tool uses it, and core may not import a surface). The HTTP side (`POST /a2a`, the task
executor over the API's live sessions) is `api/a2a_routes.py` and `api/a2a_tasks.py`, beside the API's
other surfaces."""
