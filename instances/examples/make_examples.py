#!/usr/bin/env python
"""Write the bundled example instances (small, tight, large, infeasible) deterministically.

    python instances/examples/make_examples.py            # from the repository root; rewrites the four JSON files
    python instances/examples/make_examples.py --check    # regenerate in memory and fail if a file's content differs

Tables are DLRM-like: hash sizes (rows) from a log-normal truncated to a realistic range (mean about 4e6 for
`large`, smaller for the others so that memory matters), dims from {16, 32, 64, 128}, heavy-tailed pooling factors
(log-normal, mean about 15, some below 1), and a per-table Zipf exponent in [0.6, 1.4] from which the 17-bin access
histogram is computed (shardopt.core.stats.histogram_from_zipf) for the instance's batch size. Both the exponent and the
histogram are stored. Same seed, same bytes: only numpy's seeded generator and shardopt's own code are used.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shardopt.core.ir import dumps, instance_from_dict  # noqa: E402
from shardopt.core.memory import table_bytes_array  # noqa: E402
from shardopt.core.stats import histogram_from_zipf  # noqa: E402

GENERATOR = "instances/examples/make_examples.py"
COMMAND = "python instances/examples/make_examples.py"
DIMS = (16, 32, 64, 128)
DIM_SHARES = (0.2, 0.3, 0.3, 0.2)
GiB = 1024**3
MiB = 1024**2

# pooling factor ~ log-normal with sigma 1.5 and mean exp(mu + sigma^2 / 2) = 15: median ~4.9, ~15% below 1
POOLING_SIGMA = 1.5
POOLING_MU = math.log(15.0) - POOLING_SIGMA**2 / 2
POOLING_RANGE = (0.05, 200.0)
ZIPF_RANGE = (0.6, 1.4)


def truncated_lognormal(rng: np.random.Generator, n: int, mu: float, sigma: float, lo: float, hi: float) -> np.ndarray:
    """n draws of exp(N(mu, sigma)) conditioned on [lo, hi] (rejection sampling: deterministic for a seeded rng)."""
    out = np.empty(0)
    while len(out) < n:
        x = np.exp(rng.normal(mu, sigma, size=2 * n))
        out = np.concatenate([out, x[(x >= lo) & (x <= hi)]])
    return out[:n]


def rounded_histogram(rows: int, pooling: float, zipf: float, batch_size: int) -> list[float]:
    """The Zipf histogram rounded to 6 digits, the rounding residual put on the largest bin (sum within 1e-6)."""
    h = np.round(np.asarray(histogram_from_zipf(rows, pooling, zipf, batch_size), dtype=np.float64), 6)
    k = int(np.argmax(h))
    h[k] = round(h[k] + (1.0 - float(h.sum())), 6)
    assert abs(float(h.sum()) - 1.0) < 1e-5 and (h >= 0).all(), (rows, pooling, zipf, h)
    return [float(x) for x in h]


def make_tables(rng: np.random.Generator, n: int, rows_mu: float, rows_sigma: float, rows_range: tuple[float, float], batch_size: int) -> list[dict]:
    rows = np.round(truncated_lognormal(rng, n, rows_mu, rows_sigma, *rows_range)).astype(np.int64)
    dims = rng.choice(DIMS, size=n, p=DIM_SHARES)
    pooling = np.clip(np.exp(rng.normal(POOLING_MU, POOLING_SIGMA, size=n)), *POOLING_RANGE)
    zipf = rng.uniform(*ZIPF_RANGE, size=n)
    width = len(str(n - 1))
    tables = []
    for i in range(n):
        p = float(np.round(pooling[i], 3))
        s = float(np.round(zipf[i], 3))
        r = int(rows[i])
        tables.append(
            {
                "name": f"t{i:0{width}d}",
                "rows": r,
                "dim": int(dims[i]),
                "pooling_factor": p,
                "access": {"histogram": rounded_histogram(r, p, s, batch_size), "zipf": s},
            }
        )
    return tables


def instance_doc(name: str, seed: int, description: str, tables: list[dict], topology: dict, batch_size: int) -> dict:
    return {
        "schema_version": 1,
        "kind": "instance",
        "name": name,
        "tables": tables,
        "topology": topology,
        "workload": {"batch_size": batch_size, "optimizer": "rowwise_adagrad", "weight_dtype": "fp32"},
        "metadata": {
            "suite": "examples",
            "generator": GENERATOR,
            "seed": seed,
            "command": COMMAND,
            "description": description,
        },
    }


def table_bytes(doc: dict) -> np.ndarray:
    probe = json.loads(json.dumps(doc))
    probe["topology"]["memory_bytes"] = 1
    return table_bytes_array(instance_from_dict(probe))


def round_up(x: float, unit: int) -> int:
    return int(math.ceil(x / unit) * unit)


def first_fit_decreasing(sizes: np.ndarray, capacity: int, n_dev: int) -> bool:
    """Largest table first onto the device with the most room: a witness that a table-wise plan exists."""
    free = np.full(n_dev, capacity, dtype=np.int64)
    for size in sorted(sizes.tolist(), reverse=True):
        d = int(np.argmax(free))
        if free[d] < size:
            return False
        free[d] -= size
    return True


def make_small() -> dict:
    seed = 1
    rng = np.random.default_rng(seed)
    batch = 16384
    tables = make_tables(rng, 20, math.log(3e5), 1.2, (1e3, 5e6), batch)
    topo = {"num_devices": 4, "devices_per_host": 4, "memory_bytes": 1, "hardware": "v100"}
    doc = instance_doc("small", seed, "20 tables on 4 V100s in one host; memory comfortable (tables use ~35% of it)", tables, topo, batch)
    sizes = table_bytes(doc)
    doc["topology"]["memory_bytes"] = round_up(max(sizes.sum() / 4 / 0.35, 1.5 * sizes.max()), 64 * MiB)
    return doc


def make_tight() -> dict:
    seed = 2
    rng = np.random.default_rng(seed)
    batch = 16384
    tables = make_tables(rng, 60, math.log(2e5), 0.8, (1e3, 4e5), batch)
    topo = {"num_devices": 8, "devices_per_host": 4, "memory_bytes": 1, "hardware": "v100"}
    doc = instance_doc(
        "tight", seed, "60 tables on 8 V100s in 2 hosts of 4; tables need ~93% of the memory, still placeable table-wise", tables, topo, batch
    )
    sizes = table_bytes(doc)
    capacity = round_up(sizes.sum() / 8 / 0.93, MiB)
    assert sizes.max() < capacity / 2, "tight: a table too large for a meaningful packing"
    assert first_fit_decreasing(sizes, capacity, 8), "tight: no table-wise packing found"
    doc["topology"]["memory_bytes"] = capacity
    return doc


def make_large() -> dict:
    seed = 3
    rng = np.random.default_rng(seed)
    batch = 65536
    # truncated to [1e3, 4e7] rows; mu chosen so that the mean hash size is ~4e6 as in the DLRM dataset
    tables = make_tables(rng, 856, 14.05, 1.8, (1e3, 4e7), batch)
    topo = {"num_devices": 128, "devices_per_host": 8, "memory_bytes": 1, "hardware": "a100"}
    doc = instance_doc(
        "large",
        seed,
        "856 DLRM-like tables (mean ~4e6 rows) on 128 A100s, 8 per host; memory_bytes is the per-device embedding "
        "budget (24 GiB of the 80 GiB: the rest holds the dense model and activations)",
        tables,
        topo,
        batch,
    )
    doc["topology"]["memory_bytes"] = 24 * GiB
    return doc


def make_infeasible() -> dict:
    seed = 4
    rng = np.random.default_rng(seed)
    batch = 16384
    tables = make_tables(rng, 5, math.log(1e5), 0.8, (1e3, 1e6), batch)
    # one table of 1e7 x 128 fp32 = 5.12 GB (+ 40 MB of row-wise state): more than both 1 GiB devices together
    tables[2] = {**tables[2], "name": "huge", "rows": 10_000_000, "dim": 128,
                 "access": {"histogram": rounded_histogram(10_000_000, tables[2]["pooling_factor"], tables[2]["access"]["zipf"], batch),
                            "zipf": tables[2]["access"]["zipf"]}}
    topo = {"num_devices": 2, "devices_per_host": 2, "memory_bytes": GiB, "hardware": "v100"}
    return instance_doc("infeasible", seed, "table 'huge' (5.16 GB) fits on no device (1 GiB each, 2 GiB in all)", tables, topo, batch)


EXAMPLES = {"small": make_small, "tight": make_tight, "large": make_large, "infeasible": make_infeasible}


def render(doc: dict) -> str:
    return dumps(instance_from_dict(doc, doc["name"])) + "\n"  # validated, in the IR's canonical form


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if a file differs from what would be written")
    ap.add_argument("--only", nargs="*", choices=sorted(EXAMPLES), help="only these examples")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: next to this script)")
    args = ap.parse_args(argv)
    stale = []
    for name in args.only or EXAMPLES:
        text = render(EXAMPLES[name]())
        path = args.out / f"{name}.json"
        if args.check:
            # the content, not the formatting: a change of the IR's JSON layout does not make a file stale
            if not path.exists() or json.loads(path.read_text()) != json.loads(text):
                stale.append(str(path))
            continue
        path.write_text(text)
        print(f"wrote {path} ({len(text) / 1e6:.2f} MB)")
    if stale:
        print("out of date: " + ", ".join(stale) + f" (run {COMMAND})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
