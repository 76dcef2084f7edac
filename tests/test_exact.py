"""The exact solvers (cpsat, milp, milp_highs) and the linearisation they solve.

- the linearisation is exact at its expansion point (compute and comm, both comm forms, both cost models), and its
  comm planes reproduce the analytic all-to-all (a max of linear pieces) away from the point too;
- on a tiny instance whose costs are nearly additive (uniform access, saturated occupancy) every exact solver finds
  the optimum that brute-force enumeration of all assignments finds under the full cost model, and beats the
  heuristics there; on a small instance with strong cache / floor effects they are at least as good as every
  heuristic;
- infeasible instances are proven infeasible: total memory short (the feasibility check) and a bin packing that
  fails although the total fits (the solver's own proof), with the reason naming the capacity problem;
- the time limit returns a valid plan quickly; the same seed gives the same plan; the CLI maps infeasible to exit 3.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from conftest import brute_force_split, instance_doc, make_instance, solve_on_budget

from costmodels.analytic import AnalyticCostModel
from shardopt.core.ir import Instance, instance_from_dict
from shardopt.core.memory import table_bytes_array
from shardopt.core.plan_check import check_plan
from solvers.base import SolveStatus
from solvers.catalog import get_solver, spec_of
from solvers.exact import comm_floor, table_lower_bounds, width_caps
from solvers.exact.linearize import linearize

EXACT = ["cpsat", "milp", "milp_highs"]
HEURISTICS = ["greedy", "size", "dim", "lookup", "size_lookup", "round_robin"]
CM = AnalyticCostModel()


def device_of(instance: Instance, plan) -> np.ndarray:
    index = instance.table_index()
    out = np.empty(len(instance.tables), dtype=np.int64)
    for s in plan.shards:
        out[index[s.table]] = s.device
    return out


def additive_instance(seed: int = 0, n_tables: int = 9, n_devices: int = 3, mem_factor: float = 1.05) -> Instance:
    """Tables whose device costs nearly add up: uniform access (no cache reuse), batch 65536 (every kernel fully
    occupied), large rows (far above the kernel floor); tight memory so that the heuristics' packing is not best."""
    rng = np.random.default_rng(seed)
    tables = [
        {
            "name": f"t{i}",
            "rows": int(rng.integers(200_000, 2_000_000)),
            "dim": int(rng.choice([32, 64, 128])),
            "pooling_factor": float(rng.integers(5, 40)),
            "access": {"zipf": 0.0},
        }
        for i in range(n_tables)
    ]
    doc = {
        "name": f"additive-{seed}",
        "tables": tables,
        "topology": {"num_devices": n_devices, "devices_per_host": n_devices, "memory_bytes": 1, "hardware": "v100"},
        "workload": {"batch_size": 65536, "optimizer": "sgd", "weight_dtype": "fp32"},
    }
    sizes = table_bytes_array(instance_from_dict(doc))
    doc["topology"]["memory_bytes"] = int(max(sizes.max(), mem_factor * sizes.sum() / n_devices))
    return instance_from_dict(doc)


def brute_force(instance: Instance, cost_model=CM) -> tuple[float, np.ndarray]:
    """The best plan cost under the full model over every assignment that fits in memory (vectorised)."""
    bm = cost_model.bind(instance)
    T, D = len(instance.tables), instance.topology.num_devices
    sizes = table_bytes_array(instance)
    caps = np.array(instance.topology.capacities())
    every = np.array(list(itertools.product(range(D), repeat=T)))
    rows = np.arange(len(every))
    use = np.zeros((len(every), D))
    for t in range(T):
        use[rows, every[:, t]] += sizes[t]
    every = every[(use <= caps).all(axis=1)]
    rows = np.arange(len(every))
    states = np.zeros((len(every), D, bm.state_size))
    dims = np.zeros((len(every), D))
    for t in range(T):
        states[rows, every[:, t]] += bm.table_states[t]
        dims[rows, every[:, t]] += bm.table_dims[t]
    cost = (bm.compute_costs(states).sum(axis=-1) + bm.comm_totals(dims)).max(axis=1)
    i = int(np.argmin(cost))
    return float(cost[i]), every[i]


# ---------------------------------------------------------------------------------------------------------------
# the linearisation


def _neural():
    from costmodels.neural import NeuralCostModel

    return NeuralCostModel()


@pytest.mark.parametrize("model", ["analytic", "neural"])
@pytest.mark.parametrize("comm", ["planes", "linear"])
def test_linearisation_is_exact_at_its_expansion_point(model: str, comm: str) -> None:
    cm = CM if model == "analytic" else _neural()
    for inst in (make_instance(10, 4, seed=2), make_instance(24, 16, seed=3, per_host=4), make_instance(7, 6, seed=4, per_host=2)):
        bm = cm.bind(inst)
        rng = np.random.default_rng(0)
        for _ in range(3):
            P = rng.integers(0, inst.topology.num_devices, len(inst.tables))
            lin = linearize(bm, P, comm)
            full = bm.assignment_costs(P)
            np.testing.assert_allclose(lin.compute_costs(P), full.fwd_compute + full.bwd_compute, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(lin.comm_costs(P), full.fwd_comm + full.bwd_comm, rtol=1e-9, atol=1e-12)
            assert lin.cost(P) == pytest.approx(full.max_cost, rel=1e-9)


def test_marginals_are_one_table_steps() -> None:
    """a[t, d] is what device d's compute changes by when t alone arrives (or leaves): exact for one move."""
    inst = make_instance(9, 3, seed=5)
    bm = CM.bind(inst)
    P = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])
    lin = linearize(bm, P)
    for t, d in [(0, 1), (4, 2), (8, 0)]:
        moved = P.copy()
        moved[t] = d
        full = bm.assignment_costs(moved)
        np.testing.assert_allclose(lin.compute_costs(moved), full.fwd_compute + full.bwd_compute, atol=1e-12)


def test_comm_planes_reproduce_the_analytic_all_to_all() -> None:
    """The analytic all-to-all is a max of linear pieces in (own width, host width): the max of tangent planes
    sampled around the point finds the pieces, so the comm stays exact after moves that keep the widths within the
    sampled range (up to 4 mean dims) -- nearly always for a few moves; one plane is off after the first kink."""
    inst = make_instance(40, 16, seed=6, per_host=4)
    bm = CM.bind(inst)
    rng = np.random.default_rng(1)
    P = rng.integers(0, 16, 40)
    planes, line = linearize(bm, P, "planes"), linearize(bm, P, "linear")
    for k, share in ((2, 0.95), (8, 0.8)):
        err_planes, err_line = [], []
        for _ in range(100):
            x = P.copy()
            moved = rng.choice(40, k, replace=False)
            x[moved] = rng.integers(0, 16, k)
            full = bm.assignment_costs(x)
            truth = full.fwd_comm + full.bwd_comm
            err_planes.append(np.abs(planes.comm_costs(x) - truth).max())
            err_line.append(np.abs(line.comm_costs(x) - truth).max())
        assert np.mean(np.array(err_planes) < 1e-9) >= share
        assert np.mean(err_planes) < 0.1 * np.mean(err_line)


def test_partial_plan_linearisation() -> None:
    """-1 = a table on no device (the solvers' start when no heuristic packs the tables): marginals from the
    empty device are the single-table costs."""
    inst = make_instance(6, 3, seed=7)
    bm = CM.bind(inst)
    lin = linearize(bm, np.full(6, -1))
    np.testing.assert_allclose(lin.a[:, 0], bm.single_table_costs, rtol=1e-12)
    assert np.all(lin.c0 == 0)
    with pytest.raises(ValueError, match="shape"):
        linearize(bm, np.zeros(5, dtype=int))


def test_table_cuts_are_valid_lower_bounds() -> None:
    """z >= sum_d lb[t, d] x[t, d]: lb[t, d] never exceeds device d's linearised cost in any plan with t on d."""
    inst = make_instance(20, 8, seed=8, per_host=4, mem_factor=1.5)
    bm = CM.bind(inst)
    sizes = table_bytes_array(inst)
    caps = np.array(inst.topology.capacities())
    P = np.random.default_rng(2).integers(0, 8, 20)
    lin = linearize(bm, P)
    lb = table_lower_bounds(lin, sizes[:, None] <= caps[None, :], sizes, caps)
    umax, vmax = width_caps(lin, sizes, caps)
    assert np.all(umax <= vmax + 1e-9) and np.all(comm_floor(lin, np.array([4.0]), umax, vmax) <= lin.comm_costs(P) + 1e-9)
    rng = np.random.default_rng(3)
    for _ in range(200):
        x = rng.integers(0, 8, 20)
        use = np.bincount(x, weights=sizes, minlength=8)
        if (use > caps).any():
            continue
        cost = lin.device_costs(x)
        assert np.all(lb[np.arange(20), x] <= cost[x] + 1e-9)


# ---------------------------------------------------------------------------------------------------------------
# optimality on tiny instances


@pytest.fixture(scope="module")
def additive() -> tuple[Instance, float, dict[str, float]]:
    inst = additive_instance(seed=0)
    best, _ = brute_force(inst)
    heuristics = {h: get_solver(h).solve(inst, CM).predicted_cost for h in HEURISTICS}
    return inst, best, heuristics


@pytest.mark.parametrize("name", EXACT)
def test_finds_the_enumerated_optimum(name: str, additive) -> None:
    inst, best, heuristics = additive
    assert min(heuristics.values()) > best * (1 + 1e-3)  # the instance is not one the heuristics already solve
    r = solve_on_budget(name, inst, CM, 90, seed=0, max_split=1)  # table-wise, as enumerated
    assert r.status is SolveStatus.optimal, r.info
    assert check_plan(inst, r.plan).ok
    assert r.predicted_cost == pytest.approx(best, rel=1e-9)
    # the solver's own bound is the linear model's around the returned plan, which is exact there: it cannot exceed
    # the cost; it is no certified bound of the plan cost, so the result's lower_bound (and the plan's) stays empty
    assert r.model_bound is not None and r.model_bound.value <= r.predicted_cost + 1e-6
    assert r.model_bound.of == "the linearised model around the returned plan"
    assert r.lower_bound is None and r.plan.lower_bound is None and r.plan.status.value == "optimal"
    info = r.info
    assert info["iterations"] and r.stats.warm_start.cost == pytest.approx(min(heuristics.values()))
    assert all("full_cost" in it or not it.get("improved") for it in info["iterations"])


@pytest.mark.parametrize("name,max_split", [(name, 1) for name in EXACT] + [("cpsat", 4)]
                         + [pytest.param(name, 4, marks=pytest.mark.slow) for name in ("milp", "milp_highs")])
def test_never_worse_than_any_heuristic(name: str, max_split: int) -> None:
    """With cache competition and kernel floors the first-order model is rougher (no optimality claim); the loop
    still keeps the best plan by the full model, so it never loses to the heuristics it starts from. Table-wise,
    it cannot beat the enumerated table-wise optimum either."""
    inst = make_instance(8, 4, seed=5, mem_factor=1.2)
    best, _ = brute_force(inst)
    heuristic = min(get_solver(h).solve(inst, CM).predicted_cost for h in HEURISTICS)
    r = solve_on_budget(name, inst, CM, 10, max_split=max_split)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    assert r.predicted_cost <= heuristic + 1e-12
    assert r.predicted_cost == pytest.approx(CM.plan_costs(inst, r.plan).max_cost, rel=1e-9)
    if max_split == 1:
        assert best - 1e-12 <= r.predicted_cost
        assert all(s.cols is None for s in r.plan.shards)


def test_neural_cost_model() -> None:
    cm = _neural()
    inst = make_instance(10, 4, seed=9, mem_factor=1.3)
    heuristic = min(get_solver(h).solve(inst, cm).predicted_cost for h in HEURISTICS)
    r = solve_on_budget("cpsat", inst, cm, 20)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    assert r.predicted_cost <= heuristic + 1e-12
    assert r.predicted_cost == pytest.approx(cm.plan_costs(inst, r.plan).max_cost)


# ---------------------------------------------------------------------------------------------------------------
# infeasibility


def test_total_memory_short_is_infeasible() -> None:
    inst = instance_doc([(1000, 4, 1.0)] * 3, [20_000, 20_000])  # 3 x 16,000 bytes > 40,000
    for name in EXACT:
        r = solve_on_budget(name, inst, CM, 10)
        assert r.status is SolveStatus.infeasible and r.plan is None
        assert "short by 8,000 bytes" in r.reason


@pytest.mark.parametrize("name", EXACT)
def test_bin_packing_of_its_placements_proven_impossible(name: str) -> None:
    """3 tables of 6 units on 2 devices of 10: the total fits (18 <= 20), no two tables share a device. The solver
    proves that no assignment of its placements fits; a row-wise split would (one table halved over both devices),
    so the instance is not infeasible (issue 17): no_solution, with the solver's proof in the reason."""
    inst = instance_doc([(1500, 4, 1.0)] * 3, [40_000] * 2)  # each table 1500 x 4 x 4 = 24,000 bytes (sgd, fp32)
    assert all(get_solver(h).solve(inst, CM).plan is None for h in HEURISTICS)
    t0 = time.perf_counter()
    r = solve_on_budget(name, inst, CM, 20, tiered=False)  # (its own placements only: tests/test_exact_tiered.py goes beyond)
    assert time.perf_counter() - t0 < 20
    assert r.status is SolveStatus.no_solution and r.plan is None
    assert "no assignment of whole tables fits" in r.reason and "72,000" in r.reason and "80,000" in r.reason
    assert "3 tables each need more than half of the largest device" in r.reason
    assert "not proven infeasible" in r.reason and r.info["placements_disproved_by"]


@pytest.mark.parametrize("name", ["cpsat", "milp_highs"])
def test_packs_what_the_heuristics_cannot(name: str) -> None:
    """Bins of 10 and items 5, 5, 4, 4, 3, 3, 3, 3: first-, best- and worst-fit decreasing all fail; a perfect
    packing exists ({5, 5}, {4, 3, 3}, {4, 3, 3}). The start is the empty plan, where the three devices are
    interchangeable, so symmetry breaking is on. (greedy's completion-checked retry and the heuristics' exact packing
    pack it too: the start is forced empty here, and the heuristics are asked without their fallbacks.)"""
    unit = 4000  # rows: x 4 cols x 4 bytes (sgd, fp32) = 64,000 bytes
    inst = instance_doc([(k * unit, 4, 1.0) for k in (5, 5, 4, 4, 3, 3, 3, 3)], [10 * unit * 16] * 3)
    assert all(get_solver(h, fallback=False).solve(inst, CM).plan is None for h in HEURISTICS)
    safe = get_solver("greedy").solve(inst, CM)
    assert safe.packing.stage == "primary_safe" and check_plan(inst, safe.plan).ok
    r = solve_on_budget(name, inst, CM, 20, warm_start=False)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    assert r.stats.warm_start is None and r.info["iterations"][0]["symmetry_classes"] == 1


# ---------------------------------------------------------------------------------------------------------------
# time limit, determinism, options, CLI


@pytest.mark.parametrize("name", ["cpsat", "milp_highs"])
def test_time_limit_returns_a_valid_plan_quickly(name: str) -> None:
    inst = make_instance(80, 8, seed=11, mem_factor=1.3)
    heuristic = min(get_solver(h).solve(inst, CM).predicted_cost for h in HEURISTICS)
    t0 = time.perf_counter()
    r = get_solver(name).solve(inst, CM, time_limit=2.0)  # (the wall-clock limit is what this test is about)
    wall = time.perf_counter() - t0
    assert wall < 2.0 + 10.0  # the limit plus start-up and the final judging, generously (measured 2.0 s here)
    assert r.status in (SolveStatus.optimal, SolveStatus.feasible)
    assert check_plan(inst, r.plan).ok and r.predicted_cost <= heuristic + 1e-12
    assert r.plan.wall_time_s == pytest.approx(r.wall_time_s, abs=0.05)


def test_same_seed_same_plan() -> None:
    """Only a converged run is reproducible (a time limit cuts wherever the clock says), so the instance is small
    (about 2 s per run here, measured 2026-11-22) and the limit generous: the loop stops when it converges."""
    inst = make_instance(6, 3, seed=12, mem_factor=1.3)
    for name in EXACT:
        a = solve_on_budget(name, inst, CM, 90, seed=4)
        b = solve_on_budget(name, inst, CM, 90, seed=4)
        assert a.status is b.status is SolveStatus.optimal
        assert [s.model_dump() for s in a.plan.shards] == [s.model_dump() for s in b.plan.shards]


def test_registry_and_params() -> None:
    for name in EXACT:
        s = get_solver(name)
        assert s.name == name and spec_of(name).family == "exact" and spec_of(name).description
        p = s.params()
        assert p["layout"] == "table-wise + column splits" and p["max_split"] == 8 and p["comm"] == "planes" and p["workers"] >= 1
        assert get_solver(name, max_split=1).params()["layout"] == "table-wise"
    with pytest.raises(ValueError, match="comm"):
        get_solver("cpsat", comm="cubic")


def test_cli_solve_and_infeasible_exit_status(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from shardopt.cli import app
    from shardopt.core.ir import save

    ok = tmp_path / "ok.json"
    save(additive_instance(seed=1, n_tables=6), ok)
    result = CliRunner().invoke(app, ["solve", str(ok), "--solver", "cpsat", "-O", "default_time_limit=20", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["status"] in ("optimal", "feasible") and doc["solver_bound"]["of"].startswith("the linearised model")
    assert doc["lower_bound"] is None and doc["lower_bound_of"] is None  # (certified bounds only: none was asked for)
    assert "shardopt bound" in doc["lower_bound_note"] and "certified_bound=true" in doc["lower_bound_note"]
    certified = CliRunner().invoke(app, ["solve", str(ok), "--solver", "cpsat", "-O", "default_time_limit=20", "--json", "-O", "certified_bound=true"])
    assert certified.exit_code == 0, certified.stderr
    with_bound = json.loads(certified.stdout)
    assert with_bound["lower_bound"] <= with_bound["predicted"]["max_cost_ms"] + 1e-9
    assert "certified" in with_bound["lower_bound_of"]
    bad = tmp_path / "bad.json"
    save(instance_doc([(1500, 4, 1.0)] * 3, [40_000] * 2), bad)
    result = CliRunner().invoke(app, ["solve", str(bad), "--solver", "cpsat"])
    assert result.exit_code == 3
    assert "no assignment of whole tables fits" in result.stderr


def test_lower_bound_is_reported_with_its_meaning() -> None:
    """The linear model's bound is the solver's own (`model_bound`), never the result's `lower_bound`, which only a
    certified bound of the plan cost fills; with the neural model there is none to ask for."""
    inst = make_instance(10, 4, seed=13, mem_factor=1.3)
    # (without the default solver's start: its plan, with replicas, is cheaper here and would be returned, with no
    # bound of the linear model, whose plans it is not among)
    r = solve_on_budget("cpsat", inst, CM, 8, neuroshard_share=0)
    info = r.info
    assert r.model_bound is not None and info["linear_bound"] == r.model_bound.value
    assert r.model_bound.of.startswith("the linearised model") and r.lower_bound is None
    assert not math.isnan(info["gap_to_linear_bound"])
    n = solve_on_budget("cpsat", inst, _neural(), 8, certified_bound=True)
    assert n.status.has_plan and n.lower_bound is None and "certified_bound" not in n.info


def test_cpsat_never_ends_above_the_default_solvers_plan() -> None:
    """The default solver's plan is cpsat's first warm start: where its items cannot express it (replicas here) and
    nothing they reach is cheaper, it is the plan returned, said in info, without the linear model's bound."""
    inst = make_instance(10, 4, seed=13, mem_factor=1.3)
    r = solve_on_budget("cpsat", inst, CM, 8)
    start = r.stats.warm_starts["neuroshard"]
    assert start is not None and r.predicted.max_cost <= start + 1e-12
    # the start is the default solve itself (its work budget, within the share): never above `shardopt solve`'s plan
    default = get_solver("neuroshard").solve(inst, CM)
    assert start == pytest.approx(default.predicted_cost, rel=1e-12) and r.predicted.max_cost <= default.predicted_cost + 1e-12
    alone = solve_on_budget("cpsat", inst, CM, 8, neuroshard_share=0)
    if start < alone.predicted.max_cost * (1 - 1e-9):
        assert "returned_warm_start" in r.info and r.model_bound is None and r.status.value != "optimal"
    assert "neuroshard" not in alone.stats.warm_starts


# ---------------------------------------------------------------------------------------------------------------
# exact neural mode


def test_exact_neural_finds_the_optimum_under_the_learned_cost() -> None:
    """The head encoded exactly (big-M ReLUs, softplus by tangents): on a tiny instance the optimum under the full
    neural model is found and proven, and the bound is within the softplus tangent error of it."""
    from solvers.exact import softplus_error

    cm = _neural()
    inst = make_instance(5, 2, seed=1, mem_factor=1.3)
    best, _ = brute_force(inst, cm)
    r = solve_on_budget("milp_exact_neural", inst, cm, 90)  # (HiGHS on a node limit: it proves the optimum well within)
    assert r.status is SolveStatus.optimal and check_plan(inst, r.plan).ok
    assert r.predicted_cost == pytest.approx(best, rel=1e-9)
    assert r.model_bound.value <= r.predicted_cost + 1e-9 and r.lower_bound is None
    assert r.predicted_cost - r.model_bound.value < 2 * softplus_error() + 1e-3  # (and the comm planes' error)
    assert r.info["iterations"][0]["relu_binaries"] > 0 and r.plan.params["exact_neural"] is True


def test_exact_neural_refuses_what_it_cannot_do() -> None:
    big = make_instance(13, 2, seed=1)
    r = get_solver("milp_exact_neural").solve(big, _neural(), time_limit=5)
    assert r.status is SolveStatus.no_solution and "at most 12 tables on at most 4 devices" in r.reason
    r = get_solver("milp_exact_neural").solve(make_instance(4, 2, seed=1), CM, time_limit=5)
    assert r.status is SolveStatus.no_solution and "needs the neural cost model" in r.reason
    with pytest.raises(ValueError, match="MILP backends"):
        get_solver("cpsat", exact_neural=True)


# ---------------------------------------------------------------------------------------------------------------
# column splits


@pytest.mark.parametrize("name", EXACT)
def test_column_splits_find_the_enumerated_optimum(name: str) -> None:
    """Splits offered for every table (halves, apart), all 6^6 such plans enumerated under the judge (one
    all-to-all per sharding type: whole tables table-wise, halves column-wise). A split beats every table-wise plan
    here, and the exact solvers find the optimum: their linear model has one set of comm planes per collective, each
    running only when some item of its kind is placed (2.866 ms; with one all-to-all of the summed widths they ended
    at 2.931). With `join_collectives` (the default) whole tables may join the column-wise collective (marked
    column_wise) and they find that optimum (2.797 ms, simulated). NeuroShard, whose search keeps the widths of each
    collective apart, finds the first, and with marks a plan below it (2.817 ms)."""
    inst = additive_instance(seed=3, n_tables=6, n_devices=3, mem_factor=1.3)
    best_split, choice = brute_force_split(inst, marked=False)
    best_marked, _ = brute_force_split(inst)
    best_whole, _ = brute_force(inst)
    assert best_marked < best_split < best_whole * (1 - 1e-3)  # a split is worth having here, and one collective more
    # (relaxation_share=0, one_collective_share=0: those plans lie outside the enumerated halves -- any widths, more
    # pieces, tables cut on their own device -- and with them cpsat ends below the best plan of halves here: 2.841 ms, 2.817)
    for join, best in ((False, best_split), (True, best_marked)):
        r = solve_on_budget(name, inst, CM, 90, seed=0, max_split=2, split_tables=6, neuroshard_share=0, relaxation_share=0, one_collective_share=0,
                       join_collectives=join)
        assert r.status.has_plan and check_plan(inst, r.plan).ok
        assert r.predicted_cost == pytest.approx(best, rel=1e-9), join
        assert any(s.column_wise for s in r.plan.shards) == join
    r = solve_on_budget(name, inst, CM, 90, seed=0, max_split=2, split_tables=6, neuroshard_share=0, relaxation_share=0, one_collective_share=0,
                   join_collectives=False)
    ns = get_solver("neuroshard", join_collectives=False).solve(inst, CM, time_limit=5, seed=0)
    assert ns.predicted_cost <= best_split * (1 + 1e-9)
    assert get_solver("neuroshard").solve(inst, CM, time_limit=5, seed=0).predicted_cost < best_split
    assert solve_on_budget(name, inst, CM, 20, seed=0).predicted_cost <= best_marked * (1 + 1e-9)
    assert r.predicted_cost == pytest.approx(CM.plan_costs(inst, r.plan).max_cost, rel=1e-9)
    split = [s for s in r.plan.shards if s.cols is not None]
    assert split and all(s.cols * 2 == inst.tables[inst.table_index()[s.table]].dim for s in split)
    by_table: dict[str, set[int]] = {}
    for s in split:
        by_table.setdefault(s.table, set()).add(s.device)
    assert all(len(devs) == 2 for devs in by_table.values())  # the halves of a table on distinct devices
    assert r.info["split_tables_used"] == sorted(by_table, key=lambda n: inst.table_index()[n])


def test_a_start_the_items_cannot_express_is_returned_when_cheaper() -> None:
    """No device holds t0 whole; greedy splits every table by rows over the 3 devices (2.265 ms), which whole tables and
    halves cannot express, and CP-SAT's best of those costs more (2.940): the answer is greedy's plan, said so."""
    inst = additive_instance(seed=1, n_tables=5, n_devices=3, mem_factor=1.3)
    doc = inst.model_dump(mode="json")
    sizes = table_bytes_array(inst)
    doc["topology"]["memory_bytes"] = int(sizes.max() * 0.6)
    doc["tables"] = [t for t, b in zip(doc["tables"], sizes) if b == sizes.max()] + [
        t for t, b in zip(doc["tables"], sizes) if b < sizes.max() and b <= sizes.max() * 0.6][:2]
    inst = instance_from_dict(doc)
    r = solve_on_budget("cpsat", inst, CM, 20, max_split=2, split_tables=0, row_wise=False, relaxation_share=0, presplit_share=0,
                   one_collective_share=0, neuroshard_share=0)
    greedy = get_solver("greedy").solve(inst, CM)
    assert check_plan(inst, r.plan).ok and r.predicted_cost == pytest.approx(greedy.predicted_cost, rel=1e-12)
    assert "cheaper than the best plan" in r.info["returned_warm_start"]
    alone = solve_on_budget("cpsat", inst, CM, 20, max_split=2, split_tables=0, row_wise=False, warm_start=False)
    assert alone.predicted_cost > r.predicted_cost


def test_column_splits_need_not_be_apart() -> None:
    """split_apart=False: the halves of a table may share a device (a count variable); the enumerated optimum over
    that larger space is found, and it is never worse than the apart one."""
    inst = additive_instance(seed=5, n_tables=5, n_devices=3, mem_factor=1.3)
    best_any, _ = brute_force_split(inst, apart=False)
    best_apart, _ = brute_force_split(inst, apart=True)
    assert best_any <= best_apart + 1e-12
    # (relaxation_share=0: the bound relaxation's plan, of any widths, lies outside the halves: with it 2.253 ms)
    r = solve_on_budget("cpsat", inst, CM, 90, seed=0, max_split=2, split_tables=5, split_apart=False, neuroshard_share=0, relaxation_share=0)
    assert check_plan(inst, r.plan).ok and r.predicted_cost == pytest.approx(best_any, rel=1e-9)


def test_a_table_too_big_for_any_device_is_split() -> None:
    """No device holds table t0 whole, so no table-wise plan exists; its halves fit: the splits find a plan, and
    table-wise the solver says why it cannot."""
    inst = additive_instance(seed=1, n_tables=5, n_devices=3, mem_factor=1.3)
    doc = inst.model_dump(mode="json")
    sizes = table_bytes_array(inst)
    doc["topology"]["memory_bytes"] = int(sizes.max() * 0.6)  # the largest table's halves (0.5 each) fit
    doc["tables"] = [t for t, b in zip(doc["tables"], sizes) if b == sizes.max()] + [
        t for t, b in zip(doc["tables"], sizes) if b < sizes.max() and b <= sizes.max() * 0.6][:2]
    inst = instance_from_dict(doc)
    # (warm_start=False: the starts are cheaper than the model's best plan here -- the relaxation's, of any column
    # widths, 2.040 ms; greedy's, every table split by rows, 2.265 -- and a start the items cannot express but that
    # is cheaper than the search's plan is the answer)
    r = solve_on_budget("cpsat", inst, CM, 20, max_split=2, split_tables=0, row_wise=False, warm_start=False)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    big = inst.tables[int(np.argmax(table_bytes_array(inst)))].name
    assert sum(1 for s in r.plan.shards if s.table == big) == 2 and big in r.info["split_tables_used"]
    # with row splits (the default) every table split by rows over the 3 devices is cheaper still (one all-to-all
    # for all; measured 2.265 ms against 2.940, simulated): the polish's layout sweep
    rows = solve_on_budget("cpsat", inst, CM, 20, max_split=2, split_tables=0, neuroshard_share=0, relaxation_share=0)
    assert check_plan(inst, rows.plan).ok and rows.predicted_cost < r.predicted_cost
    relaxed = solve_on_budget("cpsat", inst, CM, 20, max_split=2, split_tables=0, neuroshard_share=0)
    assert check_plan(inst, relaxed.plan).ok and relaxed.predicted_cost <= rows.predicted_cost * (1 + 1e-9)
    whole = solve_on_budget("cpsat", inst, CM, 20, max_split=1, tiered=False)
    assert whole.status is SolveStatus.no_solution and "fits on no device" in whole.reason
    assert "table-wise in HBM only" in whole.reason


def test_linearisation_is_exact_at_a_split_plan() -> None:
    from solvers.placement.split_items import build_items

    inst = make_instance(8, 3, seed=2, mem_factor=2.0)
    bm = CM.bind(inst)
    items = build_items(inst, bm, np.arange(8), 4)
    rng = np.random.default_rng(0)
    counts = np.zeros((items.num_items, 3), dtype=np.int64)
    for t in range(8):
        its = np.arange(items.first[t], items.first[t + 1])
        i = int(rng.choice(its))
        counts[i, rng.choice(3, size=int(min(items.parts[i], 3)), replace=False)] = 1 if items.parts[i] <= 3 else 0
        if items.parts[i] > 3:  # 4 shards on 3 devices cannot be apart: use the whole table
            counts[i] = 0
            counts[items.first[t], rng.integers(3)] = 1
    assert items.is_complete(counts)
    lin = linearize(bm, counts, "planes", items)
    full = bm.device_costs(items.device_states(counts), items.device_dists(counts))  # the judge: one all-to-all per type
    np.testing.assert_allclose(lin.device_costs(counts), full.total, rtol=1e-9)
    # and a one-shard move is exact in compute: move one shard of a split item to a device that has none of it
    split = [i for i in range(items.num_items) if items.parts[i] > 1 and counts[i].sum()]
    if split:
        i = split[0]
        src = int(np.flatnonzero(counts[i])[0])
        free = [d for d in range(3) if counts[i, d] == 0]
        if free:
            moved = counts.copy()
            moved[i, src], moved[i, free[0]] = 0, 1
            np.testing.assert_allclose(lin.compute_costs(moved)[[src, free[0]]],
                                       bm.compute_costs(items.device_states(moved)).sum(axis=-1)[[src, free[0]]], rtol=1e-9)


def test_neuroshard_plans_are_expressible_as_pieces() -> None:
    """NeuroShard's halvings (a half and two quarters, ...) are dyadic pieces: its plan becomes counts over the
    items and back with the same cost (its whole tables marked column_wise again), so it can warm-start the exact
    solvers."""
    from solvers.placement.rules import column_wise_allowed
    from solvers.placement.split_items import build_items

    inst = make_instance(10, 4, seed=3, mem_factor=1.3)
    bm = CM.bind(inst)
    r = get_solver("neuroshard", data_parallel=False, row_wise=False).solve(inst, CM, time_limit=20)  # (replicas and row
    # blocks are no items: the exact solvers take such a start as it is)
    deeper = {}
    for s in r.plan.shards:
        t = inst.table_index()[s.table]
        w = s.width(inst.tables[t])
        if w != inst.tables[t].dim:
            deeper[t] = max(deeper.get(t, 1), inst.tables[t].dim // w)
    items = build_items(inst, bm, None, 1, True, deeper, whole_column_wise=column_wise_allowed(inst))  # (as cpsat's, join_collectives)
    counts = items.counts_from_shards(inst, r.plan.shards, 4)
    assert counts is not None and items.is_complete(counts)
    assert set(items.split_used(counts)) == set(deeper)
    again = items.shards(counts, inst)
    from shardopt.core.ir import Plan

    assert check_plan(inst, Plan(shards=again)).ok
    assert CM.plan_costs(inst, again).max_cost == pytest.approx(r.predicted_cost, rel=1e-9)


def test_presplit_warm_start_splits_a_heavy_table() -> None:
    """One table carries several devices' worth of lookups: table-wise, the device holding it is the plan's cost.
    The pre-split warm start cuts it into pieces; the exact solver starts from (at least) that plan and never
    returns worse, with the table split."""
    from solvers.neuroshard.pieces import presplit_plan

    inst = make_instance(12, 4, seed=4, mem_factor=2.0)
    doc = inst.model_dump(mode="json")
    doc["tables"][0]["dim"] = 128
    doc["tables"][0]["pooling_factor"] = 200.0
    inst = instance_from_dict(doc)
    bm = CM.bind(inst)
    heavy = inst.tables[0].name
    greedy = min(get_solver(h).solve(inst, CM).predicted_cost for h in HEURISTICS)
    got = presplit_plan(inst, bm, 8, whole_column_wise=True)  # (as cpsat's, join_collectives)
    assert got is not None
    shards, cost = got
    assert sum(1 for s in shards if s.table == heavy) > 1 and cost < greedy
    assert CM.plan_costs(inst, shards).max_cost == pytest.approx(cost, rel=1e-9)
    r = solve_on_budget("cpsat", inst, CM, 10, neuroshard_share=0)  # (cpsat's own search from the pre-split start)
    assert check_plan(inst, r.plan).ok and r.predicted_cost <= cost + 1e-12
    assert heavy in r.info["split_tables_used"] and r.stats.warm_starts["presplit"] == pytest.approx(cost)


def test_cli_solver_options(tmp_path) -> None:
    """`solve -O KEY=VALUE` passes solver options (JSON values); an unknown option or a bad value is bad input
    (exit 2) naming it."""
    import json

    from typer.testing import CliRunner

    from shardopt.cli import app

    runner = CliRunner()
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(make_instance(8, 2, seed=1, mem_factor=1.5).model_dump(mode="json")))
    r = runner.invoke(app, ["solve", str(path), "-s", "cpsat", "-O", "max_split=1", "-O", "deterministic=true", "-O", "default_time_limit=5", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["plan"]["params"]["max_split"] == 1 and doc["plan"]["params"]["layout"] == "table-wise"
    r = runner.invoke(app, ["solve", str(path), "-s", "cpsat", "-O", "max_splits=2"])
    assert r.exit_code == 2 and "max_splits" in r.output and "max_split" in r.output
    r = runner.invoke(app, ["solve", str(path), "-s", "cpsat", "-O", "max_split=3"])
    assert r.exit_code == 2 and "option max_split=3 for solver 'cpsat'" in r.output
    r = runner.invoke(app, ["solve", str(path), "-s", "cpsat", "-O", "max_split"])
    assert r.exit_code == 2 and "KEY=VALUE" in r.output


def test_cli_says_what_the_bound_of_a_neighbourhood_solve_is(monkeypatch, tmp_path) -> None:
    """In neighbourhood mode the linear model's bound is only its table cuts: the summary says so, that it is no bound
    of the plan cost, and where a certified bound comes from; with certified_bound=true the lower bound line is the
    analytic model's certified bound, with its gap."""
    import json

    from typer.testing import CliRunner

    import solvers.exact.constants as constants
    from shardopt.cli import app

    monkeypatch.setattr(constants, "LARGE_MODEL", 10)
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(make_instance(16, 4, seed=7, mem_factor=1.4).model_dump(mode="json")))
    # (6 s: the warm starts come first, and the neighbourhoods - whose first linearisation gives the table cuts - run
    # only with more than 0.5 s left; at 3 s a busy machine left none, and the bound line was missing)
    runner = CliRunner()
    # (neuroshard_share=0: cpsat's own plan, whose bound is the subject, not the default solver's start returned)
    r = runner.invoke(app, ["solve", str(path), "-s", "cpsat", "-O", "neighbourhood=2", "-O", "neuroshard_share=0", "-O", "default_time_limit=6"])
    out = " ".join(r.stdout.split())
    assert r.exit_code == 0 and "of the linear model's table cuts" in out and "not a bound of the plan cost" in out, r.output
    assert "shardopt bound" in out and "lower bound" not in out
    r = runner.invoke(app, ["solve", str(path), "-s", "cpsat", "-O", "neighbourhood=2", "-O", "neuroshard_share=0", "-O", "certified_bound=true",
                            "-O", "default_time_limit=6"])
    out = " ".join(r.stdout.split())
    assert r.exit_code == 0 and "lower bound" in out and "(certified, the analytic model) (gap" in out, r.output
    assert "shardopt bound" not in out


def test_large_models_are_solved_by_neighbourhoods(monkeypatch) -> None:
    """Over LARGE_MODEL pairs the model is re-solved a neighbourhood at a time (slowest and light devices free, the
    rest fixed): every plan it keeps is valid and never worse than the warm start. (The threshold is lowered here
    so that a small instance counts as large.)"""
    import solvers.exact.constants as constants

    monkeypatch.setattr(constants, "LARGE_MODEL", 10)
    inst = make_instance(24, 8, seed=7, mem_factor=1.4)
    # (neuroshard_share=0: the neighbourhoods' own plan, not the default solver's start returned, is the subject)
    r = solve_on_budget("cpsat", inst, CM, 6, seed=0, neighbourhood=4, neuroshard_share=0)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    assert r.predicted_cost <= r.stats.warm_start.cost + 1e-12
    its = r.info["iterations"]
    assert its and all(len(it["neighbourhood_devices"]) <= 4 for it in its)
    assert r.model_bound is None or r.model_bound.value <= r.predicted_cost + 1e-9
    assert r.lower_bound is None
    assert get_solver("cpsat").params()["neighbourhood"] == 16
    assert "certified_bound" not in r.info and get_solver("cpsat").params()["certified_bound"] is False
    # asked for, the analytic model's certified bound (a share of the time) is the result's lower bound
    c = solve_on_budget("cpsat", inst, CM, 6, seed=0, neighbourhood=4, certified_bound=True, neuroshard_share=0)
    cb = c.info["certified_bound"]
    assert cb["value"] is not None and cb["value"] <= c.predicted_cost + 1e-9 and cb["value"] <= r.predicted_cost + 1e-9
    assert c.lower_bound == pytest.approx(cb["value"]) and c.plan.lower_bound == c.lower_bound
    assert c.lower_bound_of.startswith("every table- and column-wise plan")


def test_linear_model_prices_each_collective_apart_and_only_when_it_runs() -> None:
    """One set of comm planes per collective (whole tables table-wise, pieces column-wise), each in its own widths
    and total: on two hosts, around a plan with a halved and a quartered table, the linear model (a) is exact at the
    point, (b) stays exact after moving one piece or one whole table (the analytic all-to-all is a max of linear
    pieces in own / host / total width, which the planes find; measured 40 of 40), (c) charges no column-wise
    collective -- no start-up -- once no table is split, as the judge does, and (d) stays exact after merging a split
    table into one device, which changes both collectives' totals."""
    from test_linear_search import split_case

    inst, bm, items, counts, caps = split_case()
    lin = linearize(bm, counts, "planes", items)
    assert lin.dists == ("table_wise", "column_wise") and not lin.always[1]

    def judged(c: np.ndarray) -> np.ndarray:
        return bm.device_costs(items.device_states(c), items.device_dists(c)).total

    np.testing.assert_allclose(lin.device_costs(counts), judged(counts), rtol=1e-9)
    rng = np.random.default_rng(0)
    exact = 0
    for _ in range(40):
        moved = counts.copy()
        i = int(rng.choice(np.flatnonzero(counts.sum(axis=1))))
        src = int(rng.choice(np.flatnonzero(counts[i])))
        free = [d for d in range(8) if counts[items.first[items.table[i]] : items.first[items.table[i] + 1], d].sum() == 0]
        moved[i, src], moved[i, int(rng.choice(free))] = 0, 1
        exact += bool(np.allclose(lin.comm_costs(moved), judged(moved) - bm.compute_costs(items.device_states(moved)).sum(axis=-1), rtol=1e-9))
    assert exact >= 36
    whole = counts.copy()
    for t in (0, 1):  # no split table left: no column-wise collective in either model
        whole[items.first[t] : items.first[t + 1]] = 0
        whole[items.first[t], t] = 1
    assert (lin.collective_costs(whole)[1] == 0).all() and (items.device_dists(whole)[1] == 0).all()
    merged = counts.copy()
    merged[items.first[0] : items.first[0] + 2] = 0
    merged[items.first[0], 0] = 1  # table 0 whole again; table 1 still quartered
    truth = judged(merged)
    assert np.abs(lin.device_costs(merged) - truth).max() <= 1e-6 * truth.max()  # (measured: 2e-15)


def odd_units_doc() -> dict:
    """4 devices; t0 has 7 four-column units (no exact halves) and is 1.7 devices large; t1 and t2 fit whole."""
    return {"name": "odd-units-4", "tables": [
        {"name": "t0", "rows": 1_400_000, "dim": 28, "pooling_factor": 6.0, "access": {"zipf": 1.1}},
        {"name": "t1", "rows": 100_000, "dim": 108, "pooling_factor": 24.0, "access": {"zipf": 1.0}},
        {"name": "t2", "rows": 50_000, "dim": 60, "pooling_factor": 9.7, "access": {"zipf": 0.7}}],
        "topology": {"num_devices": 4, "devices_per_host": 4, "hardware": "h100", "memory_bytes": 95_000_000},
        "workload": {"batch_size": 16384, "optimizer": "rowwise_adagrad"}}


def test_items_hold_uneven_column_pieces():
    """A warm start's uneven pieces (NeuroShard's 28 -> 12 + 16) are items: the plan is expressible, covers the
    table by widths, and comes back as the same shards."""
    from shardopt.core.ir import Shard
    from solvers.placement.split_items import build_items

    inst = instance_from_dict(odd_units_doc())
    bm = CM.bind(inst)
    items = build_items(inst, bm, widths={0: {12, 16}})
    assert sorted(items.width[items.table == 0].tolist()) == [12, 16, 28]
    assert items.is_whole.tolist() == [True, False, False, True, True]
    assert items.parts.tolist() == [1, 1, 2, 1, 1]  # the most pieces of each width a plan can hold
    shards = [Shard(table="t0", device=0, col_offset=0, cols=12), Shard(table="t0", device=1, col_offset=12, cols=16),
              Shard(table="t1", device=2), Shard(table="t2", device=3)]
    counts = items.counts_from_shards(inst, shards, 4)
    assert counts is not None and items.is_complete(counts)
    assert sorted((s.table, s.device, s.cols) for s in items.shards(counts, inst)) == sorted((s.table, s.device, s.cols) for s in shards)
    counts[items.first[0] + 1, 1] = 0  # drop the 16-column piece (device 1): t0 no longer covered
    assert not items.is_complete(counts)


@pytest.mark.parametrize("name", ["cpsat", "milp_highs"])
def test_exact_solvers_keep_uneven_pieces_of_their_start(name: str) -> None:
    """t0 fits on no device whole and its dim has no equal 4-aligned halves: the exact solvers' own (dyadic) pieces
    cannot hold it, NeuroShard's uneven ones can; the exact loop re-places them in HBM, never worse than the start."""
    inst = instance_from_dict(odd_units_doc())
    r = solve_on_budget(name, inst, CM, 6, seed=0)
    assert r.status.has_plan, r.reason
    assert check_plan(inst, r.plan).ok
    assert all(s.rows is None and s.kernel.value == "fused" for s in r.plan.shards)  # all in HBM, no row split
    assert r.predicted_cost <= r.info["tiered"]["start_cost"] * (1 + 1e-9)
    assert len([s for s in r.plan.shards if s.table == "t0"]) >= 2


@pytest.mark.slow  # (make test-all; 18 s)
def test_one_collective_warm_start_on_many_devices() -> None:
    """The one-collective start (every table cut, one all-to-all) is among the exact solver's warm starts, and on many
    devices with few tables each it is the start to beat: the plan is no dearer than it."""
    inst = make_instance(48, 16, seed=0, mem_factor=2.0, per_host=8, hardware="a100", batch_size=65536)
    r = solve_on_budget("cpsat", inst, CM, 20)
    starts = r.stats.warm_starts
    assert starts["one_collective"] is not None and starts["one_collective"] < starts["presplit"]
    assert check_plan(inst, r.plan).ok and r.predicted_cost <= starts["one_collective"] + 1e-12
    assert r.plan.params["one_collective_share"] > 0
