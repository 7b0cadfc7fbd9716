"""The agent's tools, callable from a script that execute_code runs.

    from hermetic_tools import terminal, read_file
    listing = terminal("ls -la")          # or terminal(command="ls -la")
    print(listing.ok, listing.exit_code, listing)

Each call goes to the agent over the sandbox runtime's channel (no network) and through the same
checks as a call the model makes itself. A result is the text the model would have seen (a str) with
`.ok` and `.exit_code`. When the turn's tool-call budget is spent, a call raises BudgetSpent.
"""

import json
import os
import threading

_TOOLS = json.loads(os.environ.get("HERMETIC_TOOLS", "{}"))
_lock = threading.Lock()
_channel = None


class ToolRefused(Exception):
    """The tool may not be called from a script (clarify, delegate), or does not exist."""


class BudgetSpent(Exception):
    """The turn's budget of tool calls is spent: no further call will run."""


class Result(str):
    """A tool's result text, with whether it succeeded and its exit code (terminal)."""

    ok = True
    exit_code = None


def _connect():
    global _channel
    if _channel is None:
        fds = os.environ.get("HERMETIC_TOOLS_FDS")
        if not fds:
            raise RuntimeError("hermetic_tools works only inside a script run by execute_code")
        calls, replies = (int(fd) for fd in fds.split(","))
        _channel = (os.fdopen(calls, "wb"), os.fdopen(replies, "rb"))
    return _channel


def call(name, *args, **arguments):
    """Call the tool `name`; positional arguments fill its parameters in order."""
    params = _TOOLS.get(name)
    if params is None:
        raise ToolRefused("no tool named %r here; these are: %s" % (name, ", ".join(sorted(_TOOLS))))
    if len(args) > len(params):
        raise TypeError("%s takes at most %d positional arguments" % (name, len(params)))
    arguments.update(zip(params, args))
    with _lock:
        out, into = _connect()
        out.write(json.dumps({"name": name, "arguments": arguments}).encode() + b"\n")
        out.flush()
        line = into.readline()
    if not line:
        raise RuntimeError("the agent stopped answering tool calls")
    reply = json.loads(line)
    if reply.get("refused"):
        raise ToolRefused(reply["content"])
    if reply.get("spent"):
        raise BudgetSpent(reply["content"])
    result = Result(reply["content"])
    result.ok = bool(reply.get("ok"))
    result.exit_code = reply.get("exit_code")
    return result


def _bind(name):
    def tool(*args, **arguments):
        return call(name, *args, **arguments)

    tool.__name__ = name
    tool.__doc__ = "Call the %s tool: %s(%s)" % (name, name, ", ".join(_TOOLS[name]))
    return tool


def __getattr__(name):
    if name in _TOOLS:
        return _bind(name)
    raise AttributeError("hermetic_tools has no tool %r; these are: %s" % (name, ", ".join(sorted(_TOOLS))))


def __dir__():
    return sorted(list(_TOOLS) + ["call", "Result", "ToolRefused", "BudgetSpent"])
