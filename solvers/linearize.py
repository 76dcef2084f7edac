"""First-order linearisation of a cost model around a table-wise plan: what the exact solvers (CP-SAT, MILP) solve.

A device's cost in every shardopt cost model is ``compute(S_d) + comm_d(dims)``: ``S_d`` is the sum of the
additive states of the tables on device d (BoundCostModel.table_states) and ``compute`` is nonlinear in it (the
analytic model's shared cache, occupancy and launch floors; the neural model's MLP head); ``comm_d`` is a function
of every device's pooled width (sum of its tables' dims). A MILP can only hold linear terms, so around a plan P
(one device per table) each device's cost is replaced by

    cost_d(x) ~ c0[d] y_d + sum_t a[t, d] x[t, d]                  (compute)
              + k0[d] + k1[d] dimsum_d(x) + k2[d] hostsum_h(d)(x)  (comm)

with x[t, d] = 1 when table t is on device d, y_d = 1 when device d holds any table, ``dimsum_d`` the pooled width of device d and ``hostsum_h`` that of
the devices of host h.

Compute: ``a[t, d]`` is the *marginal* cost of table t on device d at P: for a table on d,
``compute(S_d) - compute(S_d - s_t)`` (what d saves when t leaves); for a table elsewhere,
``compute(S_d + s_t) - compute(S_d)`` (what d pays when t arrives). ``c0[d] = compute(S_d) - sum_{t on d} a[t, d]``,
so the linear cost is **exact at P** (every device, to float rounding). The constant is paid only by a device that
holds a table (y_d): every model costs an empty device's compute at 0 (no kernel is launched), so a plan that empties
a device gets the launch overhead and kernel floor that c0 carries back, as the full model does. This is the first-order expansion of the
device cost in the table-membership variables: for the sum-pooled neural model (a device state is the sum of its
tables' encodings e_t, then an MLP head h), ``h(S + e_t) - h(S) = grad h(S) . e_t + O(|e_t|^2)`` -- the head's
gradient at the device's pooled vector dotted with the table's encoding, which is the linearisation DESIGN.md asks
for; the finite difference keeps the exact one-table step instead of the tangent, so a table's own contribution is
exact when it is the only one to move. For the analytic model it is the marginal cost of the table given the
other tables' cache footprint, occupancy and launch on that device.

Comm: a table-wise plan keeps the total pooled width fixed, and both shipped comm models make device d's all-to-all
a function of (its own width u = ``dimsum_d``, its host's width v = ``hostsum_h(d)``, the total) only. Two forms:

* ``comm="linear"`` -- the single plane ``k0 + k1 u + k2 v``: ``k1`` (own width up, host width fixed: width moved
  from a host peer to d) and ``k2`` (host width up, own width fixed: width moved from another host to a host peer)
  are central finite differences of ``bm.comm_totals`` with a step of the mean table dim (one-sided where a step
  would make a width negative); k2 is 0 where the host width is tied to the own width (d alone on its host) or to
  the total (one host). ``k0`` makes it exact at P.
* ``comm="planes"`` (the default) -- the max of several such planes: the tangent plane at P (exact there) and the
  tangent planes at points around P along the moves a table can make (own width +-, host width +-, both +-; by a
  little and by 1, 2, 4 mean table dims), each lowered where needed so that no plane exceeds the cost at P. The
  analytic all-to-all *is* a max of linear pieces in (u, v) (send vs receive, NVLink vs network), which one plane
  cuts off at the first kink (a device that receives more than it sends has slope 0 in its own width -- until it
  sends more); tangent planes of a convex function never exceed it, so their max is a lower envelope that is exact
  at P and at every sample point. In a MILP the max is one auxiliary variable per device (``m_d >= plane``).

Either way the model is **exact at P**. Away from P it is an approximation (the terms it drops are second order in
the tables moved), which is why the exact solvers re-linearise around every new plan and judge each plan with the
full model; a bound proven for the linear model is a bound of the linear model only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodels.base import BoundCostModel
from costmodels.hierarchical import DIST_ROW
from shardopt.core.sharding_types import COLUMN_WISE, TABLE_WISE
from solvers.split_items import Items, build_items

_CHUNK_ROWS = 1 << 18  # states per batched compute_costs call (memory: rows x state size doubles)
_COMM_ROWS = 1 << 21  # device entries (vectors x D) per batched comm_totals call
COMM_FORMS = ("planes", "linear")
PLANE_MULTIPLES = (1.0, 2.0, 4.0)  # sample points at these multiples of the mean table dim away from P
NUDGE = 0.25  # and a quarter of a mean dim away (the pieces active just beside P)
DIRECT_ROWS = [DIST_ROW[TABLE_WISE], DIST_ROW[COLUMN_WISE]]  # the output dists of the items (whole tables, pieces)


@dataclass(frozen=True)
class Linearization:
    """The linear cost model around the plan `point` (counts [I, D]: shards of item i on device d; see
    solvers.split_items -- table-wise models have one item per table, the whole table).

    Device d's linearised cost for a plan x (counts, or for a table-wise plan one device per table, -1 = nowhere) is
    ``c0[d] [d holds a shard] + sum_i x[i, d] a[i, d] + max_k (k0[d, k] + k1[d, k] * dimsum_d + k2[d, k] * hostsum of d's host)``
    (K = 1 plane with ``comm="linear"``).
    """

    point: np.ndarray  # [I, D] the expansion point
    a: np.ndarray  # [I, D] marginal fwd + bwd compute of one shard of item i on device d (ms)
    c0: np.ndarray  # [D] compute constant (ms)
    k0: np.ndarray  # [D, K] comm planes: constant (ms)
    k1: np.ndarray  # [D, K] per unit of own pooled width (ms)
    k2: np.ndarray  # [D, K] per unit of the host's pooled width (ms)
    dims: np.ndarray  # [I] width of one shard of each item (the table dim for a whole table)
    host: np.ndarray  # [D] host index of each device
    compute: np.ndarray  # [D] full-model compute at the point (fwd + bwd, ms)
    comm: np.ndarray  # [D] full-model comm at the point (fwd + bwd, ms)
    items: Items  # the pieces the rows of `point` and `a` are (table-wise: one whole-table item per table)
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
    def num_planes(self) -> int:
        return self.k0.shape[1]

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

    def widths(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dimsum [D], hostsum of each device's host [D]) of a plan."""
        dimsum = self.counts(x).T.astype(np.float64) @ self.dims
        return dimsum, np.bincount(self.host, weights=dimsum, minlength=self.num_hosts)[self.host]

    def compute_costs(self, x: np.ndarray) -> np.ndarray:
        """[D] linearised compute of each device."""
        c = self.counts(x)
        used = c.sum(axis=0) > 0
        return np.where(used, self.c0, 0.0) + (c * self.a).sum(axis=0)

    def comm_costs(self, x: np.ndarray) -> np.ndarray:
        """[D] linearised comm of each device (max over its planes)."""
        dimsum, hostsum = self.widths(x)
        return (self.k0 + self.k1 * dimsum[:, None] + self.k2 * hostsum[:, None]).max(axis=1)

    def device_costs(self, x: np.ndarray) -> np.ndarray:
        """[D] linearised cost of each device under a plan."""
        return self.compute_costs(x) + self.comm_costs(x)

    def cost(self, x: np.ndarray) -> float:
        """The linear model's plan cost: max over devices."""
        return float(self.device_costs(x).max())


def _compute_totals(bm: BoundCostModel, states: np.ndarray) -> np.ndarray:
    """fwd + bwd compute of many states [n, F] -> [n], in chunks."""
    out = np.empty(len(states))
    for lo in range(0, len(states), _CHUNK_ROWS):
        out[lo : lo + _CHUNK_ROWS] = np.asarray(bm.compute_costs(states[lo : lo + _CHUNK_ROWS])).sum(axis=-1)
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
    base = _compute_totals(bm, S)  # [D]
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
        without[pairs[:, 0], pairs[:, 1]] = _compute_totals(bm, S[pairs[:, 1]] - own)
    a = np.empty((I, D))
    per_chunk = max(1, _CHUNK_ROWS // max(D, 1))
    for lo in range(0, I, per_chunk):
        hi = min(I, lo + per_chunk)
        trial = S[None, :, :] + states[lo:hi, None, :]  # [n, D, F]
        for (t, d), o in zip(pairs, own):  # the items of table t, on device d: without t's shards there
            r0, r1 = max(int(items.first[t]), lo), min(int(items.first[t + 1]), hi)
            if r0 < r1:
                trial[r0 - lo : r1 - lo, d] -= o
        cost = _compute_totals(bm, trial.reshape(-1, F)).reshape(hi - lo, D)
        a[lo:hi] = cost - without[items.table[lo:hi]]
    c0 = base - (counts * a).sum(axis=0)
    return a, c0, base


def _comm_at(bm: BoundCostModel, vectors: np.ndarray, who: np.ndarray) -> np.ndarray:
    """comm_totals(vectors[i])[who[i]] for many width vectors [n, D] -> [n] (chunked; non-finite -> nan)."""
    n, D = vectors.shape
    out = np.empty(n)
    per = max(1, _COMM_ROWS // max(D, 1))
    with np.errstate(all="ignore"):
        for lo in range(0, n, per):
            hi = min(n, lo + per)
            out[lo:hi] = np.asarray(bm.comm_totals(vectors[lo:hi]), dtype=np.float64)[np.arange(hi - lo), who[lo:hi]]
    out[~np.isfinite(out)] = np.nan
    return out


class _Moves:
    """The width moves that change one device's (own width u, host width v) along one axis, as
    (gain, give) device pairs: `own` (u up, v fixed: from a host peer), `host` (v up, u fixed: from another host
    onto a host peer), `both` (u and v up: from another host onto d). None where the topology has no such move."""

    def __init__(self, g: np.ndarray, host: np.ndarray, d: int):
        D = len(g)
        H = int(host.max()) + 1
        peers = np.flatnonzero((host == host[d]) & (np.arange(D) != d))
        # width from another host comes from the next host: every move then stays within hosts h and h + 1, which
        # lets `_comm_batched` evaluate the moves of many devices in one width vector
        others = np.flatnonzero(host == (host[d] + 1) % H) if H > 1 else np.arange(0)
        peer = int(peers[np.argmax(g[peers])]) if len(peers) else None  # the widest: it can give the most
        other = int(others[np.argmax(g[others])]) if len(others) else None
        self.own = (d, peer) if peer is not None else None
        self.host = (peer, other) if peer is not None and other is not None else None
        self.both = (d, other) if other is not None else None
        self.alone = peer is None  # u == v always: one axis (`both`), slope on u, none on v


def _comm_batched(bm: BoundCostModel, g: np.ndarray, rows: np.ndarray, who: np.ndarray, host: np.ndarray) -> np.ndarray:
    """comm_totals(rows[i])[who[i]] for width vectors that differ from g only on who's host and the next one.

    Every shardopt comm model makes a device's all-to-all a function of its own width, its host's width and the
    total (all constant here: the moves keep the total). So the changes of rows whose devices sit on hosts h with
    the same parity (pairs {h, h + 1} disjoint) can share one width vector: far fewer model calls on many hosts.
    A row whose change reaches further is evaluated on its own."""
    H = int(host.max()) + 1
    n, D = rows.shape
    if H < 3:
        return _comm_at(bm, rows, who)
    delta = rows - g[None, :]
    h = host[who]
    touched = np.abs(delta) > 0
    reach_ok = ~(touched & ~((host[None, :] == h[:, None]) | (host[None, :] == ((h + 1) % H)[:, None]))).any(axis=1)
    cls = np.where(h == H - 1, 2, h % 2) if H % 2 else h % 2  # (odd H: the last host pairs with host 0)
    slot = np.zeros(n, dtype=np.int64)
    seen: dict[int, int] = {}
    for i in range(n):  # the j-th row of each host goes into vector (class, j)
        seen[int(h[i])] = seen.get(int(h[i]), -1) + 1
        slot[i] = seen[int(h[i])]
    key = cls * (slot.max() + 1) + slot
    out = np.empty(n)
    ok = np.flatnonzero(reach_ok)
    if len(ok):
        keys, inv = np.unique(key[ok], return_inverse=True)
        combined = np.repeat(g[None, :], len(keys), axis=0)
        np.add.at(combined, inv, delta[ok])
        per = max(1, _COMM_ROWS // max(D, 1))
        with np.errstate(all="ignore"):
            full = np.concatenate([np.asarray(bm.comm_totals(combined[lo : lo + per]), dtype=np.float64) for lo in range(0, len(combined), per)])
        out[ok] = full[inv, who[ok]]
    rest = np.flatnonzero(~reach_ok)
    if len(rest):
        out[rest] = _comm_at(bm, rows[rest], who[rest])
    out[~np.isfinite(out)] = np.nan
    return out


def _step(g: np.ndarray, move: tuple[int, int], by: float) -> np.ndarray:
    v = g.copy()
    v[move[0]] += by
    v[move[1]] -= by
    return v


def _slope(f_plus: float, f_minus: float, f0: float, h: float, ok_plus: bool, ok_minus: bool) -> float:
    if ok_plus and ok_minus and np.isfinite(f_plus) and np.isfinite(f_minus):
        return (f_plus - f_minus) / (2 * h)
    if ok_plus and np.isfinite(f_plus):
        return (f_plus - f0) / h
    if ok_minus and np.isfinite(f_minus):
        return (f0 - f_minus) / h
    return 0.0


def linearize_comm(
    bm: BoundCostModel, widths: np.ndarray, form: str = "planes", multiples: tuple[float, ...] = PLANE_MULTIPLES
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(k0, k1, k2 [D, K], comm [D]): comm_d ~ max_k (k0 + k1 dimsum_d + k2 hostsum_d), exact at the per-device
    pooled widths `widths` [D] (the caller spreads a partial plan's unplaced width: every complete plan has the
    same total width)."""
    if form not in COMM_FORMS:
        raise ValueError(f"comm form {form!r} is not one of {', '.join(COMM_FORMS)}")
    dims_t = np.asarray(bm.table_dims, dtype=np.float64)
    D = bm.num_devices
    host = np.arange(D) // bm.instance.topology.devices_per_host
    g = np.asarray(widths, dtype=np.float64).copy()
    total = float(g.sum())
    hostsum = np.bincount(host, weights=g)[host]
    base = np.asarray(bm.comm_totals(g), dtype=np.float64)
    if D == 1:
        return base[:, None].copy(), np.zeros((1, 1)), np.zeros((1, 1)), base
    delta = float(max(dims_t.mean(), 1.0))

    # sample points: (device, width vector); per point the tangent slopes need f at q and q +- h along the axes
    if form == "linear":
        shifts = [0.0]
        h = delta  # a secant over a typical move
    else:
        shifts = [0.0] + [s * m * delta for m in (NUDGE, *multiples) for s in (1.0, -1.0)]
        h = max(1.0, 0.02 * delta)  # a tangent
    moves = [_Moves(g, host, d) for d in range(D)]
    points: list[tuple[int, np.ndarray]] = []
    for d, mv in enumerate(moves):
        axes = [mv.both] if mv.alone else [m for m in (mv.own, mv.host, mv.both) if m is not None]
        for ax_i, ax in enumerate(axes):
            for s in shifts:
                if s == 0.0 and ax_i > 0:
                    continue  # P itself once
                q = _step(g, ax, s) if s else g
                u, v = q[d], float(q[host == host[d]].sum())
                if u < 0 or v < u - 1e-9 or v > total + 1e-9:
                    continue  # outside what any plan can reach
                points.append((d, q))
    # evaluations: q, then q +- h along u (own / both) and along v (host)
    rows: list[np.ndarray] = []
    who: list[int] = []
    layout: list[tuple[int, int, int, int, int, float, float]] = []  # per point: index of f(q), u+, u-, v+, v- (-1: none), u_q, v_q
    for d, q in points:
        mv = moves[d]
        u_ax = mv.both if mv.alone else mv.own
        v_ax = None if mv.alone else mv.host
        idx = [len(rows)]
        rows.append(q)
        who.append(d)
        for ax in (u_ax, v_ax):
            for sgn in (1.0, -1.0):
                if ax is None:
                    idx.append(-1)
                    continue
                r = _step(q, ax, sgn * h)
                idx.append(len(rows))
                rows.append(r)
                who.append(d)
        layout.append((*idx, q[d], float(q[host == host[d]].sum())))  # type: ignore[arg-type]
    vals = _comm_batched(bm, g, np.stack(rows), np.array(who), host) if rows else np.empty(0)

    planes: list[list[tuple[float, float, float]]] = [[] for _ in range(D)]
    for (d, q), (i0, iup, ium, ivp, ivm, uq, vq) in zip(points, layout):
        f0 = vals[i0]
        if not np.isfinite(f0):
            continue
        mv = moves[d]
        u_ax = mv.both if mv.alone else mv.own
        ok = lambda i: i >= 0
        # one-sided where the step leaves the reachable region (own width below 0, host width below own)
        su = _slope(vals[iup] if iup >= 0 else np.nan, vals[ium] if ium >= 0 else np.nan, f0, h, ok(iup), ok(ium) and uq - h >= 0) if u_ax else 0.0
        sv = _slope(vals[ivp] if ivp >= 0 else np.nan, vals[ivm] if ivm >= 0 else np.nan, f0, h, ok(ivp) and vq + h <= total + 1e-9, ok(ivm) and vq - h >= uq) if ivp >= 0 or ivm >= 0 else 0.0
        planes[d].append((f0 - su * uq - sv * vq, su, sv))
    K = max(1, max(len(p) for p in planes))
    k0 = np.empty((D, K))
    k1 = np.empty((D, K))
    k2 = np.empty((D, K))
    for d in range(D):
        u0, v0 = g[d], hostsum[d]
        ps = planes[d] or [(base[d], 0.0, 0.0)]
        first = ps[0]  # the plane at P: make it exact there (its slopes stay)
        ps[0] = (base[d] - first[1] * u0 - first[2] * v0, first[1], first[2])
        # no plane above the cost at P: lower the others' constants where needed; then drop duplicates
        seen: dict[tuple[float, float], tuple[float, float, float]] = {}
        for c, su, sv in ps:
            key = (round(su, 12), round(sv, 12))
            if key not in seen or c > seen[key][0]:
                seen[key] = (c, su, sv)
        uniq = [(min(c, base[d] - su * u0 - sv * v0), su, sv) for c, su, sv in seen.values()]
        uniq += [uniq[0]] * (K - len(uniq))  # pad with a repeat (a repeated plane changes nothing)
        k0[d], k1[d], k2[d] = (np.array(col) for col in zip(*uniq))
    return k0, k1, k2, base


def linearize(bm: BoundCostModel, point: np.ndarray, comm: str = "planes", items: Items | None = None) -> Linearization:
    """The linear cost model of `bm` around a plan: one device per table (-1 = none; table-wise), or counts [I, D]
    over `items` (solvers.split_items; None = whole tables only)."""
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
    a, c0, compute = linearize_compute(bm, it, counts)
    # the planes price ONE all-to-all of the items' widths and the base's table- and column-wise widths; the base's
    # other output dists (a tiered layout's row-wise tables, ...) run collectives of their own, constant here
    dists = it.device_dists(counts)  # [G, D]
    direct = np.zeros_like(dists)
    direct[DIRECT_ROWS] = dists[DIRECT_ROWS]
    others = dists - direct
    g = direct.sum(axis=0)
    placed_tables = np.zeros(T, dtype=bool)
    placed_tables[it.table[counts.sum(axis=1) > 0]] = True
    partial = not placed_tables.all()
    if partial:  # a partial plan: spread the unplaced width evenly (every plan has the same total)
        g = g + np.asarray(bm.table_dims, dtype=np.float64)[~placed_tables].sum() / D
    k0, k1, k2, comm_base = linearize_comm(bm, g, comm)
    host = np.arange(D) // bm.instance.topology.devices_per_host
    # the judge runs one all-to-all per sharding type (whole tables and pieces apart: docs/analytic-model.md); what
    # that costs at the point beyond one all-to-all of the summed widths (start-ups, per-type imbalance) is a
    # constant of the planes, so the model stays exact at the point (first order away from it, as the rest)
    if not partial and (direct.sum(axis=1) > 0).sum() > 1:
        gap = bm.dist_comm_totals(direct) - comm_base
        k0 = k0 + gap[:, None]
        comm_base = comm_base + gap
    base_direct = direct.sum(axis=0) - (counts.T.astype(np.float64) @ it.width)  # the base's share of g
    if it.base_widths is not None or it.base_extra is not None or others.any():
        # the planes are in each device's whole width (the base's too); the linear model counts the items' width
        # only, so the base's share moves into the constant (and the replicas' sync and the base's own
        # collectives with it)
        u = base_direct
        v = np.bincount(host, weights=u, minlength=int(host.max()) + 1)[host]
        extra = it.device_extra(D) + (bm.dist_comm_totals(others) if others.any() else 0.0)
        k0 = k0 + k1 * u[:, None] + k2 * v[:, None] + extra[:, None]
        comm_base = comm_base + extra
    if it.base_states is not None:
        # a device the fixed shards occupy runs their kernel whether or not it gets an item: its constant c0 (their
        # compute, when it holds no item) is paid always, not only when it is "used" (c0 y_d in the exact models),
        # so it moves into the planes' constant
        busy = np.abs(it.base_states).sum(axis=1) > 0
        if busy.any():
            k0 = k0 + np.where(busy, c0, 0.0)[:, None]
            c0 = np.where(busy, 0.0, c0)
    return Linearization(counts, a, c0, k0, k1, k2, it.width.astype(np.float64), host, compute, comm_base, it, comm)


__all__ = ["COMM_FORMS", "Linearization", "linearize", "linearize_comm", "linearize_compute"]
