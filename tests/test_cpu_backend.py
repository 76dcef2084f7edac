"""The cpu backend times fbgemm's fused TBE per device; the measurement cache answers repeats without re-timing."""

from __future__ import annotations

import numpy as np
import pytest

from shardopt.core.ir import Plan, Shard, instance_from_dict
from shardopt.core.stats import table_stats
from shardopt.data.scale import scale_instance
from shardopt.measure.backends.base import TimingSettings
from shardopt.measure.backends.cpu import CpuBackend, fbgemm_available
from shardopt.measure.backends.timing import FbgemmTBE, shard_inputs
from shardopt.measure.cache import MeasurementCache, measurement_key
from shardopt.measure.evaluate import BackendUnavailableError, EvaluationError, evaluate_plan

pytestmark = pytest.mark.skipif(fbgemm_available() is not None, reason=str(fbgemm_available()))


def tiny(pf_a: float = 4.0, pf_b: float = 4.0, opt: str = "rowwise_adagrad", dtype: str = "fp32"):
    tables = [
        {"name": "a", "rows": 5000, "dim": 16, "pooling_factor": pf_a, "access": {"zipf": 1.0}},
        {"name": "b", "rows": 20000, "dim": 32, "pooling_factor": pf_b, "access": {"zipf": 0.7}},
        {"name": "c", "rows": 800, "dim": 8, "pooling_factor": 2.0, "access": {"zipf": 1.2}},
    ]
    return instance_from_dict(
        {
            "tables": tables,
            "topology": {"num_devices": 2, "devices_per_host": 2, "memory_bytes": 10**9, "hardware": "v100"},
            "workload": {"batch_size": 256, "optimizer": opt, "weight_dtype": dtype},
        }
    )


PLAN = Plan(shards=[Shard(table="a", device=0), Shard(table="b", device=1, cols=16), Shard(table="b", device=0, col_offset=16), Shard(table="c", device=1)])


def test_four_positive_columns(tmp_path):
    ev = evaluate_plan(tiny(), PLAN, "cpu", repeats=3, warmup=1, cache=MeasurementCache(tmp_path / "c.sqlite"))
    assert ev.costs.columns.shape == (2, 4)
    assert np.all(ev.costs.columns > 0)
    assert "fbgemm" in ev.judge and "modelled" in ev.judge and ev.batch_size == 256
    assert all(t["repeats"] == 3 and t["fwd_iqr_ms"] >= 0 for t in ev.timings)


def test_larger_pooling_factor_costs_more():
    backend = CpuBackend()
    settings = TimingSettings(batch_size=2048, repeats=5, warmup=2)
    shard = [Shard(table="a", device=0)]
    light = backend.time_shards(tiny(pf_a=1.0), shard, settings)
    heavy = backend.time_shards(tiny(pf_a=64.0), shard, settings)
    assert heavy.fwd_ms > light.fwd_ms and heavy.bwd_ms > light.bwd_ms


def test_cache_hit_does_not_retime(tmp_path, monkeypatch):
    cache = MeasurementCache(tmp_path / "c.sqlite")
    first = evaluate_plan(tiny(), PLAN, "cpu", repeats=2, warmup=0, cache=cache)
    assert len(cache) == 2

    def boom(*a, **k):
        raise AssertionError("timed again despite a cache hit")

    monkeypatch.setattr(CpuBackend, "prepare", boom)
    again = evaluate_plan(tiny(), PLAN, "cpu", repeats=2, warmup=0, cache=cache)
    assert np.array_equal(first.costs.columns, again.costs.columns)
    assert all(t["cached"] for t in again.timings)
    with pytest.raises(AssertionError, match="timed again"):  # a different batch is a different measurement
        evaluate_plan(scale_instance(tiny(), batch_size=128), PLAN, "cpu", repeats=2, warmup=0, cache=cache)


def test_cache_key_covers_what_was_timed():
    inst, shards = tiny(), [Shard(table="a", device=0)]
    s = TimingSettings(batch_size=64)
    k = measurement_key("cpu", "k", "hw", inst, shards, s)
    assert k == measurement_key("cpu", "k", "hw", inst, shards, s)
    assert k != measurement_key("cpu", "k", "hw", inst, shards, TimingSettings(batch_size=64, seed=1))
    assert k != measurement_key("cpu", "k", "hw", tiny(pf_a=5.0), shards, s)
    assert k != measurement_key("cpu", "k", "hw", tiny(opt="sgd"), shards, s)
    assert k != measurement_key("cpu", "k", "hw", inst, [Shard(table="a", device=0, cols=8)], s)


def test_fused_inputs_are_table_major_fbgemm_format():
    inst = tiny()
    shards = [Shard(table="a", device=0), Shard(table="c", device=0)]
    inputs = shard_inputs(inst, shards, 128, seed=0)
    kernel = FbgemmTBE(inputs.rows, inputs.dims, inputs.dtypes, inst.workload.optimizer, device="cpu")
    batch = kernel.prepare(inputs.traces)
    indices, offsets = batch.indices.numpy(), batch.offsets.numpy()
    assert len(offsets) == 2 * 128 + 1 and offsets[0] == 0 and offsets[-1] == len(indices)
    a = table_stats(indices[: offsets[128]], offsets[:129])
    assert a.pooling_factor == pytest.approx(4.0, abs=0.5 / 128)
    assert inputs.rows == [5000, 800]
    capped = shard_inputs(inst, shards, 128, seed=0, max_rows=100)
    assert max(i.max() for i, _ in capped.traces) < 100 and capped.rows == [100, 100]


def test_adam_runs_the_torch_kernel_and_says_why():
    t = CpuBackend().time_shards(tiny(opt="adam"), [Shard(table="a", device=0)], TimingSettings(batch_size=64, repeats=2, warmup=0))
    assert "torch" in t.kernel and "no fused adam" in t.kernel and t.fwd_ms > 0


@pytest.mark.parametrize("opt,dtype", [("sgd", "fp16"), ("rowwise_adagrad", "fp16")])
def test_optimizers_and_dtypes_run(opt, dtype):
    t = CpuBackend().time_shards(tiny(opt=opt, dtype=dtype), [Shard(table="a", device=0)], TimingSettings(batch_size=64, repeats=2, warmup=0))
    assert t.fwd_ms > 0 and t.bwd_ms > 0


def test_bad_settings_are_user_errors():
    with pytest.raises(EvaluationError, match="repeats"):
        evaluate_plan(tiny(), PLAN, "cpu", repeats=0, cache=False)


def test_cuda_backend_without_gpu_is_unavailable():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(BackendUnavailableError):
        evaluate_plan(tiny(), PLAN, "cuda", repeats=1, warmup=0, cache=False)
