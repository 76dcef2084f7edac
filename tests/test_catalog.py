"""The solver catalog and typed options (issue 'catalog'): every spec resolves to its class, one options dataclass per
solver checked in one place, and a solver of one's own - docs/solvers.md's example, run as written there - goes through
`shardopt solvers`, `shardopt solve` and `shardopt leaderboard run` once registered."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shardopt.cli import app
from solvers.catalog import SolverSpec, get_solver, register, solver_names, spec_of, specs, unregister
from solvers.options import OptionError, build_options, changed_options, option, option_specs

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "instances" / "examples" / "small.json"
FAMILIES = {"heuristic", "search", "exact", "rl", "baseline"}


@pytest.mark.parametrize("name", [s.name for s in specs()])
def test_every_spec_names_its_class_and_lists_its_options(name: str) -> None:
    spec = spec_of(name)
    assert spec.family in FAMILIES and spec.description and spec.placements
    klass = spec.solver_class()
    assert klass.name == name
    opts = spec.options()
    assert all(o.help for o in opts), [o.name for o in opts if not o.help]  # one line of help per option
    if spec.needs == "torchrec":
        pytest.importorskip("torchrec")
    solver = get_solver(name)
    assert [o.name for o in opts] == list(type(solver.options).__dataclass_fields__)  # the defaults build


def test_options_are_checked_by_type_range_and_choice() -> None:
    @dataclass(frozen=True)
    class Opts:
        n: int = option(3, "a count", low=1)
        share: float = option(0.5, "a share", low=0.0, high=1.0, high_open=True)
        kind: str = option("a", "a kind", choices=("a", "b"))
        names: tuple[str, ...] = option(("x",), "names", choices=("x", "y"))
        cap: int | None = option(None, "a cap or none", low=0)

    assert build_options(Opts, {"n": 2, "share": 0, "names": "x,y", "cap": None}, solver="t") == Opts(2, 0.0, "a", ("x", "y"), None)
    for values, words in [({"n": True}, "expected an integer"), ({"n": 0}, "must be >= 1"), ({"share": 1.0}, "must be in [0, 1)"),
                          ({"share": float("nan")}, "is not a number"), ({"kind": "c"}, "must be one of a, b"),
                          ({"names": ["x", "z"]}, "must be one of x, y"), ({"cap": "3"}, "expected an integer or null"),
                          ({"nope": 1}, "has no option 'nope' (its options: cap, kind, n, names, share)")]:
        with pytest.raises(OptionError, match=re.escape(words)):
            build_options(Opts, values, solver="t")
    assert changed_options(Opts(n=5)) == {"n": 5}
    assert [o.allowed for o in option_specs(Opts)] == [">= 1", "in [0, 1)", "one of a, b", "one of x, y", ">= 0"]


def test_a_solver_is_configured_by_its_options_only() -> None:
    """A config built in code is checked like one from the command line, and the faithful NeuroShard lists its own
    defaults."""
    from solvers.neuroshard.config import FAITHFUL, NeuroShardConfig

    with pytest.raises(OptionError, match="option beam_width=0 for solver 'neuroshard': must be >= 1"):
        get_solver("neuroshard", NeuroShardConfig(beam_width=0))
    faithful = {o.name: o.default for o in spec_of("neuroshard_faithful").options()}
    assert faithful["polish"] is False and faithful["patience"] is None and get_solver("neuroshard_faithful").options == FAITHFUL
    assert get_solver("neuroshard_faithful", beam_width=5).options.polish is False  # an override keeps the solver's defaults


def test_the_policy_checkpoint_comes_from_its_option_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SHARDOPT_DREAMSHARD_CHECKPOINT", str(tmp_path / "elsewhere.npz"))  # (once read; no longer)
    assert get_solver("dreamshard").checkpoint.name == "dreamshard.npz"


def _example_module(tmp_path: Path) -> Path:
    text = (ROOT / "docs" / "solvers.md").read_text()
    block = text.split("<!-- example: first_fit.py -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "first_fit.py"
    path.write_text(block)
    return path


@pytest.fixture
def first_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _example_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import first_fit  # noqa: F401 - docs/solvers.md's module, as written there

    register(first_fit.SPEC)
    yield first_fit
    unregister("first_fit")
    sys.modules.pop("first_fit", None)


def test_the_docs_example_solver_runs_through_every_command(first_fit, tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["solvers", "--json"])
    assert listed.exit_code == 0, listed.output
    row = next(r for r in json.loads(listed.stdout)["solvers"] if r["name"] == "first_fit")
    assert row["family"] == "heuristic" and row["uses_cost_model"] is False
    opts = runner.invoke(app, ["solvers", "--options", "first_fit", "--json"])
    assert json.loads(opts.stdout)["options"] == [{"name": "order", "type": "text", "default": "bytes", "allowed": "one of bytes, instance",
                                                    "help": "the order tables are placed in"}]

    solved = runner.invoke(app, ["solve", str(SMALL), "--solver", "first_fit", "-O", "order=instance", "--json"])
    assert solved.exit_code == 0, solved.output
    doc = json.loads(solved.stdout)
    assert doc["solver"] == "first_fit" and doc["plan"]["params"]["order"] == "instance"
    bad = runner.invoke(app, ["solve", str(SMALL), "--solver", "first_fit", "-O", "order=random"])
    assert bad.exit_code == 2 and "option order='random' for solver 'first_fit': must be one of bytes, instance" in bad.output

    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(SMALL, suite / "small.json")
    db = tmp_path / "r.sqlite"
    base = ["leaderboard", "run", str(suite), "--solvers", "first_fit,greedy", "--db", str(db), "--json"]
    for args in (base, base + ["-O", "first_fit.order=instance"], base + ["-O", "first_fit.order=instance"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT solver, settings, status FROM results ORDER BY solver, settings").fetchall()
    # the defaults and the changed option are rows of their own; the third run (same options) solved nothing again
    got = sorted((s, json.dumps(json.loads(k).get("options")), st) for s, k, st in rows)
    assert got == [("first_fit", "null", "feasible"), ("first_fit", json.dumps({"first_fit": {"order": "instance"}}), "feasible"),
                   ("greedy", "null", "feasible")]
    r = runner.invoke(app, base + ["-O", "first_fit.order=sideways"])
    assert r.exit_code == 2 and "option order='sideways' for solver 'first_fit'" in r.output
    r = runner.invoke(app, base + ["-O", "cpsat.max_split=1"])
    assert r.exit_code == 2 and "'cpsat' is not one of --solvers" in r.output


def test_an_installed_plugin_reaches_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package's entry point in the group shardopt.solvers registers its spec; a broken one is skipped with a warning."""
    import importlib.metadata as md

    from solvers import catalog

    _example_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [md.EntryPoint("first_fit", "first_fit:SPEC", catalog.ENTRY_POINT_GROUP),
           md.EntryPoint("broken", "no_such_module_here:SPEC", catalog.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(md, "entry_points", lambda group: eps if group == catalog.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(catalog, "_plugins_loaded", False)
    try:
        assert "first_fit" in solver_names() and "broken" not in solver_names()
    finally:
        unregister("first_fit")
        sys.modules.pop("first_fit", None)


def test_a_solver_spec_must_name_its_class() -> None:
    register(SolverSpec("not_greedy", "solvers.heuristics.constructive", "GreedySolver", "heuristic", "x", frozenset({"table_wise"})))
    try:
        with pytest.raises(TypeError, match="named 'greedy'"):
            get_solver("not_greedy")
    finally:
        unregister("not_greedy")


def test_every_user_error_is_bad_input_by_type() -> None:
    """The CLI maps a user's mistake to exit 2 by its type (shardopt.core.errors.UserError), whichever layer raised it."""
    from costmodels.base import UnsupportedPlacementError
    from costmodels.cards import CardError
    from costmodels.registry import UnknownCostModelError
    from shardopt.cli.common import EXIT_BAD_INPUT, _classify
    from shardopt.core.errors import UserError
    from shardopt.core.ir import IRError
    from shardopt.data.suites import SuiteError
    from shardopt.leaderboard.store import LeaderboardError
    from shardopt.measure.collect import CollectError
    from shardopt.measure.engine import EngineError
    from shardopt.measure.evaluate import UnknownBackendError
    from solvers.errors import UnknownSolverError

    errors = [UnknownSolverError("unknown solver 'x'", "x"), UnknownCostModelError("x"), CardError("x"), SuiteError("x"),
              CollectError("x"), EngineError("x"), UnknownBackendError("x"), LeaderboardError("x"), OptionError("x"),
              UnsupportedPlacementError("x"), IRError(["a: b"])]
    for exc in errors:
        assert isinstance(exc, UserError)
        known = _classify(exc)
        assert known is not None and known.exit_code == EXIT_BAD_INPUT and known.kind == type(exc).error_kind
    assert _classify(ZeroDivisionError("x")) is None
