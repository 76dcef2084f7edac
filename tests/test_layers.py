"""The layers of DESIGN.md ("Layout") hold: no module imports one from a layer above it, and no modules import each
other round a circle. Every import counts, the ones inside functions too (a lazy import is still a dependency), and so
does the solver catalog's import of each solver's module by name."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shardopt", "solvers", "costmodels")

# layer -> the layers it may import (itself included)
ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "data": {"core", "data"},
    "costmodels": {"core", "costmodels"},
    "solvers": {"core", "data", "costmodels", "solvers"},
    "measure": {"core", "data", "costmodels", "measure"},
    "leaderboard": {"core", "data", "costmodels", "solvers", "measure", "leaderboard"},
    # the TorchRec planner (shardopt.torchrec): solvers behind TorchRec's interface, beside the leaderboard
    "torchrec": {"core", "data", "costmodels", "solvers", "torchrec"},
    "cli": {"core", "data", "costmodels", "solvers", "measure", "leaderboard", "torchrec", "cli"},
    "top": {"core", "data", "costmodels", "solvers", "measure", "leaderboard", "torchrec", "cli", "top"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] in ("solvers", "costmodels"):
        return parts[0]
    if len(parts) == 1 or parts[1] in ("__main__",):
        return "top"  # the shardopt package itself (__version__) and `python -m shardopt`
    if parts[1] not in ALLOWED:
        raise AssertionError(f"{module}: shardopt.{parts[1]} is in no layer of DESIGN.md; put it in one")
    return parts[1]


def project_modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            out[module_name(path)] = path
    return out


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """(imported project module, line) for every import statement in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    found.append((alias.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in known else target, node.lineno))
    return [(m, line) for m, line in found if m in known]


def import_graph() -> tuple[nx.DiGraph, list[str]]:
    modules = project_modules()
    known = set(modules)
    graph = nx.DiGraph()
    violations = []
    for mod, path in sorted(modules.items()):
        graph.add_node(mod)
        src_layer = layer_of(mod)
        for target, line in imports_of(mod, path, known):
            if target == mod:
                continue
            # a module importing its own package's __init__ (or a parent package) is not an edge of the graph
            if mod.startswith(target + "."):
                continue
            graph.add_edge(mod, target, line=line)
            dst_layer = layer_of(target)
            if dst_layer not in ALLOWED[src_layer]:
                violations.append(f"{path.relative_to(ROOT)}:{line}: {mod} ({src_layer}) imports {target} ({dst_layer})")
    # the catalog imports each solver's module by name (importlib, on first use): an edge like any import
    from solvers.catalog import specs

    for spec in specs():
        graph.add_edge("solvers.catalog", spec.module, line=f"SolverSpec {spec.name!r}")
    return graph, violations


def test_every_module_is_in_a_layer_and_imports_only_below_it() -> None:
    _, violations = import_graph()
    assert not violations, "imports from a layer above:\n" + "\n".join(violations)


def test_no_import_circles() -> None:
    graph, _ = import_graph()
    cycles = [c for c in nx.simple_cycles(graph, length_bound=6)]
    described = []
    for cycle in cycles[:10]:
        hops = [f"{a} -> {b} (line {graph.edges[a, b]['line']})" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
        described.append("; ".join(hops))
    assert not cycles, f"{len(cycles)} import circle(s), e.g.:\n" + "\n".join(described)


def test_the_core_never_imports_torch() -> None:
    bad = []
    for mod, path in project_modules().items():
        if layer_of(mod) != "core":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{mod}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in ("torch", "fbgemm_gpu", "torchrec")]
    assert not bad, bad


@pytest.mark.parametrize("source", [
    "from shardopt.cli.main import app\n",                 # cli -> cli: allowed
    "from shardopt.measure.evaluate import evaluate_plan\n",  # placed in core below: a violation
])
def test_the_walker_sees_an_upward_import(tmp_path: Path, source: str) -> None:
    """The checker itself: an import from above is reported, one from below is not."""
    known = set(project_modules())
    found = imports_of("shardopt.core.ir", _write(tmp_path, source), known)
    assert found, "the walker missed the import"
    up = [m for m, _ in found if layer_of(m) not in ALLOWED["core"]]
    assert up, f"{source!r} placed in the core should be an upward import"


def _write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "probe.py"
    path.write_text(source)
    return path
