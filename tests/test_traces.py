"""Index traces for tables and shards match the tables' statistics within the stated tolerance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shardopt.core.ir import AccessProfile, Shard, Table
from shardopt.core.stats import HISTOGRAM_L1_TOLERANCE, table_stats
from shardopt.core.traces import shard_trace, table_trace
from shardopt.data.pools import load_pool

POOL = Path(__file__).resolve().parents[1] / "instances" / "pools" / "dlrm-synthetic-856-test.json"


@pytest.mark.parametrize("k", [0, 7, 41, 99, 200])
def test_pool_table_traces_match_their_statistics(k):
    pool = load_pool(POOL)
    pt = pool.tables[k]
    table = Table(name=pt.name, rows=pt.rows, dim=16, pooling_factor=pt.pooling_factor, access=pt.access)
    batch = pool.batch_size
    indices, offsets = table_trace(table, batch, seed=3)
    st = table_stats(indices, offsets)
    assert st.batch_size == batch
    assert abs(st.pooling_factor - pt.pooling_factor) <= 0.5 / batch
    assert st.rows == pt.rows
    l1 = float(np.abs(np.array(st.access_histogram) - np.array(pt.access.histogram)).sum())
    if st.lookups >= 1000:
        assert l1 <= HISTOGRAM_L1_TOLERANCE, (pt.name, l1)


def test_traces_are_deterministic_and_differ_by_table_and_seed():
    a = Table(name="a", rows=10_000, dim=8, pooling_factor=3.5, access=AccessProfile(zipf=1.1))
    b = a.model_copy(update={"name": "b"})
    ia, oa = table_trace(a, 512, seed=1)
    ia2, oa2 = table_trace(a, 512, seed=1)
    assert np.array_equal(ia, ia2) and np.array_equal(oa, oa2)
    assert not np.array_equal(ia, table_trace(a, 512, seed=2)[0])
    assert not np.array_equal(ia, table_trace(b, 512, seed=1)[0])
    assert len(oa) == 513 and oa[-1] == len(ia) == round(512 * 3.5)


def test_row_shards_split_the_table_trace():
    t = Table(name="t", rows=1000, dim=8, pooling_factor=6.0, access=AccessProfile(zipf=0.8))
    full_i, full_o = table_trace(t, 256, seed=0)
    lo = shard_trace(t, Shard(table="t", device=0, rows=400), 256, seed=0)
    hi = shard_trace(t, Shard(table="t", device=1, row_offset=400), 256, seed=0)
    assert len(lo[0]) + len(hi[0]) == len(full_i)
    assert lo[0].max() < 400 and hi[0].max() < 600 and lo[0].min() >= 0 and hi[0].min() >= 0
    # every bag keeps its lookups, split between the shards
    assert np.array_equal(np.diff(lo[1]) + np.diff(hi[1]), np.diff(full_o))
    col = shard_trace(t, Shard(table="t", device=0, cols=4), 256, seed=0)
    assert np.array_equal(col[0], full_i)
