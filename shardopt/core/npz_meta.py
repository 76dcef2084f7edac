"""Small trained weights on disk: float32 arrays plus a JSON `meta` record in one `.npz`.

The neural cost models (costmodels/neural.py) and the RL policies (solvers/rl/common.py) ship their weights this way:
no pickle (allow_pickle=False, so a weights file cannot run code), a `kind` in the record so one kind of file is never
loaded as another, and an atomic write (a crash mid-save leaves the old file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def save_npz_meta(path: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write `arrays` (as float32) and `meta` (as JSON) to `path`, atomically."""
    p = Path(path)
    body = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    tmp = p.with_name(p.name + ".tmp.npz")
    np.savez_compressed(tmp, meta=body, **{k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()})
    tmp.replace(p)


def load_npz_meta(path: str | Path, kind: str, what: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays as float64, meta) of a file written by `save_npz_meta` whose meta says `kind`; ValueError naming the
    file and `what` it should have been otherwise."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: no such file")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k].astype(np.float64) for k in z.files if k != "meta"}
            meta = json.loads(bytes(z["meta"]).decode())
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{p}: not {what} ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        raise ValueError(f"{p}: not {what} (kind {meta.get('kind') if isinstance(meta, dict) else None!r})")
    return arrays, meta
