"""The `shardopt` CLI keeps its contract (docs/architecture.md, "Errors and exits"): rich tables or one JSON document on stdout, errors on stderr,
exit 0 done / 2 bad input / 3 infeasible / 1 unexpected, and never a traceback for a user mistake.

Commands run in-process (typer's CliRunner); two subprocess tests check `python -m shardopt` and lazy imports.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import instance_doc
from typer.testing import CliRunner

from shardopt.cli import DEFAULT_SOLVER, app
from shardopt.core.ir import instance_from_dict, load_instance, load_plan, save
from solvers.catalog import solver_names

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "instances" / "examples"
SMALL = str(EXAMPLES / "small.json")
TIGHT = str(EXAMPLES / "tight.json")
INFEASIBLE = str(EXAMPLES / "infeasible.json")


def run(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert "Traceback" not in result.stdout + result.stderr or (env or {}).get("SHARDOPT_DEBUG")
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result


def run_json(*args: str):
    result = run(*args, "--json")
    return result, json.loads(result.stdout)  # exactly one JSON document, nothing else on stdout


@pytest.fixture(scope="module")
def small_doc() -> dict:
    return json.loads(Path(SMALL).read_text())


def write(tmp_path: Path, doc, name: str = "doc.json") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    result = run("solve", SMALL, "--solver", "greedy", "--out", out)
    assert result.exit_code == 0, result.stderr
    return str(out)


# ---------------------------------------------------------------------------------------------------------------
# bad input: exit 2, the message names the problem


def _mutated(small_doc: dict, fn) -> dict:
    d = copy.deepcopy(small_doc)
    fn(d)
    return d


BAD_DOCS = {
    "missing field": (lambda d: d["workload"].pop("batch_size"), "workload.batch_size: required field is missing"),
    "negative rows": (lambda d: d["tables"][1].update(rows=-5), "tables[1].rows: -5"),
    "dim not a multiple of 4": (lambda d: d["tables"][3].update(dim=30), "tables[3].dim: 30 is not a multiple of 4"),
    "unknown hardware profile": (lambda d: d["topology"].update(hardware="tpu9"), "topology.hardware: 'tpu9' is not a known hardware profile"),
}


@pytest.mark.parametrize("case", list(BAD_DOCS))
def test_invalid_instance_exits_2_naming_the_field(tmp_path: Path, small_doc: dict, case: str) -> None:
    fn, expected = BAD_DOCS[case]
    path = write(tmp_path, _mutated(small_doc, fn))
    for command in (["solve", path], ["inspect", path]):
        result = run(*command)
        assert result.exit_code == 2, (case, result.stderr)
        assert expected in result.stderr and path in result.stderr
        assert result.stdout == ""


def test_missing_file_and_not_json_exit_2(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    result = run("solve", missing)
    assert result.exit_code == 2 and f"{missing}: no such file" in result.stderr
    broken = write(tmp_path, '{"tables": [', "broken.json")
    result = run("inspect", broken)
    assert result.exit_code == 2 and f"{broken}: not valid JSON (line 1" in result.stderr
    result = run("evaluate", SMALL, missing)
    assert result.exit_code == 2 and "no such file" in result.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["solve", SMALL, "--solver", "nope"], "unknown solver 'nope' (known: greedy"),
        (["solve", SMALL, "--cost-model", "nope"], "unknown cost model 'nope' (known: analytic"),
        (["solve", SMALL, "--cost-model", "analytic:tpu9"], "tpu9"),
    ],
)
def test_unknown_names_exit_2(args: list[str], expected: str) -> None:
    result = run(*args)
    assert result.exit_code == 2 and expected in result.stderr, result.stderr


@pytest.mark.parametrize(
    "solver, option, expected",
    [
        ("greedy", "safe_fallback=maybe", "option safe_fallback='maybe' for solver 'greedy': expected true or false or null"),
        ("greedy", "fallback=1", "option fallback=1 for solver 'greedy': expected true or false"),
        ("cpsat", "max_split=2.5", "option max_split=2.5 for solver 'cpsat': expected an integer"),
        ("dreamshard", "temperature=hot", "option temperature='hot' for solver 'dreamshard': expected a number"),
        ("neuroshard", "row_wise=maybe", "option row_wise='maybe' for solver 'neuroshard': expected true or false"),  # a config field
        ("neuroshard", "patience=2.5", "option patience=2.5 for solver 'neuroshard': expected an integer or null"),
        ("cpsat", "row_wise=2", "option row_wise=2 for solver 'cpsat': expected true or false"),
    ],
)
def test_mistyped_solver_options_exit_2_naming_option_and_value(solver: str, option: str, expected: str) -> None:
    """The constructors coerce (bool("maybe") is True): a mistyped option must not silently become another plan."""
    result = run("solve", SMALL, "--solver", solver, "-O", option)
    assert result.exit_code == 2 and expected in result.stderr, result.stderr
    ok = run("solve", SMALL, "--solver", "greedy", "-O", "safe_fallback=null", "-O", "fallback=true", "--json")
    assert ok.exit_code == 0, ok.stderr


def test_solve_says_when_a_heuristic_fell_back() -> None:
    """A memory-tight suite instance where greedy's cost order runs out of room: the summary names the table, the
    fallback that placed the plan and what it was compared with; a plan from the solver's own order says nothing."""
    tight = str(ROOT / "instances" / "suites" / "dreamshard-test" / "dreamshard-test-s1-0017.json")
    result = run("solve", tight, "--solver", "greedy")
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "memory ran out in the solver's own order (table 't660'" in out
    assert "placed by the fallback primary_safe" in out and "cheaper than memory_order's" in out
    plain = run("solve", SMALL, "--solver", "greedy")
    assert plain.exit_code == 0 and "memory ran out" not in plain.stdout


def test_unknown_and_unbuilt_backends_exit_2(small_plan: str) -> None:
    result = run("evaluate", SMALL, small_plan, "--backend", "tpu")
    assert result.exit_code == 2 and "unknown backend 'tpu' (known: sim, cpu, cuda)" in result.stderr
    import torch

    if not torch.cuda.is_available():
        result = run("evaluate", SMALL, small_plan, "--backend", "cuda")
        assert result.exit_code == 2 and "backend 'cuda' is not available" in result.stderr


def test_evaluate_on_cpu_backend(tmp_path: Path) -> None:
    """The judge times the instance's own workload: a smaller one is made with `scale`, solved and judged."""
    small = tmp_path / "small-b64.json"
    result = run("scale", SMALL, "--batch-size", "64", "--max-rows", "2000", "--out", small)
    assert result.exit_code == 0, result.output
    plan = tmp_path / "plan.json"
    assert run("solve", small, "--solver", "greedy", "--out", plan).exit_code == 0
    args = ("evaluate", str(small), str(plan), "--backend", "cpu", "--repeats", "3", "--warmup", "0",
            "--cache", str(tmp_path / "c.sqlite"))
    result, doc = run_json(*args)
    assert result.exit_code == 0, result.output
    assert doc["backend"] == "cpu" and doc["batch_size"] == 64 and "modelled" in doc["comm"]
    assert doc["repeats"] == 3 and doc["stop"]["reason"] == "repeats"
    iv = doc["interval"]
    assert iv["low"] <= iv["estimate"] <= iv["high"] and iv["estimate"] == pytest.approx(doc["max_cost_ms"])
    assert doc["machine"]["threads"] == 1 and len(doc["machine"]["load_avg_before"]) == 3
    assert all(d["fwd_compute"] > 0 and d["bwd_compute"] > 0 for d in doc["devices"])
    result = run(*args)
    assert result.exit_code == 0 and "4 of 4 devices cached" in result.stdout and "from the cache" in result.stdout


def test_evaluate_refuses_a_hidden_rescale(small_plan: str) -> None:
    result = run("evaluate", SMALL, small_plan, "--backend", "cpu", "--batch-size", "64")
    assert result.exit_code == 2 and "shardopt scale" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["solve"],
        ["frobnicate"],
        ["solve", SMALL, "--no-such-option"],
        ["solve", SMALL, "--seed", "abc"],
        ["evaluate", SMALL],
        ["evaluate", SMALL, SMALL, "--repeats", "0"],
        ["schema", "--kind", "table"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 2, (args, result.output)
    assert "Usage" in result.output
    if args:  # a bare `shardopt` prints its help (click prints that on stdout); a usage error prints nothing there
        assert result.stdout == ""


def test_json_errors_are_one_json_document(tmp_path: Path) -> None:
    result, doc = run_json("solve", str(tmp_path / "nope.json"))
    assert result.exit_code == 2
    assert doc["error"]["exit_status"] == 2 and "no such file" in doc["error"]["message"]


def test_unwritable_out_exits_2(tmp_path: Path) -> None:
    result = run("solve", SMALL, "--out", tmp_path / "no" / "such" / "dir" / "plan.json")
    assert result.exit_code == 2 and "cannot write the plan" in result.stderr


def test_invalid_plan_exits_2_listing_violations(tmp_path: Path, small_plan: str) -> None:
    plan = json.loads(Path(small_plan).read_text())
    plan["shards"] = plan["shards"][1:]  # one table no longer placed
    dropped = json.loads(Path(small_plan).read_text())["shards"][0]["table"]
    path = write(tmp_path, plan, "plan.json")
    result = run("evaluate", SMALL, path)
    assert result.exit_code == 2 and f"table {dropped!r} is not placed on any device" in result.stderr
    result = run("inspect", path, "--instance", SMALL)
    assert result.exit_code == 2 and f"table {dropped!r} is not placed on any device" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# infeasible: exit 3 with the reason


def test_table_that_fits_nowhere_exits_3() -> None:
    # every solver may split a table by rows (issue 17): the proof is the total, in both memory tiers
    for solver in ("greedy", None):
        result = run("solve", INFEASIBLE, *(["--solver", solver] if solver else []))
        assert result.exit_code == 3 and "short by 3,112,561,032 bytes" in result.stderr, result.stderr
    result, doc = run_json("solve", INFEASIBLE, "--solver", "greedy")
    assert result.exit_code == 3
    assert doc["status"] == "infeasible" and "short by" in doc["reason"] and doc["error"]["exit_status"] == 3


def test_total_memory_short_exits_3(tmp_path: Path) -> None:
    inst = instance_doc([(100, 16, 1.0)] * 4, [10_000, 10_000])  # 4 x 6,400 bytes in 2 x 10,000
    path = tmp_path / "short.json"
    save(inst, path)
    result = run("solve", path)
    assert result.exit_code == 3 and "short by 5,600 bytes" in result.stderr, result.stderr


def test_no_plan_found_exits_3(tmp_path: Path) -> None:
    # each table fits and the total fits, but only one table fits per device: bin packing, not a capacity proof
    inst = instance_doc([(1500, 4, 1.0)] * 3, [40_000, 40_000])
    path = tmp_path / "packing.json"
    save(inst, path)
    result = run("solve", path, "--solver", "greedy")
    assert result.exit_code == 3
    assert "could not place table" in result.stderr and "not proven infeasible" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# the happy path: solve -> plan -> evaluate -> inspect


def test_solve_evaluate_inspect_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = run("solve", SMALL, "--out", out, "--seed", "3", "--time-limit", "10")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert "predicted by auto: analytic (v100 profile)" in text  # (no calibrated model for v100: auto says so on stderr)
    assert "no calibrated model for hardware 'v100'" in result.stderr
    for word in ("plan cost", "critical path", "imbalance", f"solver {DEFAULT_SOLVER}: feasible", "fwd compute", "bwd comm"):
        assert word in text, word
    plan, inst = load_plan(out), load_instance(SMALL)
    assert plan.instance == inst.content_hash() and plan.seed == 3 and plan.solver == DEFAULT_SOLVER

    result = run("evaluate", SMALL, out)
    assert result.exit_code == 0, result.stderr
    assert "judged by analytic (v100 profile), simulated" in result.stdout and result.stderr == ""

    result = run("inspect", out)
    assert result.exit_code == 0 and "shards per device" in result.stdout and "column-wise (one whole shard)" in result.stdout
    result = run("inspect", out, "--instance", SMALL)
    assert result.exit_code == 0 and "memory used / capacity" in result.stdout and "imbalance" in result.stdout
    result = run("inspect", SMALL)
    assert result.exit_code == 0
    for word in ("tables", "pooling factor", "topology", "v100", "workload", "rowwise_adagrad", "largest tables"):
        assert word in result.stdout, word


def test_json_outputs_parse_and_agree(small_plan: str) -> None:
    result, solved = run_json("solve", SMALL, "--solver", "greedy")  # the solver small_plan was made with
    assert result.exit_code == 0
    assert solved["status"] == "feasible" and solved["cost_model"] == "analytic (v100 profile)"
    assert len(solved["predicted"]["devices"]) == 4 and len(solved["plan"]["shards"]) >= 20
    assert {s["table"] for s in solved["plan"]["shards"]} == {f"t{i:02d}" for i in range(20)}
    result, judged = run_json("evaluate", SMALL, small_plan)
    assert result.exit_code == 0 and judged["backend"] == "sim" and judged["hash_matches"]
    # the simulator and the solver's cost model are the same analytic model here: the costs agree
    assert judged["max_cost_ms"] == pytest.approx(solved["predicted"]["max_cost_ms"])
    result, inspected = run_json("inspect", SMALL)
    assert inspected["kind"] == "instance" and inspected["tables"]["count"] == 20
    assert inspected["feasibility"]["reason"] is None and 0 < inspected["memory"]["fraction"] < 1
    result, plan_doc = run_json("inspect", small_plan, "--instance", SMALL)
    assert plan_doc["valid"] and plan_doc["evaluation"]["max_cost_ms"] == pytest.approx(judged["max_cost_ms"])
    result, bare = run_json("inspect", small_plan)
    assert bare["kind"] == "plan" and sum(bare["shards_per_device"]) == 20


def test_column_row_and_replicated_plans_are_judged_and_shown(tmp_path: Path, small_plan: str) -> None:
    inst = load_instance(SMALL)
    a, b, c = inst.tables[0], inst.tables[1], inst.tables[2]
    half = a.dim // 2 // 4 * 4
    plan = json.loads(Path(small_plan).read_text())
    plan["shards"] = [s for s in plan["shards"] if s["table"] not in (a.name, b.name, c.name)] + [
        {"table": a.name, "device": 0, "cols": half},
        {"table": a.name, "device": 1, "col_offset": half},
        {"table": c.name, "device": 2, "rows": c.rows // 2},
        {"table": c.name, "device": 3, "row_offset": c.rows // 2},
    ] + [{"table": b.name, "device": d, "replicated": True} for d in range(4)]
    path = write(tmp_path, plan, "mixed.json")
    result, doc = run_json("evaluate", SMALL, path)
    assert result.exit_code == 0, result.stderr
    assert doc["max_cost_ms"] > 0 and len(doc["devices"]) == 4
    result = run("inspect", path)
    assert result.exit_code == 0
    assert f"{a.name}[c0:{half}]" in result.stdout and f"{b.name}(rep)" in result.stdout  # brackets are not markup
    assert "1 column-wise" in result.stdout and "1 replicated" in result.stdout and "1 row-wise" in result.stdout


def test_tight_example_is_placeable() -> None:
    result, doc = run_json("solve", TIGHT)
    assert result.exit_code == 0, result.stderr
    used = [d["used_bytes"] / d["capacity_bytes"] for d in doc["memory"]]
    assert max(used) <= 1.0 and sum(d["used_bytes"] for d in doc["memory"]) / sum(d["capacity_bytes"] for d in doc["memory"]) > 0.9


def test_evaluate_warns_when_the_plan_is_for_another_instance(tmp_path: Path, small_doc: dict, small_plan: str) -> None:
    changed = _mutated(small_doc, lambda d: d["tables"][0].update(pooling_factor=d["tables"][0]["pooling_factor"] + 1))
    path = write(tmp_path, changed, "changed.json")
    result = run("evaluate", path, small_plan)
    assert result.exit_code == 0
    assert "warning" in result.stderr and "the plan was made for instance" in result.stderr
    result = run("evaluate", TIGHT, small_plan)  # a plan for another instance: warned, then invalid
    assert result.exit_code == 2 and "the plan was made for instance" in result.stderr


def test_solvers_lists_every_registered_name() -> None:
    result = run("solvers")
    assert result.exit_code == 0
    for name in solver_names():
        assert name in result.stdout
    result, doc = run_json("solvers")
    assert [s["name"] for s in doc["solvers"]] == solver_names() and doc["default"] == DEFAULT_SOLVER
    assert all(s["family"] and s["description"] for s in doc["solvers"])


def test_schema_is_valid_json_schema(small_doc: dict, small_plan: str) -> None:
    result = run("schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(small_doc, schema)
    plan_doc = json.loads(Path(small_plan).read_text())
    jsonschema.validate(plan_doc, schema)
    inst_schema = json.loads(run("schema", "--kind", "instance").stdout)
    assert jsonschema.Draft202012Validator(inst_schema).is_valid(small_doc)
    assert not jsonschema.Draft202012Validator(inst_schema).is_valid(plan_doc)
    plan_schema = json.loads(run("schema", "--kind", "plan").stdout)
    assert jsonschema.Draft202012Validator(plan_schema).is_valid(plan_doc)


# ---------------------------------------------------------------------------------------------------------------
# unexpected errors: exit 1, short message, traceback only on request


def test_unexpected_error_exits_1_without_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import solvers.heuristics.constructive

    def boom(self, *args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(solvers.heuristics.constructive.GreedySolver, "solve", boom)
    result = run("solve", SMALL, "--solver", "greedy")
    assert result.exit_code == 1
    assert "unexpected RuntimeError: boom" in result.stderr and "SHARDOPT_DEBUG=1" in result.stderr
    assert "Traceback" not in result.stderr
    result = run("solve", SMALL, "--solver", "greedy", env={"SHARDOPT_DEBUG": "1"})
    assert result.exit_code == 1 and "Traceback" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# the real entry point, the lazy imports and the example files


def test_python_m_shardopt_and_lazy_imports() -> None:
    code = (
        "import sys, shardopt.cli\n"
        "assert not {'torch', 'ortools', 'pulp'} & set(sys.modules), 'import'\n"
        "from typer.testing import CliRunner\n"
        f"r = CliRunner().invoke(shardopt.cli.app, ['solve', {SMALL!r}, '--solver', 'greedy', '--json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = {'torch', 'ortools', 'pulp'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "shardopt", "solve", "missing.json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "missing.json: no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_example_files_are_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("make_examples", EXAMPLES / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check", "--only", "small", "infeasible"]) == 0  # large takes ~20 s: `make_examples.py --check`
    for name in ("small", "tight", "large"):
        inst = load_instance(EXAMPLES / f"{name}.json")
        assert inst.metadata["seed"] and inst.metadata["command"]
        for t in inst.tables:
            assert t.access.histogram is not None and t.access.zipf is not None and 0.6 <= t.access.zipf <= 1.4
            assert t.dim in (16, 32, 64, 128)
    large = load_instance(EXAMPLES / "large.json")
    assert (len(large.tables), large.topology.num_devices, large.topology.devices_per_host) == (856, 128, 8)
    assert large.topology.hardware == "a100" and large.workload.batch_size == 65536
    assert (EXAMPLES / "large.json").stat().st_size < 1.5e6
    tight = instance_from_dict(json.loads((EXAMPLES / "tight.json").read_text()))
    assert (tight.topology.num_devices, tight.topology.devices_per_host, len(tight.tables)) == (8, 4, 60)


def test_numbers_the_model_cannot_hold_exit_2_naming_the_field(tmp_path: Path) -> None:
    """Issue 18: rows 10**30 was an 'unexpected OverflowError' (exit 1)."""
    doc = json.loads(Path(SMALL).read_text())
    doc["tables"][2]["rows"] = 10**30
    path = tmp_path / "huge_rows.json"
    path.write_text(json.dumps(doc))
    for args in (["solve", path, "--solver", "greedy"], ["inspect", path], ["evaluate", path, path]):
        result = run(*args)
        assert result.exit_code == 2, (args, result.stderr)
        assert "tables[2].rows: 1000000000000000000000000000000" in result.stderr


def test_native_writes_to_stdout_never_precede_a_json_document():
    """Issue 'trust': HiGHS (inside scipy) printed a line on file descriptor 1 before cpsat's --json document. While a
    --json command runs, native writes go to stderr and the document alone to stdout - on success and on error."""
    import subprocess
    import sys

    script = (
        "import os, typer\n"
        "from shardopt.cli.common import CLIError, _emit_json, _guard\n"
        "import sys\n"
        "fail = sys.argv[1] == 'fail'\n"
        "try:\n"
        "    with _guard(True):\n"
        "        os.write(1, b'HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();\\n')\n"
        "        if fail:\n"
        "            raise CLIError('bad --thing', 2, 'bad')\n"
        "        _emit_json({'ok': True})\n"
        "except typer.Exit as e:\n"
        "    sys.exit(e.exit_code)\n"
        "os.write(1, b'after\\n')\n"
    )
    for mode, code in (("ok", 0), ("fail", 2)):
        r = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert r.returncode == code, r.stderr
        doc_text = r.stdout.removesuffix("after\n")
        doc = json.loads(doc_text)  # nothing native before (or inside) the document
        assert (doc == {"ok": True}) if mode == "ok" else doc["error"]["exit_status"] == 2
        assert "HighsMipSolverData" in r.stderr and "HighsMipSolverData" not in r.stdout
        assert r.stdout.endswith("after\n") if mode == "ok" else True  # fd 1 is stdout again after the command


@pytest.mark.parametrize("args, needle", [
    (["--solver", "neuroshard", "-O", "foo=bar"], "solver 'neuroshard' has no option 'foo' (its options: anytime, beam_width"),
    (["--solver", "neuroshard", "-O", "beam_width=-3"], "option beam_width=-3 for solver 'neuroshard': must be >= 1"),
    (["--solver", "neuroshard", "-O", "max_steps=0"], "option max_steps=0 for solver 'neuroshard': must be >= 1"),
        (["--solver", "neuroshard", "-O", "beam_width=2.5"], "option beam_width=2.5 for solver 'neuroshard': expected an integer"),
        (["--solver", "cpsat", "-O", "max_split=3"], "option max_split=3 for solver 'cpsat': must be a power of two >= 1"),
        (["--solver", "cpsat", "-O", "presplit_share=1"], "option presplit_share=1 for solver 'cpsat': must be in [0, 1)"),
        (["--solver", "greedy", "-O", "row_splits=diagonal"], "option row_splits='diagonal' for solver 'greedy': must be one of auto, within_host, all_devices"),
    (["--solver", "torchrec_all", "-O", "nope=1"], "solver 'torchrec_all' has no option 'nope'"),
    (["--solver", "dreamshard", "-O", "checkpoint=/nonexistent/policy.npz"], "option checkpoint='/nonexistent/policy.npz' for solver 'dreamshard': must be an existing file"),
    (["--solver", "random", "--seed", "-1"], "--seed"),
    (["--solver", "cpsat", "--seed", "-1"], "--seed"),
])
def test_solver_option_mistakes_exit_2_naming_the_option(args: list[str], needle: str) -> None:
    """Issue 'trust': each of these exited 1 with a raw TypeError / ValueError, or was accepted silently."""
    r = CliRunner().invoke(app, ["solve", str(ROOT / "instances" / "examples" / "small.json"), *args])
    assert r.exit_code == 2, r.output
    assert needle in r.output


def test_collect_into_a_folder_and_a_cuda_leaderboard_without_a_gpu_exit_2(tmp_path: Path) -> None:
    """Issue 'trust': both exited 1; the leaderboard also left an empty store behind."""
    import torch

    r = CliRunner().invoke(app, ["costmodel", "collect", "--backend", "sim", "--samples", "3", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "is a folder" in r.output
    if torch.cuda.is_available():
        return
    db = tmp_path / "lb.sqlite"
    r = CliRunner().invoke(app, ["leaderboard", "run", str(ROOT / "instances" / "suites" / "cpu-test"), "--backend", "cuda",
                                 "--solvers", "greedy", "--db", str(db)])
    assert r.exit_code == 2 and "backend 'cuda' is not available" in r.output
    assert not db.exists()


def test_a_bad_jsonl_line_is_reported_with_its_own_line_number(tmp_path: Path) -> None:
    """Issue 'trust': json.loads of one line reports "line 1" whatever line of the file it was."""
    from shardopt.measure.collect import CollectError, existing_ids, read_samples

    good = json.dumps({"id": 0, "kind": "compute"})
    path = tmp_path / "s.jsonl"
    path.write_text(f"{good}\n\n{json.dumps({'id': 1, 'kind': 'compute'})}\n{{oops\n")
    with pytest.raises(CollectError, match=r"s\.jsonl: line 4: not a JSON sample"):
        list(read_samples(path))
    with pytest.raises(CollectError, match=r"s\.jsonl: line 4 is not a sample"):
        existing_ids(path)
