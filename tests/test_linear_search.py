"""The local search of the linearised model (solvers.exact.linear_search) that the exact solvers run on each new plan.

- its vectorised step evaluation equals recomputing the objective after each step, on several hosts (where a step
  also moves the host widths and so every host peer's comm) with column pieces kept apart;
- the plan it returns is complete, fits in memory, keeps pieces apart, is never worse in the linear model than the
  start, and the same seed gives the same plan;
- the exact solvers record each search and validate the option.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_instance, solve_on_budget

from costmodels.analytic import AnalyticCostModel
from shardopt.core.plan_check import check_plan
from solvers.catalog import get_solver
from solvers.exact.linear_search import _State, linear_local_search, step_deltas
from solvers.exact.linearize import linearize
from solvers.placement.split_items import build_items

CM = AnalyticCostModel()


def split_case(seed: int = 3, n_tables: int = 14, n_devices: int = 8, per_host: int = 4):
    """A two-host instance, tables 0-2 offered halves and quarters, and a plan in which table 0 is halved onto two
    devices of different hosts and table 1 is quartered."""
    inst = make_instance(n_tables, n_devices, seed=seed, mem_factor=2.5, per_host=per_host)
    bm = CM.bind(inst)
    items = build_items(inst, bm, split=np.array([0, 1, 2]), max_split=4)
    counts = np.zeros((items.num_items, n_devices), dtype=np.int64)
    for t in range(n_tables):
        counts[items.first[t], (3 * t) % n_devices] = 1
    counts[items.first[0]] = 0
    counts[items.first[0] + 1, [0, per_host % n_devices + 3]] = 1  # the halves of table 0 (on two hosts when there are two)
    counts[items.first[1]] = 0
    counts[items.first[1] + 2, [1, 2, 5, 6]] = 1  # the quarters of table 1
    caps = np.array(inst.topology.capacities(), dtype=np.int64)
    assert items.is_complete(counts) and (items.device_bytes(counts) <= caps).all()
    return inst, bm, items, counts, caps


def test_step_deltas_equal_recomputing_the_objective() -> None:
    inst, bm, items, counts, caps = split_case()
    lin = linearize(bm, counts, "planes", items)
    s = _State(lin, items.size, counts)
    assert s.multi_host, "the case must have host-width terms (k2) for this test to mean anything"
    M = float(s.cost.max())
    scale = 1e-3 * M

    def F(c: np.ndarray) -> np.ndarray:
        return np.exp(np.minimum((c - M) / scale, 60.0))

    before = F(s.cost).sum()
    rows = np.arange(len(s.item))
    dmove, dswap = step_deltas(s, rows, F, caps.astype(np.float64))
    start = s.dev.copy()

    def recomputed(dev: np.ndarray) -> tuple[float, bool]:
        s.dev = dev
        s.refresh()
        valid = (s.mem <= caps).all() and (s.occ <= 1).all()
        out = F(s.cost).sum() - before
        s.dev = start.copy()
        s.refresh()
        return out, valid

    checked = 0
    for r in rows:
        for q in range(s.D):
            dev = start.copy()
            dev[r] = q
            want, valid = recomputed(dev)
            if q == start[r]:
                assert dmove[r, q] == np.inf
            elif not valid:
                assert dmove[r, q] == np.inf
            else:
                assert dmove[r, q] == pytest.approx(want, rel=1e-7, abs=1e-9 * before)
                checked += 1
        for j in rows[::3]:
            if start[j] == start[r] or s.table[j] == s.table[r] or s.kind[j] != s.kind[r]:
                assert dswap[r, j] == np.inf  # (a whole table for a piece changes two collectives: not a step)
                continue
            dev = start.copy()
            dev[r], dev[j] = start[j], start[r]
            want, valid = recomputed(dev)
            if not valid:
                assert dswap[r, j] == np.inf
            else:
                assert dswap[r, j] == pytest.approx(want, rel=1e-7, abs=1e-9 * before)
                checked += 1
    assert checked > 100


@pytest.mark.parametrize("per_host", [4, 8])
def test_search_keeps_plans_valid_and_never_worse(per_host: int) -> None:
    inst, bm, items, counts, caps = split_case(per_host=per_host)
    lin = linearize(bm, counts, "planes", items)
    res = linear_local_search(lin, items.size, caps, counts, seed=0, time_limit=30)
    assert res.stopped == "stall"  # (30 s is far more than it needs: it stops by itself)
    assert res.cost <= lin.cost(counts) + 1e-12 and res.cost == pytest.approx(lin.cost(res.counts))
    assert res.steps > 0 and res.cost < res.start_cost  # (the round-robin start is far from balanced)
    costs = [lin.cost(c) for c in res.path]
    assert all(b < a for a, b in zip(costs, costs[1:]))  # each plan on the path is a new best
    for c in res.plans():
        assert items.is_complete(c) and (items.device_bytes(c) <= caps).all()
        assert (c.sum(axis=1) == counts.sum(axis=1)).all()  # pieces are moved whole: the same pieces, never re-cut
    again = linear_local_search(lin, items.size, caps, counts, seed=0, time_limit=30)
    assert np.array_equal(again.counts, res.counts) and again.steps == res.steps


def test_a_plan_nothing_improves_comes_back_unchanged() -> None:
    inst, bm, items, counts, caps = split_case()
    lin = linearize(bm, counts, "planes", items)
    res = linear_local_search(lin, items.size, caps, counts, seed=1, time_limit=30, max_steps=0)
    assert res.stopped == "max_steps" and np.array_equal(res.counts, counts) and res.path == ()
    one = make_instance(5, 1, seed=0)
    bm1 = CM.bind(one)
    items1 = build_items(one, bm1)
    c1 = np.ones((5, 1), dtype=np.int64)
    r1 = linear_local_search(linearize(bm1, c1, "planes", items1), items1.size, np.array(one.topology.capacities()), c1)
    assert r1.stopped == "nothing to move" and np.array_equal(r1.counts, c1)


def test_exact_solvers_record_their_local_searches() -> None:
    inst = make_instance(24, 4, seed=5, mem_factor=1.3)
    r = solve_on_budget("cpsat", inst, CM, 4, seed=0, max_split=1)
    assert r.status.has_plan and check_plan(inst, r.plan).ok
    rows = r.info["local_searches"]
    assert rows and rows[0]["expansion_cost"] == pytest.approx(r.stats.warm_start.cost)
    for row in rows:
        assert row["full_cost"] is None or row["improved"] == (row["full_cost"] < row["expansion_cost"] - 1e-9 * row["expansion_cost"])
    assert r.predicted_cost <= min(row["full_cost"] for row in rows if row["full_cost"] is not None) + 1e-12
    off = solve_on_budget("cpsat", inst, CM, 2, seed=0, max_split=1, search_share=0)
    assert "local_searches" not in off.info
    assert get_solver("cpsat").params()["search_share"] == 0.25
    with pytest.raises(ValueError, match="search_share"):
        get_solver("cpsat", search_share=1.0)
