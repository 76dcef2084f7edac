"""Build a table pool from Meta's open DLRM embedding dataset (`fbgemm_t856_bs65536.pt`).

The file is a tuple `(indices, offsets, lengths)` of tensors in fbgemm's TBE input format for T tables and a batch
of B samples: `lengths` is [T, B] (bag lengths), `offsets` has T*B + 1 entries (table-major bag boundaries into
`indices`), `indices` holds all lookups. Each table's statistics are computed exactly as the DreamShard and
NeuroShard papers do (shardopt.core.stats.table_stats): rows = max index + 1, pooling factor = mean bag length, and the
17-bin histogram of access counts of unique rows in the batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shardopt.core.ir import AccessProfile, IRError
from shardopt.core.stats import table_stats
from shardopt.data.pools import PoolTable, TablePool, round_histogram


def _to_numpy(x, what: str, source: str) -> np.ndarray:
    import torch

    if not isinstance(x, torch.Tensor):
        raise IRError([f"{what}: expected a tensor, got {type(x).__name__}"], source)
    if x.dtype.is_floating_point or x.dtype == torch.bool:
        raise IRError([f"{what}: expected an integer tensor, got {x.dtype}"], source)
    return x.detach().cpu().numpy().astype(np.int64, copy=False)


def read_dlrm_tensors(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices, offsets, lengths) as int64 arrays, checked for the dataset's shape; IRError otherwise."""
    import torch

    source = str(path)
    p = Path(path)
    if not p.is_file():
        raise IRError(["no such file"], source)
    try:
        data = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt file
        raise IRError([f"cannot be read as a torch file ({exc.__class__.__name__}: {str(exc).splitlines()[0][:200]})"], source) from None
    if not isinstance(data, (tuple, list)) or len(data) != 3:
        raise IRError([f"expected a tuple (indices, offsets, lengths), got {type(data).__name__}" + (f" of {len(data)}" if isinstance(data, (tuple, list)) else "")], source)
    indices = _to_numpy(data[0], "indices", source)
    offsets = _to_numpy(data[1], "offsets", source)
    lengths = _to_numpy(data[2], "lengths", source)
    if lengths.ndim != 2:
        raise IRError([f"lengths: expected shape [tables, batch], got {list(lengths.shape)}"], source)
    t, b = lengths.shape
    if indices.ndim != 1 or offsets.ndim != 1:
        raise IRError(["indices and offsets must be 1-D"], source)
    if len(offsets) != t * b + 1:
        raise IRError([f"offsets: {len(offsets)} entries, expected tables x batch + 1 = {t * b + 1}"], source)
    if offsets[0] != 0 or offsets[-1] != len(indices) or np.any(np.diff(offsets) < 0):
        raise IRError(["offsets: must start at 0, never decrease and end at len(indices)"], source)
    if not np.array_equal(np.diff(offsets), lengths.reshape(-1)):
        raise IRError(["lengths: do not match the differences of offsets"], source)
    return indices, offsets, lengths


def import_dlrm(path: str | Path, name: str | None = None) -> TablePool:
    indices, offsets, lengths = read_dlrm_tensors(path)
    n_tables, batch = lengths.shape
    tables, empty = [], []
    for t in range(n_tables):
        lo, hi = offsets[t * batch], offsets[(t + 1) * batch]
        stats = table_stats(indices[lo:hi], offsets[t * batch : (t + 1) * batch + 1] - lo)
        hist = list(stats.access_histogram)
        if stats.lookups == 0:  # a table never looked up in this batch: keep it, with one row and no traffic
            empty.append(t)
            hist = [1.0] + [0.0] * (len(hist) - 1)
        tables.append(
            PoolTable(
                name=f"t{t:03d}",
                rows=max(1, stats.rows),
                pooling_factor=float(stats.pooling_factor),
                access=AccessProfile(histogram=round_histogram(hist)),
            )
        )
    return TablePool(
        name=name or Path(path).stem,
        batch_size=int(batch),
        synthetic=False,
        provenance={"importer": "shardopt import-dlrm", "file": Path(path).name, "tables": int(n_tables), "batch": int(batch), "empty_tables": empty},
        tables=tables,
    )
