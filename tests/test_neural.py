"""The neural cost model: trains, ships, is permutation-invariant, and its incremental API is exact."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from costmodels.neural import SHIPPED, NeuralCostModel, NeuralWeights
from costmodels.registry import UnknownCostModelError, get_cost_model
from costmodels.train import TrainError, TrainSettings, evaluate, train
from shardopt.core.ir import Plan, Shard, load_instance
from shardopt.data.pools import generate_pool, load_pool
from shardopt.measure.collect import CollectSettings, collect, read_samples

ROOT = Path(__file__).resolve().parents[1]
RECORD = SHIPPED.with_suffix(".json")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("nn") / "d.jsonl"
    collect(generate_pool(n=30, seed=4), path, CollectSettings(samples=300, max_tables=6, seed=0, comm_fraction=0.2, vary_batch=True,
                                                                      rescale_histograms=False))
    return list(read_samples(path))


def test_training_lowers_the_loss(tiny_data):
    w = train(tiny_data, TrainSettings(epochs=12, batch_size=32, seed=0, threads=1))
    hist = w.meta["train"]["val_history_compute"]
    assert min(hist[-3:]) < 0.5 * hist[0]
    hist_c = w.meta["train"]["val_history_comm"]
    assert min(hist_c[-3:]) < 0.5 * hist_c[0]
    again = train(tiny_data, TrainSettings(epochs=12, batch_size=32, seed=0, threads=1))
    assert all(np.array_equal(w.arrays[k], again.arrays[k]) for k in w.arrays)  # same seed, same weights


def test_training_refuses_unusable_data(tiny_data):
    with pytest.raises(TrainError, match="comm"):
        train([s for s in tiny_data if s["kind"] == "compute"], TrainSettings(epochs=1))
    with pytest.raises(TrainError, match="compute samples"):
        train(tiny_data[:3], TrainSettings(epochs=1))


def test_fine_tuning_starts_from_the_base_model(tiny_data):
    """With a base, training starts from its weights and keeps its input normalisation: at a learning rate of
    nothing, the result predicts what the base does; a base of another feature set is refused, naming it."""
    base = train(tiny_data[::2], TrainSettings(epochs=3, batch_size=32, seed=0, threads=1))
    tuned = train(tiny_data, TrainSettings(epochs=1, batch_size=32, seed=1, threads=1, learning_rate=1e-12), base=base)
    for k in base.arrays:
        if k.endswith("_lo"):  # the clamping range widened to cover both data sets
            assert np.all(tuned.arrays[k] <= base.arrays[k])
        elif k.endswith("_hi"):
            assert np.all(tuned.arrays[k] >= base.arrays[k])
        else:
            np.testing.assert_allclose(tuned.arrays[k], base.arrays[k], rtol=1e-5, atol=1e-6)
    assert "base" in tuned.meta
    other = NeuralWeights(base.arrays, {**base.meta, "shard_features": ["rows"]})
    with pytest.raises(TrainError, match="base model: its shard_features"):
        train(tiny_data, TrainSettings(epochs=1, threads=1), base=other)


def test_weights_round_trip(tiny_data, tmp_path):
    w = train(tiny_data, TrainSettings(epochs=1, threads=1))
    w.save(tmp_path / "m.npz")
    back = NeuralWeights.load(tmp_path / "m.npz")
    assert back.meta == json.loads(json.dumps(w.meta))
    r1, r2 = evaluate(w, tiny_data), evaluate(back, tiny_data)
    assert r1["fwd_compute"]["mape"] == pytest.approx(r2["fwd_compute"]["mape"], rel=1e-4)  # float32 on disk
    (tmp_path / "bad.npz").write_bytes(b"junk")
    with pytest.raises(ValueError, match="not a shardopt neural cost model"):
        NeuralWeights.load(tmp_path / "bad.npz")
    with pytest.raises(UnknownCostModelError, match="no such file"):
        get_cost_model(str(tmp_path / "missing.npz"))


def test_shipped_weights_predict_the_recorded_check_sample(tmp_path):
    """The shipped model on its fixed held-out check sample (regenerated from the recorded command) gives the
    recorded figures."""
    record = json.loads(RECORD.read_text())
    check = record["check"]
    path = tmp_path / "check.jsonl"
    collect(load_pool(ROOT / check["pool"]), path, CollectSettings(**check["settings"]))
    got = evaluate(NeuralWeights.load(SHIPPED), list(read_samples(path)))
    for column, m in check["metrics"].items():
        assert got[column]["mape"] == pytest.approx(m["mape"], rel=1e-4, abs=1e-9)
        assert got[column]["kendall_tau"] == pytest.approx(m["kendall_tau"], abs=1e-3)


@pytest.fixture(scope="module")
def bound():
    inst = load_instance(ROOT / "instances" / "examples" / "tight.json")
    return inst, NeuralCostModel().bind(inst)


def test_permuting_tables_or_devices_changes_nothing(bound):
    inst, bm = bound
    rng = np.random.default_rng(0)
    device_of = rng.integers(0, inst.topology.num_devices, size=len(inst.tables))
    base = bm.assignment_costs(device_of).columns
    # tables in another order (same placement): sum pooling makes this exact up to float rounding
    order = rng.permutation(len(inst.tables))
    shuffled = inst.model_copy(update={"tables": [inst.tables[i] for i in order]})
    again = NeuralCostModel().bind(shuffled).assignment_costs(device_of[order]).columns
    assert np.allclose(base, again, rtol=1e-9, atol=1e-12)
    # devices relabelled within their hosts (hosts keep their shape): costs move with the devices
    per = inst.topology.devices_per_host
    perm = np.concatenate([h * per + rng.permutation(per) for h in range(inst.topology.num_devices // per)])
    moved = bm.assignment_costs(perm[device_of]).columns
    assert np.allclose(moved[perm], base, rtol=1e-9, atol=1e-12)


def test_incremental_api_agrees_with_full_reevaluation(bound):
    inst, bm = bound
    rng = np.random.default_rng(1)
    device_of = rng.integers(0, inst.topology.num_devices, size=len(inst.tables))
    states = np.zeros((inst.topology.num_devices, bm.state_size))
    np.add.at(states, device_of, bm.table_states)
    t = 5
    added = bm.compute_after_adding(states, t)
    removed = bm.compute_after_removing(states, t)
    for d in range(inst.topology.num_devices):
        plan_add = [Shard(table=x.name, device=int(device_of[i])) for i, x in enumerate(inst.tables)] + []
        # full re-evaluation: encode every table of the device again
        members = [i for i in range(len(inst.tables)) if device_of[i] == d]
        full_add = bm.compute_costs(bm.shard_states(np.array(members + [t]), bm.table_dims[members + [t]], np.ones(len(members) + 1), np.ones(len(members) + 1)).sum(axis=0))
        assert np.allclose(added[d], full_add, rtol=1e-9)
        if device_of[t] == d:
            rest = [i for i in members if i != t]
            full_rm = bm.compute_costs(bm.shard_states(np.array(rest), bm.table_dims[rest], np.ones(len(rest)), np.ones(len(rest))).sum(axis=0)) if rest else np.zeros(2)
            assert np.allclose(removed[d], full_rm, rtol=1e-9, atol=1e-12)
    assert plan_add  # the plan-level path agrees too
    costs = bm.plan_costs(Plan(shards=plan_add)).columns[:, :2]
    assert np.allclose(costs, bm.compute_costs(states))


def test_neural_cost_model_drives_a_solver(bound):
    from solvers.catalog import get_solver

    inst, _ = bound
    result = get_solver("greedy").solve(inst, get_cost_model("neural"))
    assert result.status.has_plan and result.plan.cost_model.startswith("neural")


def test_incremental_comm_equals_full_recomputation(bound):
    from costmodels.base import BoundCostModel

    inst, bm = bound
    rng = np.random.default_rng(3)
    dims = rng.integers(0, 500, size=inst.topology.num_devices).astype(float)
    cands = np.array([0, 2, 5, 7])
    fast = bm.comm_totals_after_adding(dims, 36.0, cands)
    slow = BoundCostModel.comm_totals_after_adding(bm, dims, 36.0, cands)
    assert np.allclose(fast, slow, rtol=1e-9, atol=1e-12)
