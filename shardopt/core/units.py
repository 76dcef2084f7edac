"""Numbers as people read them in tables and logs (the CLI's rich tables, the TorchRec planner's stats log)."""

from __future__ import annotations


def fmt_bytes(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 ('1.50 GiB'; below 1 KiB, whole bytes)."""
    n = float(n)
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
