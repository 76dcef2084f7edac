"""Per-table access statistics of embedding lookups, and synthetic index traces that reproduce them.

Why this module exists
----------------------
The DreamShard and NeuroShard papers describe every embedding table to their cost models by a handful of
features: the hash size (``rows``), the mean number of lookups per sample (the *pooling factor*) and a 17-bin
*access histogram* -- the share of the table's unique rows whose access count in one batch falls in
(0,1], (1,2], (2,4], ..., (2^14,2^15], >2^15.  Those features decide how a table behaves in the fused TBE kernel:
how many bytes a lookup moves, how many rows stay hot in cache, how many unique rows the backward pass updates.

This module computes the features from a trace (:func:`table_stats`), predicts them for the usual Zipf model of
row popularity (:func:`histogram_from_zipf`) and goes the other way: it generates index traces in fbgemm's
``(indices, offsets)`` format whose measured statistics come back as requested (:func:`generate_trace`,
:func:`generate_trace_zipf`).  The generators let us time the real kernels on any instance without the dataset the
statistics came from.

Trace format (fbgemm's, for ONE table): ``indices`` is a 1-D integer array of row ids, ``offsets`` a 1-D integer
array of length ``B + 1`` with ``offsets[0] == 0``, non-decreasing, ``offsets[-1] == len(indices)``; bag ``b`` is
``indices[offsets[b]:offsets[b + 1]]``.

This is a leaf module: numpy and the standard library only.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the IR imports nothing from here; a type only
    from shardopt.core.ir import Table

__all__ = [
    "ACCESS_BINS",
    "HISTOGRAM_L1_TOLERANCE",
    "TableStats",
    "access_bin",
    "bin_edges",
    "generate_trace",
    "generate_trace_zipf",
    "histogram_from_zipf",
    "table_stats",
]

ACCESS_BINS = 17
"""Number of access-count bins: (0,1], (1,2], (2,4], ..., (2^14,2^15], >2^15."""

HISTOGRAM_L1_TOLERANCE = 0.05
"""L1 distance that :func:`generate_trace` guarantees between the requested and the measured access histogram
when the trace has at least 1000 lookups and the request is achievable (see :func:`generate_trace`)."""

HISTOGRAM_SUM_TOLERANCE = 1e-3
"""How far from 1 the sum of a requested histogram may be (it is renormalised)."""

# Upper (inclusive) edges of bins 0..15; bin 16 is everything above the last one.  Integers, so that the binning
# of integer counts is exact on the power-of-two boundaries.
_UPPER_EDGES = np.array([1 << k for k in range(ACCESS_BINS - 1)], dtype=np.int64)  # 1, 2, 4, ..., 2^15
# Smallest and largest integer count of each bin (bin 16 has no largest: int64 max stands in).
_BIN_LO = np.array([1] + [(1 << (k - 1)) + 1 for k in range(1, ACCESS_BINS)], dtype=np.int64)
_BIN_HI = np.array([1 << k for k in range(ACCESS_BINS - 1)] + [np.iinfo(np.int64).max], dtype=np.int64)
# Counts of bin-16 rows are first drawn from (2^15, 2^16]; the bin itself is unbounded and absorbs any surplus.
_TOP_BIN_DRAW_HI = 1 << (ACCESS_BINS - 1)  # 2^16

# Zipf model: ranks 1.._HEAD_RANKS are treated exactly, the rest of the rank range as a continuous density
# x^-s (integrated over [rank - 1/2, rank + 1/2], which is accurate to O(s^2 / rank^2) there) and, for the
# expected histogram, grouped into about _TAIL_BUCKETS log-spaced buckets of ranks.
_HEAD_RANKS = 4096
_TAIL_BUCKETS = 2000
# Expected counts up to this are binned with the exact binomial law, larger ones with its normal approximation.
# The exact pmf is evaluated up to a count that depends on the expected count (tiers of (max lambda, max count));
# the mass left above is < 1e-20.  Most rows of a big table have lambda << 1, so the first tier is the busy one.
_EXACT_LAMBDA = 100.0
_EXACT_TIERS = ((2.0, 32), (_EXACT_LAMBDA, 256))

# table_stats counts accesses with a dense np.bincount when the largest id is below this (or below 4x the number
# of lookups), and by sorting the ids otherwise (a dense count over a 1e9-row id range would not fit).
_BINCOUNT_MAX_ROWS = 1 << 26


def bin_edges() -> np.ndarray:
    """The 18 edges of the 17 access-count bins: bin ``k`` holds counts ``c`` with ``edges[k] < c <= edges[k+1]``.

    ``[0, 1, 2, 4, 8, ..., 2^15, inf]``: bin 0 = (0,1] (rows read once), bin 1 = (1,2], bin 2 = (2,4],
    bin k = (2^(k-1), 2^k] for k = 1..15, and bin 16 = (2^15, inf).  Power-of-two bins because row popularity is
    heavy-tailed: a linear binning would put almost every row in the first bin and say nothing about the hot ones.
    """
    return np.concatenate(([0.0], _UPPER_EDGES.astype(np.float64), [np.inf]))


def access_bin(counts: np.ndarray) -> np.ndarray:
    """Map positive access counts to bin ids 0..16 (see :func:`bin_edges`), exactly on the power-of-two edges.

    count 1 -> 0, 2 -> 1, 3 and 4 -> 2, 5..8 -> 3, ..., 2^15 -> 15, 2^15 + 1 -> 16.  Works on integer counts (exact)
    and on real-valued ones (e.g. expected counts).  Raises ``ValueError`` for counts that are not > 0.
    """
    c = np.asarray(counts)
    if c.dtype.kind not in "iuf":
        raise ValueError(f"counts: dtype {c.dtype}, expected a numeric array")
    if c.size and not np.all(c > 0):
        bad = int(np.flatnonzero(~(c.ravel() > 0))[0])
        raise ValueError(f"counts[{bad}]: {_show(c.ravel()[bad])!r}, expected > 0")
    edges = _UPPER_EDGES if c.dtype.kind in "iu" else _UPPER_EDGES.astype(np.float64)
    # searchsorted(side="left") = index of the first upper edge >= c, i.e. the bin whose range (lo, hi] holds c.
    return np.searchsorted(edges, c, side="left").astype(np.int64)


@dataclass(frozen=True)
class TableStats:
    """The per-table features DreamShard / NeuroShard feed their cost models, measured on one trace.

    rows: max index + 1 (0 for an empty trace) -- a lower bound of the hash size, exact for generated traces.
    pooling_factor: mean bag length ``lookups / batch_size`` as a float (never truncated: 7 / 2 = 3.5).
    access_histogram: ``ACCESS_BINS`` shares of the *unique* rows by their access count in the trace (see
        :func:`bin_edges`); sums to 1, or all zeros for an empty trace.
    batch_size: number of bags B.
    unique_rows: number of distinct row ids looked up.
    lookups: ``len(indices)``.
    """

    rows: int
    pooling_factor: float
    access_histogram: tuple[float, ...]
    batch_size: int
    unique_rows: int
    lookups: int


# --------------------------------------------------------------------------------------------------------------
# validation helpers


def _as_int_array(name: str, a: object) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"{name}: {arr.ndim}-D array of shape {arr.shape}, expected a 1-D array")
    if arr.size == 0 and arr.dtype.kind == "f":  # np.asarray([]) is float64: an empty list is a fine empty trace
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: dtype {arr.dtype}, expected an integer array")
    return arr


def _show(value: object) -> object:
    """numpy scalars as plain Python numbers, so that messages read `rows: 0`, not `rows: np.int64(0)`."""
    return value.item() if isinstance(value, np.generic) else value


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: {_show(value)!r}, expected an integer >= {minimum}")
    if value < minimum:
        raise ValueError(f"{name}: {_show(value)!r}, expected >= {minimum}")
    return int(value)


def _check_real(name: str, value: object, minimum: float) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}: {_show(value)!r}, expected a finite number >= {minimum}")
    v = float(value)
    if not math.isfinite(v) or v < minimum:
        raise ValueError(f"{name}: {_show(value)!r}, expected a finite number >= {minimum}")
    return v


def _check_histogram(name: str, histogram: Sequence[float]) -> np.ndarray:
    try:
        h = np.asarray(histogram, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: {histogram!r}, expected {ACCESS_BINS} numbers") from exc
    if h.shape != (ACCESS_BINS,):
        raise ValueError(f"{name}: shape {h.shape}, expected {ACCESS_BINS} numbers")
    bad = np.flatnonzero(~np.isfinite(h) | (h < 0))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}]: {_show(h[bad[0]])!r}, expected a finite number >= 0")
    total = float(h.sum())
    if abs(total - 1.0) > HISTOGRAM_SUM_TOLERANCE:
        raise ValueError(f"{name}: sums to {total!r}, expected 1 (within {HISTOGRAM_SUM_TOLERANCE})")
    return h / total


def _total_lookups(batch_size: int, pooling_factor: float) -> int:
    """L = round(batch_size * pooling_factor), the one rounding rule both generators and the model use."""
    return int(round(batch_size * pooling_factor))


# --------------------------------------------------------------------------------------------------------------
# measuring


_COUNT_CAP = int(_BIN_LO[-1])  # 2^15 + 1: counts are clipped here, every larger one is in the top bin too


def _histogram_of_counts(counts: np.ndarray) -> tuple[tuple[float, ...], int]:
    """(histogram, unique rows) of per-row access counts; zero counts (rows never read) are ignored.

    Counts are clipped at 2^15 + 1 and tallied with one small bincount, then summed per bin: cheaper than
    binning every row, which matters for traces of 10 M lookups.
    """
    freq = np.bincount(np.minimum(counts, _COUNT_CAP), minlength=_COUNT_CAP + 1)
    freq[0] = 0
    per_bin = np.add.reduceat(freq, np.concatenate(([0], _BIN_LO)))[1:]
    unique = int(per_bin.sum())
    if unique == 0:
        return (0.0,) * ACCESS_BINS, 0
    return tuple(float(x) for x in per_bin / unique), unique


def histogram_of_counts(counts: np.ndarray) -> tuple[tuple[float, ...], int]:
    """(the 17-bin histogram, unique rows) of per-row access counts within one batch; rows never read are ignored."""
    return _histogram_of_counts(np.asarray(counts))


def _run_starts(ordered: np.ndarray) -> np.ndarray:
    """Mask of the first element of each run of equal values in a sorted array."""
    return np.concatenate(([True], ordered[1:] != ordered[:-1])) if ordered.size else np.zeros(0, dtype=bool)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique by sort: numpy 2.x's hash-based np.unique is many times slower on millions of int64 ids."""
    ordered = np.sort(a)
    return ordered[_run_starts(ordered)]


def table_stats(indices: np.ndarray, offsets: np.ndarray) -> TableStats:
    """Measure rows, pooling factor and the 17-bin access histogram of one table's trace.

    Validates the trace first (1-D integer arrays; ``offsets[0] == 0``, non-decreasing, ``offsets[-1] ==
    len(indices)``; indices >= 0) and raises ``ValueError`` naming the argument and the offending value, e.g.
    ``offsets[0]: 3, expected 0``.  Vectorised: a dense ``np.bincount`` when the id range is small relative to the
    trace, run lengths of the sorted ids otherwise; 10 M lookups take well under a second.
    """
    idx = _as_int_array("indices", indices)
    off = _as_int_array("offsets", offsets)
    if off.size == 0:
        raise ValueError("offsets: empty, expected B + 1 >= 1 entries starting with 0")
    if off[0] != 0:
        raise ValueError(f"offsets[0]: {off[0]}, expected 0")
    if off.size > 1:
        dec = np.flatnonzero(np.diff(off.astype(np.int64)) < 0)
        if dec.size:
            i = int(dec[0]) + 1
            raise ValueError(f"offsets[{i}]: {off[i]} < offsets[{i - 1}]: {off[i - 1]}, expected non-decreasing")
    if int(off[-1]) != idx.size:
        raise ValueError(f"offsets[{off.size - 1}]: {off[-1]}, expected len(indices) = {idx.size}")
    batch_size = off.size - 1
    lookups = int(idx.size)
    if lookups == 0:
        return TableStats(0, 0.0, (0.0,) * ACCESS_BINS, batch_size, 0, 0)
    if idx.dtype.kind == "i":
        neg = np.flatnonzero(idx < 0)
        if neg.size:
            raise ValueError(f"indices[{neg[0]}]: {idx[neg[0]]}, expected >= 0")
    max_index = int(idx.max())
    if max_index < _BINCOUNT_MAX_ROWS or max_index <= 4 * lookups:
        counts = np.bincount(idx.astype(np.int64, copy=False), minlength=max_index + 1)
    else:  # ids spread over a huge range: run lengths of the sorted ids
        starts = np.flatnonzero(_run_starts(np.sort(idx)))
        counts = np.diff(np.append(starts, lookups))
    histogram, unique = _histogram_of_counts(counts)
    return TableStats(
        rows=max_index + 1,
        pooling_factor=lookups / batch_size,
        access_histogram=histogram,
        batch_size=batch_size,
        unique_rows=unique,
        lookups=lookups,
    )


# --------------------------------------------------------------------------------------------------------------
# the Zipf model


def _power_integral(a: np.ndarray | float, b: np.ndarray | float, s: float) -> np.ndarray:
    """Integral of x^-s over [a, b] (0 < a <= b), stable for s near 1."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    t = 1.0 - s
    log_ratio = np.log(b / a)
    if abs(t) < 1e-12:
        return a**t * log_ratio  # a**t ~ 1
    # a^t * (exp(t ln(b/a)) - 1) / t, via expm1 so that t -> 0 and large ratios both stay accurate
    return np.exp(t * np.log(a)) * np.expm1(t * log_ratio) / t


def _zipf_tail_inverse(u: np.ndarray, a: float, b: float, s: float) -> np.ndarray:
    """Inverse CDF of the density proportional to x^-s on [a, b], at u in [0, 1)."""
    log_ratio = math.log(b / a)
    t = 1.0 - s
    if abs(t) < 1e-12:
        return a * np.exp(u * log_ratio)
    # x^t = a^t + u (b^t - a^t)  =>  ln x = ln a + log1p(u * expm1(t ln(b/a))) / t
    return a * np.exp(np.log1p(u * math.expm1(t * log_ratio)) / t)


@dataclass(frozen=True)
class _ZipfGroups:
    """Ranks grouped for the expected histogram: group g has `size[g]` ranks each of probability `p[g]`."""

    size: np.ndarray
    p: np.ndarray


def _zipf_groups(rows: int, s: float) -> _ZipfGroups:
    head = min(rows, _HEAD_RANKS)
    head_w = np.arange(1, head + 1, dtype=np.float64) ** -s
    sizes = [np.ones(head, dtype=np.float64)]
    weights = [head_w]
    if rows > head:
        edges = np.unique(np.round(np.geomspace(head + 1, rows + 1, _TAIL_BUCKETS + 1)).astype(np.int64))
        size = np.diff(edges).astype(np.float64)
        mass = _power_integral(edges[:-1] - 0.5, edges[1:] - 0.5, s)
        sizes.append(size)
        weights.append(mass / size)  # per-rank weight, the bucket's mean
    size = np.concatenate(sizes)
    w = np.concatenate(weights)
    total = float(np.dot(size, w))
    return _ZipfGroups(size=size, p=w / total)


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF (Abramowitz & Stegun 7.1.26 erf, |error| < 1.5e-7); numpy only."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    return 0.5 * (1.0 + np.sign(z) * erf)


def _binomial_bin_probabilities(lookups: int, p: np.ndarray, kmax: int) -> np.ndarray:
    """P(Binomial(lookups, p) in bin k) from the log-space pmf at counts 1..kmax (mass above kmax dropped)."""
    k = np.arange(kmax + 1, dtype=np.float64)
    lchoose = np.array([math.lgamma(lookups + 1.0) - math.lgamma(x + 1.0) - math.lgamma(lookups - x + 1.0) for x in k])
    pc = np.clip(p, 1e-300, 1.0 - 1e-15)  # keep both logs finite (p == 1: a one-row table)
    logpmf = lchoose + k * np.log(pc)[:, None] + (lookups - k) * np.log1p(-pc)[:, None]
    pmf = np.exp(logpmf[:, 1:])
    starts = _BIN_LO[_BIN_LO <= kmax] - 1  # column of count c is c - 1
    probs = np.zeros((p.size, ACCESS_BINS))
    probs[:, : starts.size] = np.add.reduceat(pmf, starts, axis=1)
    return probs


def _expected_bin_probabilities(lookups: int, p: np.ndarray) -> np.ndarray:
    """P(count in bin k) for a row of probability p under `lookups` i.i.d. draws, shape (len(p), ACCESS_BINS).

    The count is Binomial(lookups, p).  Exact (log-space pmf) where the expected count is <= _EXACT_LAMBDA or the
    whole trace is short; otherwise the normal approximation with continuity correction, which is very accurate
    there because the power-of-two bins are much wider than the standard deviation sqrt(lambda).
    """
    lam = lookups * p
    out = np.zeros((p.size, ACCESS_BINS))
    kmax_all = _EXACT_TIERS[-1][1]
    exact = (lam <= _EXACT_LAMBDA) | (lookups <= kmax_all)
    tier_lo = -np.inf
    for tier_hi, tier_kmax in _EXACT_TIERS:
        last = tier_kmax == kmax_all
        sel = exact & (lam > tier_lo) & ((lam <= tier_hi) | last)
        tier_lo = tier_hi
        if sel.any():
            out[sel] = _binomial_bin_probabilities(lookups, p[sel], min(lookups, tier_kmax))
    big = ~exact
    if big.any():
        lb = lam[big]
        sd = np.sqrt(lb * (1.0 - np.minimum(p[big], 1.0)))
        edges = bin_edges()[1:-1]  # 1, 2, ..., 2^15
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (edges[None, :] + 0.5 - lb[:, None]) / sd[:, None]
        # sd == 0 (a single row, p == 1): the count is exactly lookups.
        z = np.where(sd[:, None] > 0, z, np.where(edges[None, :] + 0.5 >= lb[:, None], np.inf, -np.inf))
        cdf = np.concatenate((np.zeros((lb.size, 1)), _norm_cdf(z), np.ones((lb.size, 1))), axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            cdf[:, 0] = np.where(sd > 0, _norm_cdf((0.5 - lb) / sd), 0.0)
        out[big] = np.diff(cdf, axis=1)
    return out


@functools.lru_cache(maxsize=1 << 16)  # pure and costly (~5 ms): every bind of a cost model and every cache sizing asks again
def histogram_from_zipf(rows: int, pooling_factor: float, zipf_exponent: float, batch_size: int) -> tuple[float, ...]:
    """Expected 17-bin access histogram of a trace of i.i.d. Zipf(s) lookups -- computed, not sampled.

    The trace has ``L = round(batch_size * pooling_factor)`` lookups, each row ``i = 1..rows`` (by popularity rank)
    drawn with probability ``p_i = i^-s / H(rows, s)`` (s = 0 is uniform).  This is the usual synthetic model of
    recommendation traffic; it lets an instance say "Zipf 1.05" instead of shipping a histogram, and lets tests
    check the generators against theory.

    Approximations (deterministic, O(a few thousand) work for any ``rows`` up to 1e8 and beyond):

    * row i's access count is Binomial(L, p_i), rows treated as independent; the returned share of bin k is
      ``E[#rows in bin k] / E[#unique rows]`` (a ratio of expectations, which is what a large trace measures);
    * the binomial is evaluated exactly when ``L * p_i <= 100`` (or L <= 256), otherwise by its normal
      approximation with continuity correction (bins are powers of two, much wider than sqrt(L p_i));
    * ranks 1..4096 are exact; beyond, the rank range is cut into ~2000 log-spaced buckets whose probability mass
      is the integral of x^-s over the bucket (midpoint rule, relative error O(s^2 / 4096^2)) and whose ranks all
      get the bucket's mean probability (within-bucket spread < 0.5 % for s <= 1).

    Returns all zeros when L == 0 (a trace with no lookups has no unique rows, as in :func:`table_stats`).
    """
    rows = _check_int("rows", rows, 1)
    pooling_factor = _check_real("pooling_factor", pooling_factor, 0.0)
    s = _check_real("zipf_exponent", zipf_exponent, 0.0)
    batch_size = _check_int("batch_size", batch_size, 1)
    lookups = _total_lookups(batch_size, pooling_factor)
    if lookups == 0:
        return (0.0,) * ACCESS_BINS
    groups = _zipf_groups(rows, s)
    expected_rows = groups.size @ _expected_bin_probabilities(lookups, groups.p)
    total = float(expected_rows.sum())
    return tuple(float(x) for x in expected_rows / total)


# --------------------------------------------------------------------------------------------------------------
# generating


def _bag_offsets(lookups: int, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """Split `lookups` into `batch_size` bags with a uniform multinomial: lengths vary like real bags do."""
    lengths = rng.multinomial(lookups, np.full(batch_size, 1.0 / batch_size))
    offsets = np.zeros(batch_size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _apportion(total: int, shares: np.ndarray) -> np.ndarray:
    """Largest-remainder rounding of total * shares to integers summing to total."""
    quota = total * shares
    n = np.floor(quota).astype(np.int64)
    short = total - int(n.sum())
    if short > 0:
        order = np.argsort(-(quota - n), kind="stable")
        n[order[:short]] += 1
    return n


def _allocate(amount: int, capacity: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Integers a_i in [0, capacity_i] summing to amount (<= sum(capacity)), proportional to capacity."""
    cap_total = int(capacity.sum())
    if amount <= 0 or cap_total == 0:
        return np.zeros_like(capacity)
    a = (capacity * amount) // cap_total
    rest = amount - int(a.sum())
    if rest > 0:
        eligible = np.flatnonzero(capacity - a > 0)
        a[rng.choice(eligible, size=rest, replace=False)] += 1
    return a


def _counts_for_histogram(lookups: int, rows: int, h: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per-unique-row access counts (sum == lookups, len <= min(rows, lookups)) whose bin shares follow h."""
    # Typical count of a row in each bin: the mean of the integers we draw from (uniform within the bin).
    draw_hi = np.minimum(_BIN_HI, _TOP_BIN_DRAW_HI)
    bin_mean = (_BIN_LO + draw_hi) / 2.0
    unique = int(round(lookups / float(h @ bin_mean)))
    unique = max(1, min(unique, rows, lookups))
    n = _apportion(unique, h)

    # Rounding may ask for a heavy row the trace cannot pay for (minimum total above `lookups`): demote the
    # heaviest rows to single accesses until it can.  Only happens for tiny shares or unachievable requests.
    minimum = int(n @ _BIN_LO)
    for k in range(ACCESS_BINS - 1, 0, -1):
        if minimum <= lookups:
            break
        move = min(int(n[k]), -(-(minimum - lookups) // int(_BIN_LO[k] - 1)))
        n[k] -= move
        n[0] += move
        minimum -= move * int(_BIN_LO[k] - 1)

    bins = np.repeat(np.arange(ACCESS_BINS), n)
    lo = _BIN_LO[bins]
    hi = _BIN_HI[bins]
    counts = rng.integers(lo, draw_hi[bins], endpoint=True)
    diff = lookups - int(counts.sum())
    if diff < 0:  # remove accesses, never below a row's bin minimum (possible: minimum <= lookups)
        counts -= _allocate(-diff, counts - lo, rng)
    elif diff > 0:
        top = np.flatnonzero(bins == ACCESS_BINS - 1)
        if top.size:  # the top bin is unbounded: it absorbs the surplus
            q, r = divmod(diff, top.size)
            counts[top] += q
            counts[top[rng.choice(top.size, size=r, replace=False)]] += 1
        else:
            room = hi - counts
            add = _allocate(min(diff, int(room.sum())), room, rng)
            counts += add
            # Not enough room (too few rows for this many lookups): the hottest row takes the overflow, which
            # moves the fewest rows out of their requested bins.
            counts[int(np.argmax(counts))] += diff - int(add.sum())
    return counts


def _random_ids(rows: int, unique: int, rng: np.random.Generator) -> np.ndarray:
    """`unique` distinct random row ids in [0, rows), one of them rows - 1 (so the measured rows == rows).

    Memory O(unique), not O(rows), for huge tables: ids are then drawn with replacement and deduplicated until
    there are enough (a uniformly random set), and a random subset of them is kept.
    """
    if rows <= max(2 * unique, 1 << 20):
        ids = rng.permutation(rows)[:unique]
    else:
        ids = np.zeros(0, dtype=np.int64)
        while ids.size < unique:
            need = unique - ids.size
            ids = _sorted_unique(np.concatenate((ids, rng.integers(0, rows, size=need + need // 4 + 16))))
        ids = rng.permutation(ids)[:unique]
    if not np.any(ids == rows - 1):
        ids[rng.integers(unique)] = rows - 1
    return ids.astype(np.int64)


def generate_trace(
    rows: int, pooling_factor: float, access_histogram: Sequence[float], batch_size: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded synthetic trace ``(indices, offsets)`` (int64) whose :func:`table_stats` match the arguments.

    What is guaranteed:

    * exactly ``L = round(batch_size * pooling_factor)`` lookups, so the measured pooling factor is L / B,
      within 0.5 / B of the request; bag lengths are a uniform multinomial split of L (they vary, as real ones do);
    * the largest index is exactly ``rows - 1`` whenever L >= 1 (so the measured ``rows`` equals ``rows``);
    * the same seed gives identical arrays (``np.random.default_rng(seed)``);
    * the measured access histogram is within ``HISTOGRAM_L1_TOLERANCE`` (0.05) in L1 of the request when
      L >= 1000 and the request is *achievable*: the number of unique rows it implies, ``U = L / m`` with ``m``
      the mean count per unique row under the histogram, is at most ``rows`` and at least ~340 (17 / 0.05).
      The only error then is rounding ``U * share`` to whole rows, at most (non-empty bins) / U in L1.

    How: U unique rows are apportioned to the bins (largest remainder), each gets a count drawn uniformly inside
    its bin ((2^15, 2^16] for the top bin), then counts are nudged -- staying inside their bins -- until they sum
    to exactly L (the unbounded top bin absorbs any surplus).  Which ids are hot is a seeded random choice, and the
    lookups are shuffled before being cut into bags.

    Unachievable requests get the closest thing: a share so small that rounding gives a row the trace cannot pay
    for (or a histogram needing more lookups than L) has its heaviest rows demoted to single accesses; a request
    needing more unique rows than ``rows`` (or than L) uses all of them and lets the hottest row take the
    overflow.  For L == 0 the trace is empty (and its measured rows is 0).
    """
    rows = _check_int("rows", rows, 1)
    pooling_factor = _check_real("pooling_factor", pooling_factor, 0.0)
    h = _check_histogram("access_histogram", access_histogram)
    batch_size = _check_int("batch_size", batch_size, 1)
    seed = _check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    lookups = _total_lookups(batch_size, pooling_factor)
    if lookups == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(batch_size + 1, dtype=np.int64)
    counts = _counts_for_histogram(lookups, rows, h, rng)
    ids = _random_ids(rows, counts.size, rng)
    indices = np.repeat(ids, counts)
    rng.shuffle(indices)
    return indices, _bag_offsets(lookups, batch_size, rng)


def _alias_table(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker / Vose alias table of a discrete distribution p (sums to 1): slot j keeps j with probability
    prob[j] and gives alias[j] otherwise."""
    n = p.size
    scaled = p * n
    prob = np.ones(n)
    alias = np.arange(n, dtype=np.int64)
    small = [int(i) for i in np.flatnonzero(scaled < 1.0)]
    large = [int(i) for i in np.flatnonzero(scaled >= 1.0)]
    while small and large:
        j, k = small.pop(), large.pop()
        prob[j] = scaled[j]
        alias[j] = k
        scaled[k] -= 1.0 - scaled[j]
        (small if scaled[k] < 1.0 else large).append(k)
    return prob, alias  # leftovers (rounding) keep prob 1


def _rank_permutation(rows: int, rng: np.random.Generator) -> tuple[int, int]:
    """(a, b) with gcd(a, rows) == 1: rank r -> (a * r + b) mod rows is a bijection in O(1) memory.

    a * r stays below 2^62, so the int64 arithmetic never overflows.
    """
    if rows == 1:
        return 1, 0
    a_max = max(1, min(rows - 1, (1 << 62) // rows))
    a = 1
    for _ in range(100):
        cand = int(rng.integers(1, a_max, endpoint=True))
        if math.gcd(cand, rows) == 1:
            a = cand
            break
    b = int(rng.integers(0, rows))
    return a, b


def generate_trace_zipf(
    rows: int, pooling_factor: float, zipf_exponent: float, batch_size: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """A seeded trace of ``round(batch_size * pooling_factor)`` i.i.d. Zipf(s) lookups, as ``(indices, offsets)``.

    The model behind :func:`histogram_from_zipf`: rank i (1-based) has probability proportional to i^-s.  Ranks
    1..4096 are sampled exactly by inverse CDF; the tail by inverting the continuous x^-s density on
    [4096.5, rows + 0.5] and rounding, which is O(L) time and memory whatever ``rows`` is (1e8 is fine).
    Ranks become row ids through a seeded affine permutation ``(a * rank + b) mod rows`` (gcd(a, rows) = 1), so
    the hot rows are scattered without materialising a permutation of all rows.  If no lookup hits ``rows - 1``,
    one random lookup is redirected there so that the measured rows equals ``rows``; bags are a multinomial
    split as in :func:`generate_trace`.
    """
    rows = _check_int("rows", rows, 1)
    pooling_factor = _check_real("pooling_factor", pooling_factor, 0.0)
    s = _check_real("zipf_exponent", zipf_exponent, 0.0)
    batch_size = _check_int("batch_size", batch_size, 1)
    seed = _check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    lookups = _total_lookups(batch_size, pooling_factor)
    if lookups == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(batch_size + 1, dtype=np.int64)

    head = min(rows, _HEAD_RANKS)
    head_w = np.arange(1, head + 1, dtype=np.float64) ** -s
    head_mass = float(head_w.sum())
    prob, alias = _alias_table(head_w / head_mass)
    lo, hi = head + 0.5, rows + 0.5
    tail_mass = float(_power_integral(lo, hi, s)) if rows > head else 0.0
    u = rng.random(lookups) * (head_mass + tail_mass)
    ranks = np.empty(lookups, dtype=np.int64)  # 0-based
    in_head = u < head_mass
    # Head: Walker's alias method (O(1) per draw; a binary search over 4096 ranks is several times slower),
    # reusing u: given u < head_mass, x = u / head_mass * head is uniform on [0, head).
    x = u[in_head] * (head / head_mass)
    slot = np.minimum(x.astype(np.int64), head - 1)
    ranks[in_head] = np.where(x - slot < prob[slot], slot, alias[slot])
    if tail_mass > 0.0:
        tail = ~in_head
        x = _zipf_tail_inverse((u[tail] - head_mass) / tail_mass, lo, hi, s)
        ranks[tail] = np.clip(np.floor(x + 0.5).astype(np.int64), head + 1, rows) - 1

    a, b = _rank_permutation(rows, rng)
    indices = (ranks * a + b) % rows
    if not np.any(indices == rows - 1):
        indices[rng.integers(lookups)] = rows - 1
    return indices, _bag_offsets(lookups, batch_size, rng)


def table_histogram(table: Table, batch_size: int) -> np.ndarray:
    """A table's 17-bin access histogram at `batch_size` lookups per sample-batch: as given (normalised), or derived
    from its Zipf exponent (histogram_from_zipf). The one place the IR's two access descriptions become a histogram."""
    if table.access.histogram is not None:
        h = np.asarray(table.access.histogram, dtype=np.float64)
        return h / h.sum()
    return np.asarray(histogram_from_zipf(table.rows, table.pooling_factor, float(table.access.zipf), batch_size))
