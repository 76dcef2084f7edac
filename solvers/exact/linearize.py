"""First-order linearisation of a cost model around a plan: what the exact solvers (CP-SAT, MILP) solve.

A device's cost in every shardopt cost model is ``compute(S_d) + comm_d``: ``S_d`` is the sum of the additive states
of the shards on device d (BoundCostModel.table_states) and ``compute`` is nonlinear in it (the analytic model's
shared cache, occupancy and launch floors; the neural model's MLP head); ``comm_d`` is the sum over the plan's
output dists of one all-to-all each (TorchRec runs one per sharding type: whole tables table-wise, column pieces
column-wise; docs/analytic-model.md), each a function of every device's pooled width *in that collective*. A MILP
can only hold linear terms, so around a plan P each device's cost is replaced by

    cost_d(x) ~ c0[d] y_d + sum_i a[i, d] x[i, d]                                   (compute)
              + sum_c [c runs] max(0, max_k k0[c, d, k] + k1 u_cd + k2 v_ch(d) + k3 T_c)  (one term per collective)
              + comm_const[d]

with x[i, d] the shards of item i on device d, y_d = 1 when device d holds any shard, and for collective c (the
item kinds present: table-wise for whole tables, column-wise for pieces) ``u_cd`` the pooled width of device d in
it, ``v_ch`` that of host h's devices and ``T_c`` its total. A collective with no width runs nothing (no start-up):
the exact models hold a Boolean per collective that may be absent.

Compute: ``a[t, d]`` is the *marginal* cost of table t on device d at P: for a table on d,
``compute(S_d) - compute(S_d - s_t)`` (what d saves when t leaves); for a table elsewhere,
``compute(S_d + s_t) - compute(S_d)`` (what d pays when t arrives). ``c0[d] = compute(S_d) - sum_{t on d} a[t, d]``,
so the linear cost is **exact at P** (every device, to float rounding). The constant is paid only by a device that
holds a table (y_d): every model costs an empty device's compute at 0 (no kernel is launched), so a plan that empties
a device gets the launch overhead and kernel floor that c0 carries back, as the full model does. This is the first-order expansion of the
device cost in the table-membership variables: for the sum-pooled neural model (a device state is the sum of its
tables' encodings e_t, then an MLP head h), ``h(S + e_t) - h(S) = grad h(S) . e_t + O(|e_t|^2)`` -- the head's
gradient at the device's pooled vector dotted with the table's encoding, which is the linearisation docs/exact-solvers.md describes
for; the finite difference keeps the exact one-table step instead of the tangent, so a table's own contribution is
exact when it is the only one to move. For the analytic model it is the marginal cost of the table given the
other tables' cache footprint, occupancy and launch on that device.

Comm: both shipped comm models make device d's part of one all-to-all a function of its own width u, its host's
width v and the collective's total T only (the analytic one is ``latency + max`` of four linear pieces in them: send
and receive over NVLink and over the network). In coordinates (u, v - u, T - v) -- own width, host peers' width,
other hosts' width, each free to move on its own -- the slopes are finite differences of ``bm.comm_totals`` on width
vectors that realise them. Two forms:

* ``comm="linear"`` -- one plane per device and collective, secants over a mean table dim, exact at P.
* ``comm="planes"`` (the default) -- the max of the tangent planes at P (exact there) and at points around P along
  each coordinate (by a quarter, 1, 2 and 4 mean table dims, up and down), each lowered where needed so that no
  plane exceeds the cost at P. Tangent planes of a convex function never exceed it, so their max is a lower envelope
  that is exact at P and at every sample point; for the analytic all-to-all it finds its pieces. In a MILP the max is
  one auxiliary variable per device and collective (``m_cd >= plane``).

Splitting a table moves its width from the table-wise collective to the column-wise one, which every device's
receive side feels (T); a plan that mixes whole tables and pieces pays both collectives' start-ups and both
imbalances, as the judge does. Either way the model is **exact at P**. Away from P it is an approximation (the terms
it drops are second order in the tables moved), which is why the exact solvers re-linearise around every new plan
and judge each plan with the full model; a bound proven for the linear model is a bound of the linear model only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.base import BoundCostModel
from costmodels.hierarchical import DIST_ROW
from shardopt.core.sharding_types import COLUMN_WISE, TABLE_WISE
from solvers.placement.split_items import Items, build_items

_CHUNK_ROWS = 1 << 18  # states per batched compute_costs call (memory: rows x state size doubles)
_COMM_ROWS = 1 << 21  # device entries (vectors x D) per batched comm_totals call
COMM_FORMS = ("planes", "linear")
PLANE_MULTIPLES = (1.0, 2.0, 4.0)  # sample points at these multiples of the mean table dim away from P
NUDGE = 0.25  # and a quarter of a mean dim away (the pieces active just beside P)
ITEM_DISTS = (TABLE_WISE, COLUMN_WISE)  # the output dist of an item: whole tables, column pieces


@dataclass(frozen=True)
class Linearization:
    """The linear cost model around the plan `point` (counts [I, D]: shards of item i on device d; see
    solvers.placement.split_items -- table-wise models have one item per table, the whole table).

    Device d's linearised cost for a plan x (counts, or for a table-wise plan one device per table, -1 = nowhere) is
    ``c0[d] [d holds a shard] + sum_i x[i, d] a[i, d] + comm_const[d]
    + sum_c [c runs] max(0, max_k k0[c, d, k] + k1[c, d, k] u_cd + k2[c, d, k] v_c,host(d) + k3[c, d, k] T_c)``
    over the collectives c = `dists` (K = 1 plane with ``comm="linear"``); u, v, T count the items' widths only
    (a fixed base's share is in k0). Collective c runs when `always[c]` or an item of kind c is placed.
    """

    point: np.ndarray  # [I, D] the expansion point
    a: np.ndarray  # [I, D] marginal fwd + bwd compute of one shard of item i on device d (ms)
    c0: np.ndarray  # [D] compute constant (ms)
    k0: np.ndarray  # [C, D, K] comm planes of each collective: constant (ms)
    k1: np.ndarray  # [C, D, K] per unit of own width in the collective (ms)
    k2: np.ndarray  # [C, D, K] per unit of the host's width in it (ms)
    k3: np.ndarray  # [C, D, K] per unit of its total width (ms)
    dims: np.ndarray  # [I] width of one shard of each item (the table dim for a whole table)
    host: np.ndarray  # [D] host index of each device
    compute: np.ndarray  # [D] full-model compute at the point (fwd + bwd, ms)
    comm: np.ndarray  # [D] full-model comm at the point (fwd + bwd, ms)
    items: Items  # the pieces the rows of `point` and `a` are (table-wise: one whole-table item per table)
    kind: np.ndarray  # [I] the collective (index into `dists`) of each item
    dists: tuple[str, ...]  # the collectives modelled (sharding types of ITEM_DISTS that some item has)
    always: np.ndarray  # [C] bool: the collective runs whatever the plan (a fixed base has width in it, or a table has only items of its kind)
    comm_const: np.ndarray  # [D] comm that no item changes: the base's other output dists, its replicas' sync (ms)
    comm_form: str = "planes"

    @property
    def num_tables(self) -> int:
        return self.items.num_tables

    @property
    def num_items(self) -> int:
        return self.a.shape[0]

    @property
    def num_devices(self) -> int:
        return self.a.shape[1]

    @property
    def num_collectives(self) -> int:
        return self.k0.shape[0]

    @property
    def num_planes(self) -> int:
        return self.k0.shape[2]

    @property
    def num_hosts(self) -> int:
        return int(self.host.max()) + 1 if len(self.host) else 0

    @property
    def total_width(self) -> float:
        """The pooled width of every plan: the sum of the table dims."""
        return float(self.dims[self.items.whole].sum())

    def counts(self, x: np.ndarray) -> np.ndarray:
        """[I, D] counts of a plan given as counts or as one device per table."""
        x = np.asarray(x, dtype=np.int64)
        return x if x.ndim == 2 else self.items.counts_from_device_of(x, self.num_devices)

    def collective_widths(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(u [C, D] own widths, v [C, D] each device's host width, T [C] totals, runs [C]) of the items of a plan,
        per collective."""
        counts = self.counts(x)
        c = counts.T.astype(np.float64)  # [D, I]
        C = self.num_collectives
        u = np.stack([c @ np.where(self.kind == k, self.dims, 0.0) for k in range(C)])
        v = np.stack([np.bincount(self.host, weights=u[k], minlength=self.num_hosts)[self.host] for k in range(C)])
        placed = counts.sum(axis=1) > 0
        runs = self.always | np.array([bool(placed[self.kind == k].any()) for k in range(C)])
        return u, v, u.sum(axis=1), runs

    def plane_values(self, c: int, d: np.ndarray, u: np.ndarray, v: np.ndarray, T: float) -> np.ndarray:
        """max(0, max_k plane_k) of collective c for devices d at widths u, v (broadcast together)."""
        vals = self.k0[c, d] + self.k1[c, d] * u[..., None] + self.k2[c, d] * v[..., None] + self.k3[c, d] * T
        return np.maximum(vals.max(axis=-1), 0.0)

    def compute_costs(self, x: np.ndarray) -> np.ndarray:
        """[D] linearised compute of each device."""
        c = self.counts(x)
        used = c.sum(axis=0) > 0
        return np.where(used, self.c0, 0.0) + (c * self.a).sum(axis=0)

    def collective_costs(self, x: np.ndarray) -> np.ndarray:
        """[C, D] linearised comm of each collective on each device (0 where it does not run)."""
        u, v, T, runs = self.collective_widths(x)
        devs = np.arange(self.num_devices)
        return np.stack([self.plane_values(k, devs, u[k], v[k], float(T[k])) if runs[k] else np.zeros(self.num_devices)
                         for k in range(self.num_collectives)])

    def comm_costs(self, x: np.ndarray) -> np.ndarray:
        """[D] linearised comm of each device: its collectives' and the constant."""
        return self.collective_costs(x).sum(axis=0) + self.comm_const

    def device_costs(self, x: np.ndarray) -> np.ndarray:
        """[D] linearised cost of each device under a plan."""
        return self.compute_costs(x) + self.comm_costs(x)

    def cost(self, x: np.ndarray) -> float:
        """The linear model's plan cost: max over devices."""
        return float(self.device_costs(x).max())


def _compute_totals(bm: BoundCostModel, states: np.ndarray, devices: np.ndarray) -> np.ndarray:
    """fwd + bwd compute of many states [n, F] on `devices` [n] -> [n], in chunks."""
    out = np.empty(len(states))
    for lo in range(0, len(states), _CHUNK_ROWS):
        out[lo : lo + _CHUNK_ROWS] = np.asarray(bm.compute_costs(states[lo : lo + _CHUNK_ROWS], devices[lo : lo + _CHUNK_ROWS])).sum(axis=-1)
    return out


def linearize_compute(bm: BoundCostModel, items: Items, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a [I, D], c0 [D], compute [D]) around the plan `counts`: marginal compute costs, exact at the point.

    a[i, d] is what one shard of item i adds to device d *without the rest of its table*: compute(B + s_i) -
    compute(B), B = d's state less every shard of i's table on d. For a table-wise plan that is what d saves when
    the table leaves (if it is on d) or pays when it arrives (if not)."""
    counts = np.asarray(counts, dtype=np.int64)
    states = items.states
    I, F = states.shape
    D = counts.shape[1]
    T = items.num_tables
    S = items.device_states(counts)  # [D, F] (with the base of a tiered layout's fixed shards)
    base = _compute_totals(bm, S, np.arange(D))  # [D]
    # own[t, d]: the state of table t's shards on d; without[t, d]: compute of d without them
    on_t = np.zeros((T, D), dtype=bool)
    for i in np.flatnonzero(counts.any(axis=1)):
        on_t[items.table[i]] |= counts[i] > 0
    pairs = np.argwhere(on_t)  # (table, device) where the table has shards at the point
    own = np.zeros((len(pairs), F))
    for j, (t, d) in enumerate(pairs):
        lo, hi = items.first[t], items.first[t + 1]
        own[j] = counts[lo:hi, d].astype(np.float64) @ states[lo:hi]
    without = np.repeat(base[None, :], T, axis=0)  # [T, D]
    if len(pairs):
        without[pairs[:, 0], pairs[:, 1]] = _compute_totals(bm, S[pairs[:, 1]] - own, pairs[:, 1])
    a = np.empty((I, D))
    per_chunk = max(1, _CHUNK_ROWS // max(D, 1))
    for lo in range(0, I, per_chunk):
        hi = min(I, lo + per_chunk)
        trial = S[None, :, :] + states[lo:hi, None, :]  # [n, D, F]
        for (t, d), o in zip(pairs, own):  # the items of table t, on device d: without t's shards there
            r0, r1 = max(int(items.first[t]), lo), min(int(items.first[t + 1]), hi)
            if r0 < r1:
                trial[r0 - lo : r1 - lo, d] -= o
        cost = _compute_totals(bm, trial.reshape(-1, F), np.tile(np.arange(D), hi - lo)).reshape(hi - lo, D)
        a[lo:hi] = cost - without[items.table[lo:hi]]
    c0 = base - (counts * a).sum(axis=0)
    return a, c0, base


def _realise(host: np.ndarray, per_host: int, who: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """Width vectors [n, D] in which device who[i] has own width coords[i, 0], its host peers coords[i, 1] between
    them and the other hosts' devices coords[i, 2] between them (evenly: every shipped comm model prices a device by
    its own, its host's and the total width only)."""
    n, D = len(who), len(host)
    same = host[None, :] == host[who][:, None]
    peer = coords[:, 1] / max(per_host - 1, 1)
    other = coords[:, 2] / max(D - per_host, 1)
    vec = np.where(same, peer[:, None], other[:, None])
    vec[np.arange(n), who] = coords[:, 0]
    return vec


def _comm_of(bm: BoundCostModel, host: np.ndarray, per_host: int, who: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """Device who[i]'s fwd + bwd all-to-all at the widths coords[i] = (own, host peers', other hosts'), [n] (chunked;
    non-finite -> nan)."""
    n, D = len(who), len(host)
    out = np.empty(n)
    per = max(1, _COMM_ROWS // max(D, 1))
    with np.errstate(all="ignore"):
        for lo in range(0, n, per):
            hi = min(n, lo + per)
            vec = _realise(host, per_host, who[lo:hi], coords[lo:hi])
            out[lo:hi] = np.asarray(bm.comm_totals(vec), dtype=np.float64)[np.arange(hi - lo), who[lo:hi]]
    out[~np.isfinite(out)] = np.nan
    return out


def _slope(f_plus: np.ndarray, f_minus: np.ndarray, f0: np.ndarray, h: float) -> np.ndarray:
    """Central differences where both sides exist (not nan), one-sided where one does, 0 where none does."""
    both = np.isfinite(f_plus) & np.isfinite(f_minus)
    out = np.where(both, (f_plus - f_minus) / (2 * h), 0.0)
    out = np.where(~both & np.isfinite(f_plus), (f_plus - f0) / h, out)
    return np.where(~both & ~np.isfinite(f_plus) & np.isfinite(f_minus), (f0 - f_minus) / h, out)


def linearize_collective(
    bm: BoundCostModel, widths: np.ndarray, form: str = "planes", multiples: tuple[float, ...] = PLANE_MULTIPLES
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(k0, k1, k2, k3 [D, K], comm [D]) of one all-to-all: comm_d ~ max_k (k0 + k1 u_d + k2 v_d + k3 T), exact at
    the per-device widths `widths` [D] (u: own width, v: the host's, T: the total; `comm` = bm.comm_totals there,
    the collective's start-up included even when every width is 0)."""
    if form not in COMM_FORMS:
        raise ValueError(f"comm form {form!r} is not one of {', '.join(COMM_FORMS)}")
    D = bm.num_devices
    L = bm.comm_group_size  # (the host; with topology levels, the innermost level)
    host = np.arange(D) // L
    H = int(host.max()) + 1
    g = np.asarray(widths, dtype=np.float64).copy()
    hostsum = np.bincount(host, weights=g, minlength=H)[host]
    total = float(g.sum())
    at = np.asarray(bm.comm_totals(g), dtype=np.float64)
    if D == 1:
        z = np.zeros((1, 1))
        return at[:, None].copy(), z, z.copy(), z.copy(), at
    delta = float(max(np.asarray(bm.table_dims, dtype=np.float64).mean(), 1.0))
    axes = [0] + ([1] if L > 1 else []) + ([2] if H > 1 else [])  # (own, host peers', other hosts') widths that can move
    if form == "linear":
        shifts = [0.0]
        h = delta  # a secant over a typical move
    else:
        shifts = [0.0] + [s * m * delta for m in (NUDGE, *multiples) for s in (1.0, -1.0)]
        h = max(1.0, 0.02 * delta)  # a tangent
    center = np.maximum(np.stack([g, hostsum - g, total - hostsum], axis=1), 0.0)  # [D, 3]
    who_l, pts_l = [np.arange(D)], [center]
    for ax in axes:
        for s in shifts[1:]:
            q = center.copy()
            q[:, ax] += s
            keep = q[:, ax] >= 0
            who_l.append(np.arange(D)[keep])
            pts_l.append(q[keep])
    who = np.concatenate(who_l)
    pts = np.concatenate(pts_l)  # [P, 3]
    P = len(who)
    # evaluations: each point, then +- h along each axis that can move (minus only where it stays >= 0)
    evals = [pts]
    for ax in axes:
        for sgn in (1.0, -1.0):
            q = pts.copy()
            q[:, ax] += sgn * h
            evals.append(q)
    flat = np.concatenate(evals)
    ok = (flat >= 0).all(axis=1)
    vals = np.full(len(flat), np.nan)
    vals[ok] = _comm_of(bm, host, L, np.tile(who, len(evals))[ok], flat[ok])
    vals = vals.reshape(len(evals), P)
    f0 = vals[0]
    grad = np.zeros((P, 3))
    for j, ax in enumerate(axes):
        grad[:, ax] = _slope(vals[1 + 2 * j], vals[2 + 2 * j], f0, h)
    # in (u, v, T): own a = u, host peers b = v - u, other hosts c = T - v
    k1, k2, k3 = grad[:, 0] - grad[:, 1], grad[:, 1] - grad[:, 2], grad[:, 2]
    u, v, T = pts[:, 0], pts[:, 0] + pts[:, 1], pts.sum(axis=1)
    const = f0 - k1 * u - k2 * v - k3 * T
    good = np.isfinite(const)
    planes: list[list[tuple[float, float, float, float]]] = [[] for _ in range(D)]
    for i in np.flatnonzero(good):
        planes[int(who[i])].append((float(const[i]), float(k1[i]), float(k2[i]), float(k3[i])))
    K = 1
    rows: list[list[tuple[float, float, float, float]]] = []
    for d in range(D):
        u0, v0 = g[d], hostsum[d]
        ps = planes[d] if planes[d] and good[d] else [(at[d], 0.0, 0.0, 0.0)] + planes[d]
        c_, s1, s2, s3 = ps[0]  # the plane at P: exact there (its slopes stay)
        ps[0] = (at[d] - s1 * u0 - s2 * v0 - s3 * total, s1, s2, s3)
        seen: dict[tuple[float, float, float], tuple[float, float, float, float]] = {}
        for c_, s1, s2, s3 in ps:  # no plane above the cost at P (lower its constant); then drop duplicates
            c_ = min(c_, at[d] - s1 * u0 - s2 * v0 - s3 * total)
            key = (round(s1, 12), round(s2, 12), round(s3, 12))
            if key not in seen or c_ > seen[key][0]:
                seen[key] = (c_, s1, s2, s3)
        rows.append(list(seen.values()))
        K = max(K, len(rows[-1]))
    out = np.empty((4, D, K))
    for d, r in enumerate(rows):
        r = r + [r[0]] * (K - len(r))  # pad with a repeat (a repeated plane changes nothing)
        out[:, d, :] = np.array(r).T
    return out[0], out[1], out[2], out[3], at


def linearize(bm: BoundCostModel, point: np.ndarray, comm: str = "planes", items: Items | None = None) -> Linearization:
    """The linear cost model of `bm` around a plan: one device per table (-1 = none; table-wise), or counts [I, D]
    over `items` (solvers.placement.split_items; None = whole tables only)."""
    T = len(bm.instance.tables)
    D = bm.num_devices
    point = np.asarray(point, dtype=np.int64)
    if point.ndim == 1:
        if point.shape != (T,):
            raise ValueError(f"device_of has shape {point.shape}, expected ({T},)")
        if ((point < -1) | (point >= D)).any():
            raise ValueError("device_of holds a device index out of range")
    it = items if items is not None else build_items(bm.instance, bm)
    counts = it.counts_from_device_of(point, D) if point.ndim == 1 else point.copy()
    if counts.shape != (it.num_items, D) or (counts < 0).any():
        raise ValueError(f"counts has shape {counts.shape}, expected ({it.num_items}, {D}) with no negative entry")
    if comm not in COMM_FORMS:
        raise ValueError(f"comm form {comm!r} is not one of {', '.join(COMM_FORMS)}")
    a, c0, compute = linearize_compute(bm, it, counts)
    host = np.arange(D) // bm.comm_group_size
    H = int(host.max()) + 1
    # the collectives the items run: whole tables table-wise, pieces (and whole tables marked so) column-wise (one
    # all-to-all each, as the judge)
    kind_all = np.where(it.is_table_wise, 0, 1)
    present = sorted(set(kind_all.tolist()))
    dists = tuple(ITEM_DISTS[k] for k in present)
    kind = np.searchsorted(np.array(present), kind_all)
    rows = [DIST_ROW[name] for name in dists]
    widths = it.device_dists(counts)  # [G, D], the base included
    base = np.zeros_like(widths)
    if it.base_dists is not None:
        base += it.base_dists
    elif it.base_widths is not None:
        base[DIST_ROW[TABLE_WISE]] += it.base_widths
    others = base.copy()
    others[rows] = 0.0  # the base's other output dists (row-wise, ...): collectives no item changes
    placed_tables = np.zeros(T, dtype=bool)
    placed_tables[it.table[counts.sum(axis=1) > 0]] = True
    # a partial plan: its unplaced width spread evenly over the table-wise collective (every plan has the same total)
    spread = np.asarray(bm.table_dims, dtype=np.float64)[~placed_tables].sum() / D
    only = np.ones((len(present), T), dtype=bool)  # table t has only items of collective c
    for c in range(len(present)):
        only[c] = np.logical_and.reduceat(kind == c, it.first[:-1])
    planes, always, comm_at = [], np.zeros(len(present), dtype=bool), np.zeros(D)
    for c, r in enumerate(rows):
        share = base[r] + (spread if c == 0 else 0.0)  # what no item moves: into the constant
        k0c, k1c, k2c, k3c, at = linearize_collective(bm, widths[r] + (spread if c == 0 else 0.0), comm)
        v_b = np.bincount(host, weights=share, minlength=H)[host]
        k0c = k0c + k1c * share[:, None] + k2c * v_b[:, None] + k3c * float(share.sum())
        always[c] = bool(share.sum() > 0) or bool(only[c].any())
        if always[c] or counts[kind == c].any():
            comm_at += at
        planes.append((k0c, k1c, k2c, k3c))
    K = max(p[0].shape[1] for p in planes)
    k0, k1, k2, k3 = (np.stack([np.concatenate([p[j], np.repeat(p[j][:, :1], K - p[j].shape[1], axis=1)], axis=1) for p in planes])
                      for j in range(4))  # (pad with a repeat of the first plane)
    comm_const = it.device_extra(D) + (bm.dist_comm_totals(others) if others.any() else 0.0)
    if it.base_states is not None:
        # a device the fixed shards occupy runs their kernel whether or not it gets an item: its constant c0 (their
        # compute, when it holds no item) is paid always, not only when it is "used" (c0 y_d in the exact models)
        busy = np.abs(it.base_states).sum(axis=1) > 0
        comm_const = comm_const + np.where(busy, c0, 0.0)
        c0 = np.where(busy, 0.0, c0)
    comm_const = np.asarray(comm_const, dtype=np.float64) * np.ones(D)
    return Linearization(counts, a, c0, k0, k1, k2, k3, it.width.astype(np.float64), host, compute, comm_at + comm_const, it,
                         kind.astype(np.int64), dists, always, comm_const, comm)


__all__ = ["COMM_FORMS", "ITEM_DISTS", "Linearization", "linearize", "linearize_collective", "linearize_compute"]
