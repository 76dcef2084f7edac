"""The last resort of every packer: whole tables assigned to devices by an exact feasibility MILP (HiGHS).

Why: the packers' orders (the solver's own, the bytes order, worst fit, best fit) are first-fit rules, and on a tight
instance - most of all one whose devices differ in memory, where a large table fits only the large devices and every
choice on those devices decides what is left - each of them can miss a packing that exists. A heuristic that gives
up where a table-wise plan exists hands the user "no plan" for a bin-packing question that an exact model answers in
a second for tens of tables on tens of devices. So when every order fails, the assignment itself is solved exactly:
a binary x[t, d] per allowed (table, device) pair, each table on one device, each device's HBM (and host memory) at
most its capacity, pins, co-located tables on the same device and separated ones apart; a feasibility model (no
objective), the first packing found returned: minimising the largest fill as well found packings of tight instances
far later.

It answers only whether and how the tables fit; what the plan costs is the searches' question.
"""

from __future__ import annotations

import math

import numpy as np

from solvers.milp import SparseModel, solve_milp

# the most seconds the packing MILP may take (its safety cap; a 50-table x 16-device instance at 99.5 % fill: ~2 s)
EXACT_PACKING_MAX_S = 5.0
# branch-and-bound nodes the packing MILP may explore: its deterministic stop (the time limit is the safety cap), so the
# same instance gets the same answer on any machine
EXACT_PACKING_NODES = 2_000
# pairs up to which the packing is tried at all (tables x devices; 3,424 x 512 would be 1.75 M binaries)
EXACT_PACKING_MAX_PAIRS = 200_000


def exact_packing(sizes: np.ndarray, caps: np.ndarray, *, allowed: np.ndarray | None = None,
                  host_sizes: np.ndarray | None = None, host_caps: np.ndarray | None = None,
                  apart: list[set[int]] | None = None, together: list[set[int]] | None = None,
                  time_limit: float = EXACT_PACKING_MAX_S) -> np.ndarray | None:
    """[T] a device per table such that every device's bytes fit its capacity (and host bytes its host capacity),
    every table on an allowed device ([T, D] `allowed`), the tables of `together[t]` on t's device and those of
    `apart[t]` off it; None where HiGHS proves there is none or finds none within `time_limit` seconds."""
    sizes = np.asarray(sizes, dtype=np.float64)
    caps = np.asarray(caps, dtype=np.float64)
    T, D = len(sizes), len(caps)
    ok = (sizes[:, None] <= caps[None, :]) if allowed is None else (np.asarray(allowed, dtype=bool) & (sizes[:, None] <= caps[None, :]))
    if host_sizes is not None and host_caps is not None:
        ok &= np.asarray(host_sizes, dtype=np.float64)[:, None] <= np.asarray(host_caps, dtype=np.float64)[None, :]
    if T == 0:
        return np.zeros(0, dtype=np.int64)
    if not ok.any(axis=1).all() or int(ok.sum()) > EXACT_PACKING_MAX_PAIRS:
        return None
    m = SparseModel()
    x: dict[tuple[int, int], int] = {}
    for t, d in zip(*np.nonzero(ok)):
        x[(int(t), int(d))] = m.var(0, 1, integer=True)
    for t in range(T):
        m.row({x[(t, d)]: 1.0 for d in range(D) if (t, d) in x}, 1.0, 1.0)
    scale = max(caps.max(), 1.0)
    for d in range(D):
        row = {x[(t, d)]: sizes[t] / scale for t in range(T) if (t, d) in x}
        if row:
            m.row(row, -math.inf, caps[d] / scale)
        if host_sizes is not None and host_caps is not None:
            hrow = {x[(t, d)]: float(host_sizes[t]) / scale for t in range(T) if (t, d) in x and host_sizes[t] > 0}
            if hrow:
                m.row(hrow, -math.inf, float(host_caps[d]) / scale)
    for t, group in enumerate(together or []):
        for j in group:
            if j > t:
                for d in range(D):
                    a, b = x.get((t, d)), x.get((j, d))
                    if a is None and b is None:
                        continue
                    if a is None or b is None:  # (one may use d and the other not: neither may)
                        m.row({a if a is not None else b: 1.0}, 0.0, 0.0)
                    else:
                        m.row({a: 1.0, b: -1.0}, 0.0, 0.0)
    for t, group in enumerate(apart or []):
        for j in group:
            if j > t:
                for d in range(D):
                    if (t, d) in x and (j, d) in x:
                        m.row({x[(t, d)]: 1.0, x[(j, d)]: 1.0}, -math.inf, 1.0)
    c = np.zeros(m.n_vars)
    res = solve_milp(m, c, time_limit=max(0.1, float(time_limit)), mip_rel_gap=0.05, node_limit=EXACT_PACKING_NODES)
    if res.x is None or not res.status.has_plan:
        return None
    device_of = np.full(T, -1, dtype=np.int64)
    for (t, d), v in x.items():
        if res.x[v] > 0.5:
            device_of[t] = d
    return device_of if (device_of >= 0).all() else None
