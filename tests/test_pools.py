"""Table pools, the train/test split, the suite families and the DLRM importer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardopt.core.ir import IRError, load_instance
from shardopt.core.memory import table_bytes_array
from shardopt.core.stats import table_stats
from shardopt.data.pools import DLRM, generate_pool, load_pool, pool_from_dict, pool_statistics, save_pool, split_pool
from shardopt.data.suites import FAMILIES, SuiteError, first_fit_decreasing_fits, generate_suite, tight_memory

STANDARD_POOL = Path(__file__).resolve().parents[1] / "instances" / "pools" / "dlrm-synthetic-856.json"


@pytest.fixture(scope="module")
def pool():
    return generate_pool(n=200, seed=3)


def test_pool_matches_published_moments(pool):
    s = pool_statistics(pool)
    assert s["rows_mean"] == pytest.approx(DLRM.rows_mean, rel=0.01)
    assert s["rows_std"] == pytest.approx(DLRM.rows_std, rel=0.02)
    assert s["rows_min"] >= DLRM.rows_floor
    assert s["pooling_mean"] == pytest.approx(DLRM.pooling_mean, rel=0.01)
    assert s["pooling_std"] == pytest.approx(DLRM.pooling_std, rel=0.02)
    assert s["pooling_max"] > 4 * DLRM.pooling_mean  # heavy tail
    hists = np.array([t.access.histogram for t in pool.tables])
    assert np.allclose(hists.sum(axis=1), 1, atol=1e-3)
    assert hists[:, 0].std() > 0.05  # varied skews give varied histograms
    assert pool.synthetic


def test_pool_is_deterministic_and_round_trips(pool, tmp_path):
    assert generate_pool(n=200, seed=3) == pool
    assert generate_pool(n=200, seed=4) != pool
    save_pool(pool, tmp_path / "p.json")
    assert load_pool(tmp_path / "p.json") == pool


def test_split_is_disjoint_halves(pool):
    train, test = split_pool(pool, seed=0)
    a, b = {t.name for t in train.tables}, {t.name for t in test.tables}
    assert not a & b and len(a) + len(b) == len(pool.tables) and abs(len(a) - len(b)) <= 1
    assert split_pool(pool, seed=0) == (train, test)
    assert {t.name for t in split_pool(pool, seed=1)[0].tables} != a


def test_corrupt_pool_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "pool", "name": "x", "batch_size": 10, "synthetic": true, "tables": [{"name": "a", "rows": -1, "pooling_factor": 1, "access": {"zipf": 1}}]}')
    with pytest.raises(IRError, match=r"tables\[0\]\.rows"):
        load_pool(bad)
    with pytest.raises(IRError, match="kind"):
        pool_from_dict({"kind": "instance"})


@pytest.mark.parametrize("family", ["dreamshard", "neuroshard", "autoshard"])
def test_families_are_feasible_tight_and_tagged(family, pool, tmp_path):
    train, _ = split_pool(pool, seed=0)
    paths = generate_suite(family, train, 4, seed=7, pool_label="train", out_dir=tmp_path)
    assert len(paths) == 4
    for p in paths:
        inst = load_instance(p)
        meta = inst.metadata
        assert (meta["family"], meta["seed"], meta["pool"]) == (family, 7, "train")
        assert {t.name for t in inst.tables} <= {t.name for t in train.tables}
        sizes = np.sort(table_bytes_array(inst))[::-1]
        cap = inst.topology.capacity(0)
        assert first_fit_decreasing_fits(sizes, inst.topology.num_devices, cap)  # feasible
        assert sizes.sum() / (cap * inst.topology.num_devices) > 0.5  # and tight
        assert all(t.dim in FAMILIES[family].dims for t in inst.tables)
    manifest = json.loads((tmp_path / "suite.json").read_text())
    assert manifest["count"] == 4 and len(manifest["instances"]) == 4


def test_family_shapes(pool, tmp_path):
    paths = generate_suite("dreamshard", pool, 4, seed=0, pool_label="all", out_dir=tmp_path / "d")
    shapes = sorted((len(i.tables), i.topology.num_devices) for i in map(load_instance, paths))
    assert shapes == [(50, 4), (50, 8), (100, 4), (100, 8)]
    for inst in map(load_instance, generate_suite("neuroshard", pool, 6, 0, "all", tmp_path / "n")):
        assert 10 <= len(inst.tables) <= 59 and inst.topology.num_devices == 4
    with pytest.raises(SuiteError, match="needs 856"):
        generate_suite("production", pool, 1, 0, "all", tmp_path / "p")


def test_production_family_takes_all_856_tables(tmp_path):
    full = load_pool(STANDARD_POOL)
    (inst,) = map(load_instance, generate_suite("production", full, 1, 0, "all", tmp_path))
    assert len(inst.tables) == 856 and inst.topology.num_devices == 128 and inst.topology.devices_per_host == 8
    assert {t.name for t in inst.tables} == {t.name for t in full.tables}
    assert max(t.dim for t in inst.tables) <= 256


def test_standard_pool_is_synthetic_and_split(tmp_path):
    full, train, test = (load_pool(STANDARD_POOL.with_name(f"dlrm-synthetic-856{s}.json")) for s in ("", "-train", "-test"))
    assert full.synthetic and len(full.tables) == 856
    assert (train, test) == split_pool(full, seed=0)


def test_suite_regeneration_is_byte_identical(pool, tmp_path):
    a = generate_suite("neuroshard", pool, 3, seed=11, pool_label="all", out_dir=tmp_path / "a")
    b = generate_suite("neuroshard", pool, 3, seed=11, pool_label="all", out_dir=tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_bad_requests(pool, tmp_path):
    with pytest.raises(SuiteError, match="unknown family 'nope'"):
        generate_suite("nope", pool, 1, 0, "all", tmp_path)
    with pytest.raises(SuiteError, match="count: 0"):
        generate_suite("neuroshard", pool, 0, 0, "all", tmp_path)
    with pytest.raises(SuiteError, match="needs 80"):
        generate_suite("autoshard", generate_pool(n=40, seed=0), 1, 0, "all", tmp_path)


def test_tight_memory_rule():
    sizes = np.array([10, 9, 8, 7, 6, 5, 4, 3, 2, 1]) * 1000
    cap, _ = tight_memory(sizes, 3)
    assert cap >= 1.10 * sizes.sum() / 3 - 1
    assert first_fit_decreasing_fits(np.sort(sizes)[::-1], 3, cap)
    assert tight_memory(np.array([100, 1, 1]), 4)[0] == 100  # at least the largest table


def _write_dlrm(path, tables: int, batch: int, seed: int):
    """A small file in the dataset's format: (indices, offsets, lengths) tensors, table-major bags."""
    import torch

    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 6, size=(tables, batch))
    lengths[-1] = 0  # one table never looked up
    per_table = []
    for t in range(tables):
        n = int(lengths[t].sum())
        per_table.append(rng.zipf(1.5, size=n) % (50 * (t + 1)))
    indices = np.concatenate(per_table) if per_table else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths.reshape(-1))])
    torch.save((torch.from_numpy(indices.astype(np.int64)), torch.from_numpy(offsets.astype(np.int64)), torch.from_numpy(lengths.astype(np.int64))), path)
    return indices, offsets, lengths


def test_import_dlrm_computes_the_papers_statistics(tmp_path):
    from shardopt.data.dlrm_import import import_dlrm

    path = tmp_path / "mini_t5_bs64.pt"
    indices, offsets, lengths = _write_dlrm(path, tables=5, batch=64, seed=0)
    pool = import_dlrm(path)
    assert len(pool.tables) == 5 and pool.batch_size == 64 and not pool.synthetic
    for t in range(4):
        lo, hi = offsets[t * 64], offsets[(t + 1) * 64]
        idx = indices[lo:hi]
        assert pool.tables[t].rows == idx.max() + 1
        assert pool.tables[t].pooling_factor == pytest.approx(lengths[t].mean())  # a float, not truncated
        expect = table_stats(idx, offsets[t * 64 : (t + 1) * 64 + 1] - lo).access_histogram
        assert pool.tables[t].access.histogram == pytest.approx(expect, abs=2e-6)
    assert pool.tables[4].pooling_factor == 0 and pool.provenance["empty_tables"] == [4]


def test_import_dlrm_refuses_bad_files(tmp_path):
    import torch

    from shardopt.data.dlrm_import import import_dlrm

    with pytest.raises(IRError, match="no such file"):
        import_dlrm(tmp_path / "missing.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(IRError, match="cannot be read"):
        import_dlrm(junk)
    two = tmp_path / "two.pt"
    torch.save((torch.zeros(3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)), two)
    with pytest.raises(IRError, match="expected a tuple"):
        import_dlrm(two)
    bad = tmp_path / "bad.pt"
    torch.save((torch.zeros(3, dtype=torch.int64), torch.tensor([0, 1, 3]), torch.tensor([[1, 1]])), bad)
    with pytest.raises(IRError, match="lengths"):
        import_dlrm(bad)
