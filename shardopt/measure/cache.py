"""The measurement cache: a SQLite file of kernel timings keyed by everything that was timed.

Re-judging a plan, or judging another plan that puts the same shards on one device, costs nothing the second time.
The key covers the backend, the kernel and the hardware it ran on, each shard's table statistics, slice and memory
tier (kernel and cache load factor, for a shard not in HBM), the workload's optimizer and dtype, the batch actually
timed, the trace seed, repeats, warm-ups and threads — so a hit is the same measurement, never a similar one.
Several processes may share the file (WAL mode, busy timeout).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from shardopt.core.ir import Instance, Kernel, Shard
from shardopt.measure.backends.base import KernelTiming, TimingSettings

CACHE_ENV = "SHARDOPT_CACHE"


def default_cache_path() -> Path:
    """$SHARDOPT_CACHE, else ~/.cache/shardopt/measurements.sqlite."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "shardopt" / "measurements.sqlite"


def measurement_key(backend: str, kernel: str, hardware: str, instance: Instance, shards: list[Shard], settings: TimingSettings) -> str:
    index = instance.table_index()
    parts = []
    for s in shards:
        t = instance.tables[index[s.table]]
        parts.append(
            {
                "table": t.model_dump(mode="json", exclude_none=True),
                "dtype": instance.table_dtype(t).value,
                "cols": list(s.col_range(t)),
                "rows": list(s.row_range(t)),
                "replicated": s.replicated,
                # the memory tier, only when not HBM: keys of HBM shards (every key stored so far) stay the same
                **({"kernel": s.kernel.value, "cache_load_factor": s.cache_load_factor} if s.kernel is not Kernel.fused else {}),
            }
        )
    body: dict[str, Any] = {
        "backend": backend,
        "kernel": kernel,
        "hardware": hardware,
        "optimizer": instance.workload.optimizer.value,
        "shards": parts,
        "settings": settings.key(),
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class MeasurementCache:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=30.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS timings (key TEXT PRIMARY KEY, backend TEXT, kernel TEXT, hardware TEXT, "
            "created REAL, timing TEXT)"
        )
        self._conn.commit()

    def get(self, key: str) -> KernelTiming | None:
        row = self._conn.execute("SELECT timing FROM timings WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        timing = KernelTiming.from_dict(json.loads(row[0]))
        return KernelTiming(**{**timing.__dict__, "cached": True})

    def put(self, key: str, backend: str, timing: KernelTiming) -> None:
        record = json.dumps({**timing.to_dict(), "cached": False})
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO timings VALUES (?, ?, ?, ?, ?, ?)",
                (key, backend, timing.kernel, timing.hardware, time.time(), record),
            )

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM timings").fetchone()[0])

    def close(self) -> None:
        self._conn.close()
