"""ruff and mypy, the import graph (no cycles between modules nor between packages, arrows only down the
house plan, the event vocabulary at the bottom) and module size, so that CI enforces them."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("tool", [["ruff", "check", "."], ["ruff", "format", "--check", "."], ["mypy"]])
def test_code_is_clean(tool: list[str]) -> None:
    if shutil.which(tool[0]) is None and not Path(sys.executable).with_name(tool[0]).exists():
        pytest.fail(f"{tool[0]} is not installed: pip install -e '.[dev]'")
    exe = (
        str(Path(sys.executable).with_name(tool[0]))
        if Path(sys.executable).with_name(tool[0]).exists()
        else tool[0]
    )
    done = subprocess.run([exe, *tool[1:]], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


PACKAGES = ("control_plane", "backends", "sandboxes")
MAX_LINES = 500
SURFACES = ("control_plane.cli", "control_plane.api", "control_plane.gateway", "control_plane.mcp")
SURFACES += ("control_plane.acp",)
SURFACES += ("control_plane.scheduler", "control_plane.batch")  # unattended work drives the agent too
SURFACES += ("control_plane.evals",)  # evaluation runs drive agents like batch runs
SURFACES += ("control_plane.a2a",)  # other agents delegate to this one over A2A
CORE = (
    "control_plane.events",
    "control_plane.agent",
    "control_plane.models",
    "control_plane.memory",
    "control_plane.safety",
    "control_plane.store",
    "control_plane.recall",
    "control_plane.skills",
    "control_plane.tools",
    "control_plane.trajectories",
    "control_plane.config",
    "control_plane.sandbox_manager",
    "control_plane.doctor",
    "control_plane.sizes",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The absolute names one `from X import a, b` statement may refer to (X itself and X.a, X.b)."""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return [target, *(f"{target}.{alias.name}" for alias in node.names)]


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (anywhere in the file, TYPE_CHECKING blocks included)."""
    files = {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                candidates = _resolve(name, path.name == "__init__.py", node)
            else:
                continue
            for cand in candidates:
                # the longest known module this name denotes (a package's __init__ counts as the package)
                while cand and cand not in files:
                    cand = cand.rpartition(".")[0]
                if cand and cand != name:
                    edges.add(cand)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_no_import_cycles() -> None:
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def package_of(module: str) -> str:
    """The package a module counts in for the layering: each of control_plane's subpackages
    (control_plane.api.openai is control_plane.api) and top-level modules (control_plane.sizes);
    backends and sandboxes each as a whole."""
    parts = module.split(".")
    if parts[0] != "control_plane":
        return parts[0]
    if len(parts) > 1 and (REPO / parts[0] / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph seen from above: package -> the other packages its modules import."""
    packages: dict[str, set[str]] = {}
    for src, dsts in graph.items():
        edges = packages.setdefault(package_of(src), set())
        edges.update(package_of(dst) for dst in dsts)
        edges.discard(package_of(src))
    return packages


def test_no_package_cycles() -> None:
    """Modules may import each other acyclically and still tie their packages in a knot (agent.loop ->
    models.router -> agent.events): then no package can be read, tested or moved without the other."""
    graph = import_graph()
    knots = []
    for cycle in _cycles(package_graph(graph)):
        ties = sorted(
            f"{src} -> {dst}"
            for src, dsts in graph.items()
            for dst in dsts
            if package_of(src) in cycle and package_of(dst) in cycle and package_of(src) != package_of(dst)
        )
        knots.append(" <-> ".join(cycle) + ": " + ", ".join(ties))
    assert not knots, "package cycles:\n" + "\n".join(knots)


def test_the_package_check_sees_a_cycle_the_module_check_cannot() -> None:
    """Guards the checker itself, with the layout the events had before they moved down."""
    old = {
        "control_plane.agent.loop": {"control_plane.models.router", "control_plane.agent.events"},
        "control_plane.models.router": {"control_plane.agent.events"},
        "control_plane.agent.events": set(),
    }
    assert _cycles(old) == []
    assert _cycles(package_graph(old)) == [["control_plane.agent", "control_plane.models"]]


def test_the_event_vocabulary_imports_nothing_of_ours() -> None:
    assert import_graph()["control_plane.events"] == set()


@pytest.mark.parametrize(
    ("lower", "forbidden"),
    [
        (CORE, SURFACES),
        (("sandboxes",), ("backends", "control_plane")),
        (("backends",), ("control_plane",)),
    ],
    ids=["core-not-surfaces", "sandboxes-alone", "backends-below-control-plane"],
)
def test_imports_point_down(lower: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
    wrong = sorted(
        f"{src} imports {dst}"
        for src, dsts in import_graph().items()
        if _within(src, lower)
        for dst in dsts
        if _within(dst, forbidden)
    )
    assert not wrong, "\n".join(wrong)


def test_the_graph_sees_known_edges() -> None:
    """Guards the checker itself: a relative and an absolute import it must find."""
    graph = import_graph()
    assert "backends.base" in graph["backends.docker"] or "backends" in graph["backends.docker"]
    assert any(dst.startswith("control_plane.config") for dst in graph["control_plane.sandbox_manager"])


def test_no_module_over_500_lines() -> None:
    long = sorted(
        f"{path.relative_to(REPO)}: {n} lines"
        for pkg in (*PACKAGES, "bench", "images")
        for path in (REPO / pkg).rglob("*.py")
        # dot-directories hold what is not ours (bench/.peers: the peers' virtualenvs)
        if not any(part.startswith(".") for part in path.relative_to(REPO).parts)
        and (n := len(path.read_text().splitlines())) > MAX_LINES
    )
    assert not long, "split these along a named seam: " + ", ".join(long)
