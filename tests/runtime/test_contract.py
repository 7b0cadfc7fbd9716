"""The runtime's contract and the runtime agree: every method it dispatches has declared params and
result shapes and a client method, and nothing is declared that it does not dispatch."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from backends.runtime_client import Runtime
from sandboxes import contract, contract_tools

REPO = Path(__file__).resolve().parents[2]

# Builds the runtime's own dispatch table and reads each handler's parameters as the runtime checks
# them (server._check_params), in a process of its own: a Server starts its managers.
DISPATCHED = r"""
import json, os, sys
from sandboxes.server import Server
server = Server(*os.pipe())
out = {}
for method, handler in server.methods.items():
    target = getattr(handler, "target", None)
    fn = target or handler
    skip = (0 if target else 1) + (1 if hasattr(fn, "__self__") else 0)
    code = fn.__code__
    names = code.co_varnames[skip : code.co_argcount + code.co_kwonlyargcount]
    required = code.co_varnames[skip : code.co_argcount - len(fn.__defaults__ or ())]
    out[method] = {"names": sorted(names), "required": sorted(required)}
sys.stdout.write(json.dumps(out))
sys.stdout.flush()
os._exit(0)
"""


@pytest.fixture(scope="module")
def dispatched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[str]]]:
    where = tmp_path_factory.mktemp("runtime")
    done = subprocess.run(
        [sys.executable, "-c", DISPATCHED],
        cwd=where,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HERMETIC_WORKSPACE": str(where)},
        capture_output=True,
        timeout=60,
        check=True,
    )
    return dict(json.loads(done.stdout))


def shape(method: str, kind: str) -> Any:
    name = "".join(part.capitalize() for part in method.replace(".", "_").split("_")) + kind
    found = getattr(contract, name, None) or getattr(contract_tools, name, None)
    assert found is not None, f"{method} has no declared {name}"
    return found


def test_the_declared_methods_are_the_dispatched_ones(dispatched: dict[str, Any]) -> None:
    assert sorted(typing.get_args(contract.Method)) == sorted(dispatched)


def test_each_methods_params_are_the_ones_its_handler_accepts(dispatched: dict[str, Any]) -> None:
    for method, handler in dispatched.items():
        params = shape(method, "Params")
        assert sorted(params.__annotations__) == handler["names"], method
        assert sorted(params.__required_keys__) == handler["required"], method


def test_each_method_declares_a_result(dispatched: dict[str, Any]) -> None:
    for method in dispatched:
        result = shape(method, "Result")
        options = typing.get_args(result) or (result,)  # script.start/reply: one of two events
        assert all(typing.is_typeddict(option) for option in options), method


def test_the_client_has_one_method_per_runtime_method(dispatched: dict[str, Any]) -> None:
    public = sorted(name for name in vars(Runtime) if not name.startswith("_"))
    assert public == sorted(method.replace(".", "_") for method in dispatched)
    for method in dispatched:
        assert method in getattr(Runtime, method.replace(".", "_")).__code__.co_consts, method


def test_the_shapes_load_on_the_runtimes_oldest_python() -> None:
    """No `X | Y`, no typing.NotRequired at run time: python3 >= 3.9 is what a sandbox may have."""
    oldest = sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))
    if not oldest:
        pytest.skip("no python3.9 here (pyenv's), the runtime's oldest supported Python")
    done = subprocess.run(
        [str(oldest[0]), "-c", "import sandboxes.contract, sandboxes.contract_tools"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
