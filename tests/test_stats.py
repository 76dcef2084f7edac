"""Tests of shardopt.core.stats: measured table features, the Zipf model and the trace generators."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardopt.core.stats import (
    ACCESS_BINS,
    HISTOGRAM_L1_TOLERANCE,
    TableStats,
    access_bin,
    bin_edges,
    generate_trace,
    generate_trace_zipf,
    histogram_from_zipf,
    table_stats,
)

FAST = settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def l1(a, b) -> float:
    return float(np.abs(np.subtract(a, b)).sum())


def one_hot(k: int) -> tuple[float, ...]:
    return tuple(1.0 if i == k else 0.0 for i in range(ACCESS_BINS))


def trace_with_counts(counts: list[int], ids: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row ids[r] looked up counts[r] times, in one bag."""
    ids = list(range(len(counts))) if ids is None else ids
    indices = np.repeat(np.asarray(ids, dtype=np.int64), counts)
    return indices, np.array([0, indices.size], dtype=np.int64)


# --------------------------------------------------------------------------------------------------------------
# bins


def test_bin_edges_are_powers_of_two():
    edges = bin_edges()
    assert edges.shape == (ACCESS_BINS + 1,) == (18,)
    assert edges[0] == 0 and edges[-1] == np.inf
    assert list(edges[1:-1]) == [2.0**k for k in range(16)]


@pytest.mark.parametrize(
    ("count", "expected"),
    [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (16, 4), (17, 5), (2**14, 14), (2**14 + 1, 15),
     (2**15, 15), (2**15 + 1, 16), (10**12, 16)],
)
def test_access_bin_exact_on_boundaries(count, expected):
    assert access_bin(np.array([count]))[0] == expected
    assert access_bin(np.array([float(count)]))[0] == expected  # real-valued (expected) counts too


def test_access_bin_fractional_counts_use_half_open_bins():
    assert list(access_bin(np.array([0.5, 1.0, 1.5, 2.0, 2.01, 40000.0]))) == [0, 0, 1, 1, 2, 16]


@pytest.mark.parametrize(("bad", "message"), [([3, 0], r"counts\[1\]: 0,"), ([-1], r"counts\[0\]: -1,"),
                                              ([1.0, np.nan], r"counts\[1\]: nan,")])
def test_access_bin_rejects_non_positive(bad, message):
    with pytest.raises(ValueError, match=message):
        access_bin(np.array(bad))


# --------------------------------------------------------------------------------------------------------------
# table_stats on hand-computed traces


def test_tiny_trace_fractional_pooling():
    # bag 0 = [0, 0, 0], bag 1 = [1, 2, 2, 5]: 7 lookups / 2 bags; row 0 read 3x, row 2 2x, rows 1 and 5 once.
    stats = table_stats(np.array([0, 0, 0, 1, 2, 2, 5]), np.array([0, 3, 7]))
    assert stats == TableStats(
        rows=6,
        pooling_factor=3.5,
        access_histogram=(0.5, 0.25, 0.25) + (0.0,) * 14,
        batch_size=2,
        unique_rows=4,
        lookups=7,
    )
    assert isinstance(stats.pooling_factor, float)


BOUNDARY_COUNTS = [1, 2, 3, 4, 5, 8, 9, 2**15, 2**15 + 1]
BOUNDARY_BINS = [0, 1, 2, 2, 3, 3, 4, 15, 16]


def expected_boundary_histogram() -> tuple[float, ...]:
    hist = [0.0] * ACCESS_BINS
    for b in BOUNDARY_BINS:
        hist[b] += 1 / len(BOUNDARY_BINS)
    return tuple(hist)


def test_bin_boundaries_in_a_trace():
    indices, offsets = trace_with_counts(BOUNDARY_COUNTS)
    stats = table_stats(indices, offsets)
    assert stats.rows == len(BOUNDARY_COUNTS)
    assert stats.unique_rows == len(BOUNDARY_COUNTS)
    assert stats.lookups == sum(BOUNDARY_COUNTS)
    assert stats.batch_size == 1
    assert stats.access_histogram == pytest.approx(expected_boundary_histogram(), abs=1e-12)


def test_sparse_ids_take_the_sort_path_and_agree():
    ids = [i * 10**9 + 7 for i in range(len(BOUNDARY_COUNTS))]  # far too spread for a dense bincount
    indices, offsets = trace_with_counts(BOUNDARY_COUNTS, ids)
    rng = np.random.default_rng(0)
    rng.shuffle(indices)
    stats = table_stats(indices, offsets)
    assert stats.rows == ids[-1] + 1
    assert stats.unique_rows == len(ids)
    assert stats.access_histogram == pytest.approx(expected_boundary_histogram(), abs=1e-12)


def test_unsigned_and_int32_inputs():
    for dtype in (np.int32, np.uint32, np.uint64):
        stats = table_stats(np.array([4, 4, 1], dtype=dtype), np.array([0, 1, 3], dtype=dtype))
        assert (stats.rows, stats.pooling_factor, stats.unique_rows) == (5, 1.5, 2)


def test_empty_trace():
    stats = table_stats(np.array([], dtype=np.int64), np.zeros(4, dtype=np.int64))
    assert stats == TableStats(0, 0.0, (0.0,) * ACCESS_BINS, 3, 0, 0)
    assert table_stats([], [0]).batch_size == 0


def test_empty_bags_count_in_batch():
    stats = table_stats(np.array([3, 3]), np.array([0, 0, 2, 2]))
    assert stats.batch_size == 3
    assert stats.pooling_factor == pytest.approx(2 / 3)
    assert stats.access_histogram == one_hot(1)


@pytest.mark.parametrize(
    ("indices", "offsets", "message"),
    [
        ([1, 2], [3, 2], r"offsets\[0\]: 3, expected 0"),
        ([1, 2, 3], [0, 2, 1, 3], r"offsets\[2\]: 1 < offsets\[1\]: 2"),
        ([1, 2, 3], [0, 2], r"offsets\[1\]: 2, expected len\(indices\) = 3"),
        ([1, -4, 3], [0, 3], r"indices\[1\]: -4, expected >= 0"),
        ([1.0, 2.0], [0, 2], r"indices: dtype float64"),
        ([1, 2], [0.0, 2.0], r"offsets: dtype float64"),
        ([[1, 2]], [0, 2], r"indices: 2-D"),
        ([1, 2], [], r"offsets: empty"),
    ],
)
def test_table_stats_validation_names_the_argument(indices, offsets, message):
    with pytest.raises(ValueError, match=message):
        table_stats(np.array(indices), np.array(offsets))


def test_table_stats_on_a_five_million_lookup_trace():
    """Its speed is measured by benchmarks/bench_stats.py (docs/results/speed.md, "Trace statistics and the Zipf access model"), not asserted here."""
    rng = np.random.default_rng(1)
    n = 5_000_000
    indices = rng.integers(0, 2_000_000, size=n)
    offsets = np.arange(0, n + 1, 50)
    stats = table_stats(indices, offsets)
    assert stats.lookups == n and stats.pooling_factor == 50.0


# --------------------------------------------------------------------------------------------------------------
# the Zipf model


@pytest.mark.parametrize(("rows", "pooling", "s", "batch"), [(10**6, 20.0, 1.0, 1024), (50, 3.0, 0.5, 100),
                                                              (10**8, 30.0, 1.05, 4096), (1, 7.0, 2.0, 10)])
def test_zipf_histogram_sums_to_one(rows, pooling, s, batch):
    hist = histogram_from_zipf(rows, pooling, s, batch)
    assert len(hist) == ACCESS_BINS
    assert all(x >= 0 for x in hist)
    assert sum(hist) == pytest.approx(1.0, abs=1e-9)


def test_zipf_single_row_is_deterministic():
    assert histogram_from_zipf(1, 7.0, 1.0, 10) == pytest.approx(one_hot(7))  # 70 lookups, all on row 0
    assert histogram_from_zipf(1, 1000.0, 1.0, 100) == pytest.approx(one_hot(16))  # 1e5 lookups > 2^15


def test_zipf_no_lookups_is_empty():
    assert histogram_from_zipf(1000, 0.0, 1.0, 10) == (0.0,) * ACCESS_BINS


def test_zipf_uniform_sparse_trace_reads_rows_once():
    hist = histogram_from_zipf(10**7, 10.0, 0.0, 1000)  # 1e4 lookups over 1e7 rows
    assert hist[0] > 0.999


def test_zipf_larger_exponent_shifts_mass_to_hot_bins():
    def mean_bin(s: float) -> float:
        return float(np.dot(histogram_from_zipf(10**6, 50.0, s, 2048), np.arange(ACCESS_BINS)))

    means = [mean_bin(s) for s in (0.0, 0.5, 1.0, 1.5, 2.0)]
    assert means == sorted(means) and means[-1] > means[0] + 1
    hot_share = [sum(histogram_from_zipf(10**6, 50.0, s, 2048)[8:]) for s in (0.5, 1.0, 1.5)]
    assert hot_share == sorted(hot_share)


def test_zipf_model_for_huge_tables():
    """10^8 rows are not enumerated (benchmarks/bench_stats.py measures how fast); the histogram is still whole."""
    hist = histogram_from_zipf(10**8, 100.0, 1.1, 65536)
    assert len(hist) == ACCESS_BINS and sum(hist) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize(("rows", "pooling", "s", "batch"), [(100_000, 20.0, 1.0, 1024), (20_000, 8.0, 0.0, 2048),
                                                              (10**7, 10.0, 1.2, 2048), (3000, 40.0, 0.8, 512)])
def test_zipf_model_matches_sampled_zipf_trace(rows, pooling, s, batch):
    model = histogram_from_zipf(rows, pooling, s, batch)
    indices, offsets = generate_trace_zipf(rows, pooling, s, batch, seed=11)
    stats = table_stats(indices, offsets)
    assert stats.rows == rows
    assert stats.lookups == round(batch * pooling)
    assert l1(stats.access_histogram, model) <= 0.05


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": 0}, r"rows: 0"),
        ({"rows": 2.5}, r"rows: 2.5"),
        ({"pooling_factor": -1.0}, r"pooling_factor: -1.0"),
        ({"pooling_factor": float("inf")}, r"pooling_factor: inf"),
        ({"zipf_exponent": -0.5}, r"zipf_exponent: -0.5"),
        ({"zipf_exponent": float("nan")}, r"zipf_exponent: nan"),
        ({"batch_size": 0}, r"batch_size: 0"),
        ({"batch_size": True}, r"batch_size: True"),
    ],
)
def test_zipf_validation_names_the_argument(kwargs, message):
    args = {"rows": 100, "pooling_factor": 2.0, "zipf_exponent": 1.0, "batch_size": 8}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        histogram_from_zipf(**args)
    with pytest.raises(ValueError, match=message):
        generate_trace_zipf(**args, seed=0)


# --------------------------------------------------------------------------------------------------------------
# generate_trace


def test_generate_trace_shapes_and_bags_vary():
    hist = histogram_from_zipf(10_000, 12.3, 1.0, 256)
    indices, offsets = generate_trace(10_000, 12.3, hist, 256, seed=3)
    assert indices.dtype == np.int64 and offsets.dtype == np.int64
    assert offsets.shape == (257,) and offsets[0] == 0 and offsets[-1] == indices.size == round(256 * 12.3)
    lengths = np.diff(offsets)
    assert (lengths >= 0).all() and len(set(lengths.tolist())) > 1
    assert indices.min() >= 0 and indices.max() == 9_999


def test_generate_trace_hot_rows_are_random_and_shuffled():
    hist = histogram_from_zipf(10_000, 20.0, 1.2, 512)
    a, _ = generate_trace(10_000, 20.0, hist, 512, seed=1)
    b, _ = generate_trace(10_000, 20.0, hist, 512, seed=2)
    hottest = lambda x: int(np.argmax(np.bincount(x)))  # noqa: E731
    assert hottest(a) != hottest(b)
    assert not (np.diff(a) >= 0).all()  # not sorted by row


def test_generate_trace_no_lookups():
    indices, offsets = generate_trace(100, 0.0, one_hot(0), 4, seed=0)
    assert indices.size == 0 and list(offsets) == [0] * 5
    assert table_stats(indices, offsets).pooling_factor == 0.0


def test_unachievable_heavy_request_keeps_lookups_and_rows():
    # Every row > 2^15 accesses, but only 1000 lookups: the closest thing is one row holding all of them.
    indices, offsets = generate_trace(500, 10.0, one_hot(16), 100, seed=0)
    stats = table_stats(indices, offsets)
    assert (stats.lookups, stats.rows, stats.unique_rows) == (1000, 500, 1)
    assert stats.access_histogram == one_hot(10)


def test_unachievable_too_few_rows_overflows_into_hottest_row():
    # All rows read once, but 1000 lookups over 10 rows: 9 rows read once, the hottest takes the rest.
    indices, offsets = generate_trace(10, 10.0, one_hot(0), 100, seed=0)
    stats = table_stats(indices, offsets)
    assert (stats.lookups, stats.rows, stats.unique_rows) == (1000, 10, 10)
    assert stats.access_histogram[0] == pytest.approx(0.9)


def test_top_bin_absorbs_surplus():
    hist = [0.0] * ACCESS_BINS
    hist[0], hist[16] = 0.5, 0.5
    indices, offsets = generate_trace(1000, 1000.0, hist, 1000, seed=4)  # 1e6 lookups
    stats = table_stats(indices, offsets)
    assert stats.lookups == 10**6 and stats.rows == 1000
    assert l1(stats.access_histogram, hist) <= HISTOGRAM_L1_TOLERANCE


def test_generate_trace_roundtrips_its_own_measurement():
    hist = histogram_from_zipf(10**6, 30.0, 1.05, 2048)
    first = table_stats(*generate_trace_zipf(10**6, 30.0, 1.05, 2048, seed=5))
    again = table_stats(*generate_trace(first.rows, first.pooling_factor, first.access_histogram, 2048, seed=6))
    assert again.rows == first.rows and again.lookups == first.lookups
    assert l1(again.access_histogram, first.access_histogram) <= 0.01
    assert l1(again.access_histogram, hist) <= HISTOGRAM_L1_TOLERANCE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": 0}, r"rows: 0"),
        ({"pooling_factor": -0.5}, r"pooling_factor: -0.5"),
        ({"pooling_factor": float("nan")}, r"pooling_factor: nan"),
        ({"batch_size": 0}, r"batch_size: 0"),
        ({"seed": -1}, r"seed: -1"),
        ({"access_histogram": [1.0]}, r"access_histogram: shape \(1,\)"),
        ({"access_histogram": [0.5, -0.1, 0.6] + [0.0] * 14}, r"access_histogram\[1\]: -0.1"),
        ({"access_histogram": [float("inf")] + [0.0] * 16}, r"access_histogram\[0\]: inf"),
        ({"access_histogram": [0.9] + [0.0] * 16}, r"access_histogram: sums to 0.9"),
        ({"access_histogram": "abc"}, r"access_histogram"),
    ],
)
def test_generate_trace_validation_names_the_argument(kwargs, message):
    args = {"rows": 100, "pooling_factor": 2.0, "access_histogram": one_hot(0), "batch_size": 8, "seed": 0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        generate_trace(**args)


def test_histogram_sum_tolerance_is_renormalised():
    hist = [0.9995] + [0.0] * 16
    indices, offsets = generate_trace(100_000, 2.0, hist, 1000, seed=0)
    assert table_stats(indices, offsets).access_histogram == one_hot(0)


# --------------------------------------------------------------------------------------------------------------
# generator properties


@st.composite
def zipf_requests(draw, min_lookups: int = 1, min_rows: int = 1):
    rows = draw(st.integers(min_rows, 10**6))
    batch = draw(st.integers(1, 2048))
    pooling = draw(st.floats(0.0, 64.0, allow_nan=False, allow_infinity=False))
    s = draw(st.floats(0.0, 1.5, allow_nan=False))
    assume(round(batch * pooling) >= min_lookups)
    return rows, pooling, s, batch


@FAST
@given(req=zipf_requests(), seed=st.integers(0, 2**32 - 1))
def test_generate_trace_deterministic(req, seed):
    rows, pooling, s, batch = req
    hist = histogram_from_zipf(rows, pooling, s, batch)
    a = generate_trace(rows, pooling, hist, batch, seed)
    b = generate_trace(rows, pooling, hist, batch, seed)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    c = generate_trace(rows, pooling, hist, batch, seed + 1)
    assume(round(batch * pooling) >= 20 and batch >= 2)  # enough randomness that two seeds must differ
    assert not (np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1]))


@FAST
@given(req=zipf_requests(), seed=st.integers(0, 2**32 - 1))
def test_generate_trace_zipf_deterministic_and_shaped(req, seed):
    rows, pooling, s, batch = req
    a = generate_trace_zipf(rows, pooling, s, batch, seed)
    b = generate_trace_zipf(rows, pooling, s, batch, seed)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    stats = table_stats(*a)
    assert stats.batch_size == batch
    assert abs(stats.pooling_factor - pooling) <= 0.5 / batch + 1e-12
    assert stats.rows == rows
    c = generate_trace_zipf(rows, pooling, s, batch, seed + 1)
    assume(round(batch * pooling) >= 20 and batch >= 2 and rows >= 20)
    assert not (np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1]))


@FAST
@given(req=zipf_requests(min_lookups=1000, min_rows=1000), seed=st.integers(0, 2**32 - 1))
def test_generate_trace_matches_request(req, seed):
    rows, pooling, s, batch = req
    hist = histogram_from_zipf(rows, pooling, s, batch)
    stats = table_stats(*generate_trace(rows, pooling, hist, batch, seed))
    assert stats.batch_size == batch
    assert abs(stats.pooling_factor - pooling) <= 0.5 / batch + 1e-12
    assert stats.rows == rows
    # A Zipf histogram is achievable by construction: it describes how a trace of this many lookups over this many
    # rows looks.  With >= 1000 lookups over >= 1000 rows and s <= 1.5 it spreads over enough unique rows that
    # rounding shares to whole rows stays well inside the tolerance.
    assert l1(stats.access_histogram, hist) <= HISTOGRAM_L1_TOLERANCE


@FAST
@given(
    weights=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=ACCESS_BINS, max_size=ACCESS_BINS),
    rows=st.integers(1, 10**6),
    batch=st.integers(1, 2048),
    pooling=st.floats(0.0, 64.0, allow_nan=False),
    seed=st.integers(0, 2**32 - 1),
)
def test_generate_trace_any_histogram_keeps_invariants(weights, rows, batch, pooling, seed):
    assume(sum(weights) > 0)
    hist = np.asarray(weights) / sum(weights)
    indices, offsets = generate_trace(rows, pooling, hist, batch, seed)
    stats = table_stats(indices, offsets)
    lookups = round(batch * pooling)
    assert stats.lookups == lookups
    assert abs(stats.pooling_factor - pooling) <= 0.5 / batch + 1e-12
    assert stats.rows == (rows if lookups else 0)
    assert stats.unique_rows <= min(rows, lookups)
