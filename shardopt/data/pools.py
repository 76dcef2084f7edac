"""Table pools: the embedding tables that benchmark instances are drawn from.

The published systems drew their tasks from Meta's open DLRM embedding dataset (`fbgemm_t856_bs65536.pt`, 856
tables, batch 65,536), which cannot be downloaded here. So shardopt ships a *synthetic* pool whose per-table
statistics follow what is published about that dataset, and `shardopt import-dlrm` builds the real pool from the
file for anyone who has it. A pool holds each table's hash size, pooling factor and 17-bin access histogram at the
pool's batch size; dims are not part of the dataset (the task families assign them). Learned models train on one
half of a pool and are judged on the other (`split_pool`), so the tables they are judged on are unseen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from shardopt.core.ir import (
    SCHEMA_VERSION,
    AccessProfile,
    IRError,
    IRModel,
    check_unique_names,
    read_json,
    save,
    validate_document,
)

# the pool the standard suites are drawn from, as committed in the repository's instances/pools/
REPO_INSTANCES = Path(__file__).resolve().parents[2] / "instances"
STANDARD_POOL = "dlrm-synthetic-856"


def standard_pool_path(part: str = "all") -> Path:
    """The committed standard pool (`all`) or its disjoint `train` / `test` half."""
    if part not in ("train", "test", "all"):
        raise ValueError(f"pool part {part!r} is not one of train, test, all")
    suffix = "" if part == "all" else f"-{part}"
    return REPO_INSTANCES / "pools" / f"{STANDARD_POOL}{suffix}.json"


class PoolTable(IRModel):
    name: str = Field(min_length=1)
    rows: int = Field(ge=1)
    pooling_factor: float = Field(ge=0, allow_inf_nan=False)
    access: AccessProfile


class TablePool(IRModel):
    """A named set of tables with their statistics at `batch_size` (the batch their histograms were measured at)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["pool"] = "pool"
    name: str
    batch_size: int = Field(ge=1)
    synthetic: bool
    provenance: dict[str, Any] = Field(default_factory=dict)
    tables: list[PoolTable] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> TablePool:
        check_unique_names(self.tables)
        return self


@dataclass(frozen=True)
class DlrmTargets:
    """What is published about the 856-table DLRM dataset (DreamShard / NeuroShard papers and their repositories)."""

    tables: int = 856
    batch_size: int = 65536
    rows_mean: float = 4.11e6
    rows_std: float = 3.14e6
    rows_floor: int = 100
    pooling_mean: float = 15.8
    pooling_std: float = 25.6
    zipf_low: float = 0.4  # per-table access skew: Zipf exponents drawn uniformly in [low, high]
    zipf_high: float = 1.4


DLRM = DlrmTargets()


def generate_pool(n: int = DLRM.tables, seed: int = 0, targets: DlrmTargets = DLRM, name: str | None = None) -> TablePool:
    """A synthetic pool of `n` tables following the published DLRM statistics.

    rows: a gamma law (shape (mean/std)^2) standardised to the target mean and standard deviation, floored;
    pooling factor: a log-normal law (heavy tail, a few tables below 1) whose spread is chosen so that the *sample*
    has the target coefficient of variation, rescaled to the exact target mean; access: a Zipf exponent per table, from which the 17-bin histogram at the
    pool's batch is derived (shardopt.core.stats.histogram_from_zipf).
    """
    from shardopt.core.stats import histogram_from_zipf

    if n < 1:
        raise ValueError(f"n: {n} must be >= 1")
    rng = np.random.default_rng(seed)
    shape = (targets.rows_mean / targets.rows_std) ** 2
    raw = rng.gamma(shape, 1.0, size=n)
    if n > 1 and raw.std() > 0:
        raw = (raw - raw.mean()) / raw.std()
    rows = np.maximum(np.round(targets.rows_mean + raw * targets.rows_std), targets.rows_floor).astype(np.int64)
    pooling = _lognormal_with_moments(rng.standard_normal(n), targets.pooling_mean, targets.pooling_std)
    pooling = np.round(pooling, 4)
    zipf = np.round(rng.uniform(targets.zipf_low, targets.zipf_high, size=n), 4)
    tables = []
    for i in range(n):
        h = histogram_from_zipf(int(rows[i]), float(pooling[i]), float(zipf[i]), targets.batch_size)
        tables.append(
            PoolTable(
                name=f"t{i:03d}",
                rows=int(rows[i]),
                pooling_factor=float(pooling[i]),
                access=AccessProfile(histogram=round_histogram(h), zipf=float(zipf[i])),
            )
        )
    return TablePool(
        name=name or f"dlrm-synthetic-{n}",
        batch_size=targets.batch_size,
        synthetic=True,
        provenance={"generator": "shardopt.data.pools.generate_pool", "seed": seed, "n": n, "targets": targets.__dict__},
        tables=tables,
    )


def _lognormal_with_moments(z: np.ndarray, mean: float, std: float) -> np.ndarray:
    """exp(sigma z) rescaled to `mean`, with sigma bisected so the sample's std / mean is std / mean (the sample std
    of a heavy-tailed draw falls short of the law's, so matching the law's parameters would miss the target)."""
    target = std / mean

    def cv(sigma: float) -> float:
        x = np.exp(sigma * z)
        return float(x.std() / x.mean())

    lo, hi = 1e-3, 4.0
    if len(z) < 2 or cv(hi) < target:
        sigma = math.sqrt(math.log1p(target**2))
    else:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if cv(mid) < target else (lo, mid)
        sigma = (lo + hi) / 2
    x = np.exp(sigma * z)
    return x * (mean / x.mean())


def round_histogram(h: Any, digits: int = 6) -> list[float]:
    """Shares rounded for compact JSON, with the rounding error put on the largest bin so they still sum to 1."""
    r = [round(float(x), digits) for x in h]
    k = max(range(len(r)), key=lambda i: r[i])
    r[k] = round(r[k] + 1.0 - sum(r), digits)
    return r


def split_pool(pool: TablePool, seed: int = 0) -> tuple[TablePool, TablePool]:
    """Disjoint train / test halves, chosen by a seeded permutation (the train half gets the extra table when odd)."""
    if len(pool.tables) < 2:
        raise ValueError(f"pool {pool.name!r} has {len(pool.tables)} table(s): at least 2 are needed to split it")
    perm = np.random.default_rng(seed).permutation(len(pool.tables))
    half = (len(pool.tables) + 1) // 2
    out = []
    for part, idx in (("train", perm[:half]), ("test", perm[half:])):
        tables = [pool.tables[i] for i in sorted(idx)]
        prov = {**pool.provenance, "split": {"of": pool.name, "part": part, "seed": seed}}
        out.append(pool.model_copy(update={"name": f"{pool.name}-{part}", "tables": tables, "provenance": prov}))
    return out[0], out[1]


def pool_statistics(pool: TablePool) -> dict[str, float]:
    rows = np.array([t.rows for t in pool.tables], dtype=np.float64)
    pf = np.array([t.pooling_factor for t in pool.tables], dtype=np.float64)
    return {
        "tables": float(len(pool.tables)),
        "rows_mean": float(rows.mean()),
        "rows_std": float(rows.std()),
        "rows_min": float(rows.min()),
        "rows_max": float(rows.max()),
        "pooling_mean": float(pf.mean()),
        "pooling_std": float(pf.std()),
        "pooling_min": float(pf.min()),
        "pooling_max": float(pf.max()),
        "pooling_below_1": float((pf < 1).sum()),
    }


def pool_from_dict(data: Any, source: str | None = None) -> TablePool:
    return validate_document(TablePool, data, source)


def load_pool(path: str | Path) -> TablePool:
    return pool_from_dict(read_json(path), str(path))


def save_pool(pool: TablePool, path: str | Path) -> None:
    save(pool, path)


__all__ = [
    "DLRM",
    "DlrmTargets",
    "IRError",
    "PoolTable",
    "TablePool",
    "generate_pool",
    "load_pool",
    "pool_from_dict",
    "pool_statistics",
    "round_histogram",
    "save_pool",
    "split_pool",
]
