"""Benchmark: table statistics from an index trace, and the Zipf access model for huge tables.

`table_stats` runs on every trace a user feeds `shardopt` (5 million lookups should take a fraction of a second on
one core), and `histogram_from_zipf` on every table of a generated suite (a 10^8-row table must not be enumerated
row by row). Their speed was once asserted in tests; it lives here so a slow machine cannot fail a test. Median of
repeats. Run: `.venv/bin/python benchmarks/bench_stats.py`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

from shardopt.core.stats import histogram_from_zipf, table_stats


def _median_s(fn, repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lookups", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    indices = rng.integers(0, 2_000_000, size=args.lookups)
    offsets = np.arange(0, args.lookups + 1, 50)
    stats_s = _median_s(lambda: table_stats(indices, offsets), args.repeats)
    zipf_s = _median_s(lambda: histogram_from_zipf(10**8, 100.0, 1.1, 65536), args.repeats)
    row = {
        "benchmark": "stats",
        "table_stats_lookups": args.lookups,
        "table_stats_s": stats_s,
        "zipf_rows": 10**8,
        "zipf_s": zipf_s,
        "repeats": args.repeats,
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}".strip(),
    }
    print(f"table_stats, {args.lookups:,} lookups (pooling 50): {stats_s * 1e3:8.1f} ms (median of {args.repeats})")
    print(f"histogram_from_zipf, 10^8 rows, batch 65,536:   {zipf_s * 1e3:8.1f} ms")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
