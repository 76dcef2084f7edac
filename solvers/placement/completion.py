"""Would a move still leave room for the rest? The check behind the RL policies' safe mask and the heuristics'
completion-checked pass.

A one-table-at-a-time packer that orders tables by cost (not bytes) can fill devices so that a large table left for
later fits nowhere, although a plan exists. Before each move this check keeps only the devices after which the
remaining tables (bytes descending) still fit by worst fit (the device with the most free memory). Worst fit is a
sufficient test, not an exact one: a device it rejects might still have had a completion, and when it rejects every
device with room the caller gets the plain room mask back (the pass may then still fail, and the caller moves on).

The check is skipped where it cannot fail: if the total free memory after the move minus the remaining bytes is at
least D x a remaining table, that table (and every smaller one) finds room whatever happens (at a failure every
device would have less free memory than it, so the total free memory would be below D x its size).
"""

from __future__ import annotations

import numpy as np

from shardopt.core.work import charge_seconds

# the check's cost on the 2-core VM (1-64 lanes x 8-64 devices): about 20 us a call and, per remaining table it
# packs, 3.5 us plus 25 ns per (lane, device) row; charged to a work budget (shardopt.core.work), which the cost-model
# calls alone under-counted by 5x on tight tiered instances (the check took 10.9 of 14.6 s on a 2-work-second budget)
CHECK_CALL_S = 20e-6
CHECK_TABLE_S = 3.5e-6
CHECK_ROW_S = 25e-9


def completion_mask(free: np.ndarray, size: int, rest: np.ndarray, room: np.ndarray) -> np.ndarray:
    """[K, D] bool: the devices with `room` after which the `rest` tables still fit by worst fit, per lane.

    `free` [K, D] free bytes per lane (placement in progress) and device; `size` the bytes of the table being placed;
    `rest` the bytes of the tables still to place after it (any order); `room` [K, D] the devices with room for it.
    A lane where no device with room passes gets its `room` row back unchanged.
    """
    free = np.asarray(free, dtype=np.int64)
    rest = np.sort(np.asarray(rest, dtype=np.int64))[::-1]
    if len(rest) == 0:
        return room
    K, D = free.shape
    slack = float(free.sum(axis=1).min() - size - rest.sum())
    n = int((rest > slack / D).sum())  # rest is descending: only its first n can fail to fit
    if n == 0:
        return room
    eye = np.eye(D, dtype=np.int64)
    # [lane x move, device] free after the move, flat: plain fancy indexing is several times cheaper than
    # take_along_axis on arrays this small, and the loop runs once per remaining table
    fa = (np.broadcast_to(free[:, None, :], (K, D, D)) - size * eye[None]).reshape(K * D, D)
    rows = np.arange(K * D)
    fits = np.ones(K * D, dtype=bool)
    for s in rest[:n]:
        j = fa.argmax(axis=1)  # worst fit: the device with the most free memory
        v = fa[rows, j]
        fits &= v >= s
        fa[rows, j] = v - s
    charge_seconds(CHECK_CALL_S + n * (CHECK_TABLE_S + CHECK_ROW_S * K * D))
    ok = room & fits.reshape(K, D)
    has = ok.any(axis=1, keepdims=True)
    return np.where(has, ok, room)
