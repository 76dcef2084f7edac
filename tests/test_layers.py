"""The layers of docs/architecture.md hold: no module imports one from a layer above it, and no modules import each
other round a circle. Every import counts, the ones inside functions too (a lazy import is still a dependency), and so
does the solver catalog's import of each solver's module by name."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("shardopt", "solvers", "costmodels")

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def allowed_imports() -> dict[str, set[str]]:
    """layer -> the layers it may import (itself included), read from docs/architecture.md's layer table, so that the
    map and the check cannot drift apart."""
    text = ARCHITECTURE.read_text()
    table = text[text.index("<!-- layers:"):].split("\n\n")[0]
    allowed: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("layer", "") or set(cells[0]) <= {"-", " "}:
            continue
        allowed[cells[0]] = {cells[0], *(c.strip() for c in cells[3].split(","))}
    return allowed


ALLOWED = allowed_imports()


def test_the_layer_table_names_every_layer() -> None:
    """The parser found the table: every layer of the project, each allowed only layers that exist."""
    assert {"core", "data", "costmodels", "solvers", "measure", "leaderboard", "torchrec", "cli", "top"} <= set(ALLOWED)
    assert ALLOWED["core"] == {"core"}
    for layer, targets in ALLOWED.items():
        assert targets <= set(ALLOWED), f"{layer} may import an unknown layer: {targets - set(ALLOWED)}"


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
        raise AssertionError(f"{module}: shardopt.{parts[1]} is in no layer of docs/architecture.md; put it in one")
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


def test_code_and_docs_cite_only_files_in_the_repository() -> None:
    """The design brief lives outside the repository; code, tests and docs cite docs/architecture.md instead."""
    cited = []
    for pattern in ("shardopt/**/*.py", "solvers/**/*.py", "costmodels/**/*.py", "tests/*.py", "benchmarks/*",
                    "docs/*.md", "README.md", "Makefile"):
        for path in ROOT.glob(pattern):
            if path.is_file() and path != Path(__file__) and "DESIGN" + ".md" in path.read_text(errors="ignore"):
                cited.append(str(path.relative_to(ROOT)))
    assert not cited, f"cite docs/architecture.md, not a file outside the repository: {cited}"
