"""The per-kind LP: a bound of a job that mixes hardware kinds with every device priced on its own kind's profile,
for its plans in HBM: table-wise and column-wise shards, data-parallel replicas and row splits.

The envelope bound (`context.mixed_envelope`) prices every device as fast as the fastest kind, which lets the slow
kind's devices work at the fast kind's speed: sound, and 38-59 % below the best plans found on `mixed-test`. This LP
keeps each device's own kind. It is the symmetric LP (`symmetric.build_symmetric_lp`) with one copy of the device
variables per *class* of interchangeable devices (same kind, same HBM, same host memory) instead of one for all.

Why it is a bound (docs/analytic-bound.md, "Mixed hardware kinds"): take any covered plan and the per-device
relaxation of it - for device d the rows of `milp.build_relaxation` with the coefficients of d's own kind (each
row is proven for one kind's analytic formulas, and a device's compute in a mixed job is its kind's formula of the
same state: `BoundAnalytic.compute_costs`), its all-to-all pieces with d's own links and the slowest kind's
start-up (`BoundAnalytic.comm_time`), the replicas' all-reduce of the mixed model itself. Average every device
variable over the devices of its class: rows that hold for each device of a class with the same coefficients hold
for their average, sums over devices become sums over classes weighted by their device counts, and z, at least
every device's total, is at least each class's average. The plan's cost is z at that point, so the LP's optimum is
at most the cost of every covered plan. The comm pieces need a device's group width (the all-to-all's local group)
to be the group size times the class's average width: so every local group (a host, or an NVLink domain of hosts
with topology levels) must hold devices of one class (`device_classes` refuses a topology where one does not), as
every host of the `mixed` family does. Levels beyond two roles come pooled (`CommTerms.pooled`), as in the bound's
own LPs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodels.analytic import AnalyticCostModel, envelope_profile
from costmodels.base import CostModel
from shardopt.core.hardware import HardwareProfile, get_profile
from shardopt.core.ir import DIM_ALIGNMENT, Instance
from solvers.bound.context import AnalyticRelaxation
from solvers.bound.coverage import host_tables, host_tier_reason
from solvers.bound.inequalities import scale_at
from solvers.bound.milp import MEMORY_SLACK, pair_fits
from solvers.bound.symmetric import pair_rows
from solvers.bound.table_cuts import table_cut_lines
from solvers.milp import SparseModel, solve_milp
from solvers.status import SolveStatus


@dataclass(frozen=True)
class DeviceClass:
    """Devices that are interchangeable in the per-kind LP: one hardware kind, one HBM, one host-memory share."""

    kind: str
    devices: list[int]
    capacity: int
    host_capacity: int


def device_classes(instance: Instance, one_kind: bool = False) -> list[DeviceClass] | str:
    """The classes of `instance`'s devices, or why the per-kind LP does not hold for its topology (a string). With
    `one_kind`, also of a job of one kind (classes of HBM and host memory: the class LP, where the devices' memories
    differ)."""
    topo = instance.topology
    if not topo.is_mixed and not one_kind:
        return "the job has one hardware kind (the bound's own LP prices it exactly)"
    if topo.graph is not None:
        return "the topology gives its network as a graph (the per-kind LP takes topology levels: each device's own links)"
    if instance.constraint_kinds():
        return "placement constraints make devices of one kind differ"
    caps, hosts = topo.capacities(), topo.host_capacities()
    key = [(topo.hardware_of(d), caps[d], hosts[d]) for d in range(topo.num_devices)]
    group = topo.intra_group_size  # the host, or an NVLink domain of hosts (the all-to-all's local group where it has one)
    where = "host" if group == topo.devices_per_host else f"NVLink group (of {group} devices)"
    for start in range(0, topo.num_devices, group):
        if len(set(key[start : start + group])) > 1:
            return (f"{where} {start // group} holds devices of more than one class (kind, HBM, host memory): the all-to-all's "
                    "local group must be of one class")
    classes: dict[tuple[str, int, int], list[int]] = {}
    for d, k in enumerate(key):
        classes.setdefault(k, []).append(d)
    return [DeviceClass(k[0], ds, k[1], k[2]) for k, ds in classes.items()]


def build_kinds_lp(ctx: AnalyticRelaxation, classes: list[DeviceClass], table_wise: bool = False, replicas: bool = True,
                   row_splits: bool = True, host_memory: bool = False,
                   profiles: dict[str, HardwareProfile] | None = None) -> tuple[SparseModel, int]:
    """The per-kind LP (module docstring) of `ctx`'s instance: `ctx` is the relaxation of the mixed model (each device
    its own kind's profile: its links, the slowest kind's start-ups, the row splits' and replicas' collectives at the
    slowest links), the compute rows of a class come from a relaxation of the same instance on its kind's profile
    alone. Returns (model, index of z).

    Row splits (not `table_wise`; where `ctx` allows them) are `milp._add_row_variables` averaged per class: g_t the
    share split over devices (the direct collective), tw_tc the average over the class's hosts of t's split within a
    host (the hierarchical collectives), and per class a device's average row share rho_tc, blocks xr_tc and second
    blocks qr_tc. With `host_memory` (every kind's relaxation covers it: `AnalyticRelaxation.host_memory`), hu_tc of
    a class's n_tc and hr_tc of its rho_tc in its host memory (`build_symmetric_lp`'s rows, per class), charged their
    HBM cost as there. `profiles`: each kind's profile (default: the shipped one of its name; a job of one kind priced
    on another profile, e.g. a calibrated one, passes it)."""
    bm = ctx.bm
    inst = bm.instance
    profiles = profiles or {k: get_profile(k) for k in dict.fromkeys(c.kind for c in classes)}
    env = _envelope_context(inst, list(profiles.values()))  # the table cuts: no slower than any kind, so they hold anywhere
    per_kind = {k: AnalyticRelaxation(inst, AnalyticCostModel(p), replicas=replicas, host_memory=host_memory, row_splits=row_splits)
                for k, p in profiles.items()}
    m = SparseModel()
    z = m.var(-math.inf, math.inf)
    T = len(ctx.terms.dims)
    rep = ctx.replicas
    with_replicas = replicas and not table_wise
    splits = row_splits and not table_wise
    r = {ti: m.var(1.0 if rep.forced[ti] else 0.0, 1.0) for ti in range(T) if with_replicas and ctx.replicable[ti]}
    g = {ti: m.var(0, 1) for ti in range(T) if splits and ctx.row_split[ti]}
    by_host = [ti for ti in range(T) if splits and ctx.host_row_split[ti]]
    L = inst.topology.intra_group_size  # (a group: the host, or an NVLink domain of hosts)
    hosts_of = {c.devices[0]: len(c.devices) // L for c in classes}  # H_c: hosts of each class (by its first device)
    tw = {(ti, c.devices[0]): m.var(0, 1) for ti in by_host for c in classes}  # tw_tc
    split = sorted(set(g) | set(by_host))
    # the share of t that is replicated or split by rows, as (variable, weight): r_t + g_t + sum_c H_c tw_tc
    others = {ti: ([(r[ti], 1.0)] if ti in r else []) + ([(g[ti], 1.0)] if ti in g else [])
              + [(tw[(ti, c.devices[0])], float(hosts_of[c.devices[0]])) for c in classes if (ti, c.devices[0]) in tw] for ti in range(T)}
    for ti in range(T):
        if len(others[ti]) > 1:
            m.row(others[ti], -math.inf, 1.0)  # at most one of replicated, split over devices, split within a host
    some = m.var(0.0 if all(others[ti] for ti in range(T)) else 1.0, 1.0)  # the table- / column-wise all-to-all runs
    for ti in range(T):
        if others[ti]:
            m.row([(some, 1.0)] + others[ti], 1.0, math.inf)
    by_rows = m.var(0, 1)  # the row-wise all-to-all runs
    for q in g.values():
        m.row({by_rows: 1.0, q: -1.0}, 0.0, math.inf)
    dims = ctx.terms.dims.astype(np.float64)
    hier = _hierarchical_rows(m, ctx, classes, tw, hosts_of, dims) if tw else {}
    lp = _KindsLP(m, ctx, z, table_wise, host_memory, r, g, tw, split, others, some, by_rows, hier,
                  fits_all=pair_fits(inst, ctx.terms, table_wise, host_memory),  # [T, D] (memory terms are the kinds' alike)
                  cover=[[] for _ in range(T)], count=[[] for _ in range(T)],
                  rho_sum={ti: [] for ti in split}, block_sum={ti: [] for ti in split})
    for c in classes:
        lp.add_class(c, per_kind[c.kind])
    lp.add_shares(classes, env)
    return m, z


@dataclass
class _KindsLP:
    """`build_kinds_lp`'s model as it is built: the variables every class shares (z, replicas r_t, row splits g_t
    and tw_tc, the collectives that run) and the sums over classes (`cover`: sum_c D_c n_tc; `count`: sum_c D_c x_tc,
    the devices holding t; `rho_sum`: sum_c D_c rho_tc; `block_sum`: sum_c D_c (xr_tc + qr_tc)) that the rows after
    the classes close."""

    m: SparseModel
    ctx: AnalyticRelaxation
    z: int
    table_wise: bool
    host_memory: bool
    r: dict[int, int]
    g: dict[int, int]
    tw: dict[tuple[int, int], int]
    split: list[int]
    others: dict[int, list[tuple[int, float]]]
    some: int
    by_rows: int
    hier: dict[int, int]
    fits_all: np.ndarray
    cover: list[list[tuple[int, float]]]
    count: list[list[tuple[int, float]]]
    rho_sum: dict[int, list[tuple[int, float]]]
    block_sum: dict[int, list[tuple[int, float]]]

    def add_class(self, c: DeviceClass, kc: AnalyticRelaxation) -> None:
        """One class's average device: its pairs, row blocks, tiers, memory, compute and all-to-all, and z above them."""
        m, rep = self.m, self.ctx.replicas
        t = kc.terms
        d0 = c.devices[0]
        x, n, sv = self._pairs(c, kc)
        rho, xr, qr = self._row_blocks(c)
        hu, hr = self._tiers(c, x, n, rho)
        y, f, b = m.var(0, 1), m.var(0, math.inf), m.var(0, math.inf)
        for v in [*x.values(), *self.r.values(), *xr.values()]:
            m.row({y: 1.0, v: -1.0}, 0.0, math.inf)
        self._memory(c, kc, x, n, rho, hu, hr)
        self._compute(kc, x, n, sv, rho, xr, qr, y, f, b)
        comm = self._comm(d0, x, n, xr, qr)
        m.row([(self.z, 1.0), (y, -t.launch_ms), (f, -1.0), (b, -1.0), (comm, -1.0)]
              + [(q, -float(rep.allreduce_ms[ti])) for ti, q in self.r.items()] + ([(self.hier[d0], -1.0)] if self.hier else []), 0.0, math.inf)

    def _pairs(self, c: DeviceClass, kc: AnalyticRelaxation) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        m, t = self.m, kc.terms
        units = self.ctx.terms.dims.astype(np.int64) // DIM_ALIGNMENT
        Dc = float(len(c.devices))
        fit = self.fits_all[:, c.devices[0]]
        x: dict[int, int] = {}
        n: dict[int, int] = {}
        sv: dict[int, int] = {}
        for ti in np.flatnonzero(fit >= 1).tolist():
            x[ti], n[ti], sv[ti] = m.var(0, 1), m.var(0, int(fit[ti])), m.var(0, math.inf)
            self.cover[ti].append((n[ti], Dc))
            self.count[ti].append((x[ti], Dc))
            pair_rows(m, x[ti], n[ti], sv[ti], kc.hulls[ti], int(units[ti]), int(fit[ti]), float(t.elem[ti]), t.sector, self.table_wise)
        return x, n, sv

    def _row_blocks(self, c: DeviceClass) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        """Row blocks of the class's average device: rho <= xr <= g + tw, xr >= tw, qr <= min(xr, g)."""
        m, g, tw = self.m, self.g, self.tw
        d0, Dc = c.devices[0], float(len(c.devices))
        rho: dict[int, int] = {}
        xr: dict[int, int] = {}
        qr: dict[int, int] = {}
        for ti in self.split:
            rho[ti], xr[ti] = m.var(0, 1), m.var(0, 1)
            m.row({rho[ti]: 1.0, xr[ti]: -1.0}, -math.inf, 0.0)
            m.row([(xr[ti], 1.0)] + ([(g[ti], -1.0)] if ti in g else []) + ([(tw[(ti, d0)], -1.0)] if (ti, d0) in tw else []), -math.inf, 0.0)
            if (ti, d0) in tw:
                m.row({xr[ti]: 1.0, tw[(ti, d0)]: -1.0}, 0.0, math.inf)
            self.rho_sum[ti].append((rho[ti], Dc))
            self.block_sum[ti].append((xr[ti], Dc))
            if ti in g:
                qr[ti] = m.var(0, 1)
                m.row({qr[ti]: 1.0, xr[ti]: -1.0}, -math.inf, 0.0)
                m.row({qr[ti]: 1.0, g[ti]: -1.0}, -math.inf, 0.0)
                self.block_sum[ti].append((qr[ti], Dc))
        return rho, xr, qr

    def _tiers(self, c: DeviceClass, x: dict[int, int], n: dict[int, int], rho: dict[int, int]) -> tuple[dict[int, int], dict[int, int]]:
        """n's units (hu) and rho's share (hr) in host memory."""
        m = self.m
        may_host, must_host = host_tables(self.ctx.bm.instance)
        fit = self.fits_all[:, c.devices[0]]
        host = self.host_memory and c.host_capacity > 0
        hu = {ti: m.var(0, int(fit[ti])) for ti in x if host and may_host[ti]}
        hr = {ti: m.var(0, 1) for ti in self.split if host and may_host[ti]}
        for ti, u in hu.items():
            m.row({u: 1.0, n[ti]: -1.0}, 0.0 if must_host[ti] else -math.inf, 0.0)
        for ti, q in hr.items():
            m.row({q: 1.0, rho[ti]: -1.0}, -math.inf, 0.0)
        return hu, hr

    def _memory(self, c: DeviceClass, kc: AnalyticRelaxation, x: dict[int, int], n: dict[int, int], rho: dict[int, int],
                hu: dict[int, int], hr: dict[int, int]) -> None:
        m, t, rows, rep, split = self.m, kc.terms, kc.rows, self.ctx.replicas, self.split
        mem = [(n[ti], t.mem_col[ti] * DIM_ALIGNMENT / c.capacity) for ti in x] + [(x[ti], t.mem_fixed[ti] / c.capacity) for ti in x]
        mem += [(q, rep.mem[ti] / c.capacity) for ti, q in self.r.items()] + [(rho[ti], rows.mem_rho[ti] / c.capacity) for ti in split]
        mem += [(u, -t.mem_col[ti] * DIM_ALIGNMENT / c.capacity) for ti, u in hu.items()]
        mem += [(q, -rows.mem_col_rho[ti] / c.capacity) for ti, q in hr.items()]
        m.row(mem, -math.inf, 1.0 + MEMORY_SLACK)
        if hu or hr:
            m.row([(u, t.mem_col[ti] * DIM_ALIGNMENT / c.host_capacity) for ti, u in hu.items()]
                  + [(q, rows.mem_col_rho[ti] / c.host_capacity) for ti, q in hr.items()], -math.inf, 1.0 + MEMORY_SLACK)

    def _compute(self, kc: AnalyticRelaxation, x: dict[int, int], n: dict[int, int], sv: dict[int, int], rho: dict[int, int],
                 xr: dict[int, int], qr: dict[int, int], y: int, f: int, b: int) -> None:
        """Cache hits (h), then forward and backward compute at least their pieces' sum and the kernel floor."""
        m, t, rows, r = self.m, kc.terms, kc.rows, self.r
        use_hits = t.kappa_ms > 0
        h = m.var(0, math.inf if use_hits else 0.0)
        if use_hits:
            for k, lam in enumerate(kc.lams):
                m.row([(h, 1.0), (y, -t.kappa_ms * lam * t.cache_bytes)] + [(sv[ti], -t.kappa_ms * kc.slopes[ti, k]) for ti in x]
                      + [(rho[ti], -t.kappa_ms * kc.slopes[ti, k] * rows.sb[ti]) for ti in self.split], -math.inf, 0.0)
        fwd = [(f, 1.0), (h, 1.0)] + [(q, -kc.replicas.fwd_ms[ti]) for ti, q in r.items()]
        bwd = [(b, 1.0)] + [(q, -kc.replicas.bwd_ms[ti]) for ti, q in r.items()]
        for ti in x:
            fwd += [(x[ti], -t.fwd_fixed_ms[ti]), (n[ti], -t.fwd_col_ms[ti] * DIM_ALIGNMENT), (sv[ti], -t.fwd_sb_ms[ti])]
            bwd += [(x[ti], -t.bwd_fixed_ms[ti]), (n[ti], -t.bwd_col_ms[ti] * DIM_ALIGNMENT), (sv[ti], -t.bwd_sb_ms[ti])]
        for ti in self.split:
            blocks = [xr[ti]] + ([qr[ti]] if ti in qr else [])
            fwd += [(e, -rows.fwd_block_ms[ti]) for e in blocks] + [(rho[ti], -rows.fwd_rho_ms[ti])]
            bwd += [(e, -rows.bwd_block_ms[ti]) for e in blocks] + [(rho[ti], -rows.bwd_rho_ms[ti])]
        m.row(fwd, 0.0, math.inf)
        m.row(bwd, 0.0, math.inf)
        m.row({f: 1.0, y: -t.min_kernel_ms}, 0.0, math.inf)
        m.row({b: 1.0, y: -t.min_kernel_ms}, 0.0, math.inf)

    def _comm(self, d0: int, x: dict[int, int], n: dict[int, int], xr: dict[int, int], qr: dict[int, int]) -> int:
        """The all-to-all (x2: backward equals forward) of the class's device d0 with its own links: max of its NVLink
        send u nl, receive v - u, network send u nr, receive total - v (v = L u: its host is of this class); u its
        column shards' width and its row blocks' (less a split within its host: hierarchical), the total less the
        widths of the tables replicated or split within a host (they join no all-to-all). Returns its variable."""
        m, bm, g, tw, split = self.m, self.ctx.bm, self.g, self.tw, self.split
        ct = bm.comm_terms()
        D, L = bm.num_devices, bm.instance.topology.intra_group_size
        dims = self.ctx.terms.dims.astype(np.float64)
        total = float(dims.sum())
        comm = m.var(-math.inf, math.inf)
        lat = 2 * ct.latency_ms
        ls, rs = 2 * scale_at(ct.local_scale, d0), 2 * scale_at(ct.remote_scale, d0)  # receives
        ss_l, ss_r = (2 * scale_at(sc, d0) for sc in ct.send_scales)  # sends
        nl, nr = float(ct.local_peers[d0]), float(ct.remote_peers[d0])
        if D <= 1:
            m.row({comm: 1.0}, 0.0, math.inf)
            return comm
        width = [(n[ti], float(DIM_ALIGNMENT)) for ti in x] + [(xr[ti], dims[ti]) for ti in split] + [(q, dims[ti]) for ti, q in qr.items()]
        width += [(tw[(ti, d0)], -dims[ti]) for ti in split if (ti, d0) in tw]
        leave = [(e, wt * dims[ti]) for ti in range(len(dims)) for e, wt in self.others[ti] if not (ti in g and e == g[ti])]
        pieces = [(ss_l * nl, 0.0)]  # (per unit of u, per unit of the total)
        if ct.single_host:
            pieces.append((-ls, ls))
        else:
            pieces += [(ls * (L - 1), 0.0), (ss_r * nr, 0.0), (-rs * L, rs)]
        for per_u, per_total in pieces:
            row = [(comm, 1.0), (self.some, -lat), (self.by_rows, -lat)] + [(v, -per_u * w) for v, w in width]
            row += [(e, per_total * w) for e, w in leave]
            m.row(row, per_total * total, math.inf)
        return comm

    def add_shares(self, classes: list[DeviceClass], env: AnalyticRelaxation) -> None:
        """The rows over classes: each table's shares add up (column units, row shares, blocks), and its table cuts
        (on the kinds' envelope `env`) at the devices holding it."""
        m, g, tw, r, others, z = self.m, self.g, self.tw, self.r, self.others, self.z
        units = self.ctx.terms.dims.astype(np.int64) // DIM_ALIGNMENT
        D = self.ctx.bm.num_devices
        for ti in self.split:  # the shares add up; two blocks or more; the direct collective's blocks at least g
            splitting = [(e, -w) for e, w in others[ti] if not (ti in r and e == r[ti])]
            m.row(self.rho_sum[ti] + splitting, 0.0, 0.0)
            m.row(self.block_sum[ti] + [(e, 2 * w) for e, w in splitting], 0.0, math.inf)
            if ti in g:
                nested = [(tw[(ti, c.devices[0])], -float(len(c.devices))) for c in classes if (ti, c.devices[0]) in tw]
                m.row(self.block_sum[ti] + nested + [(g[ti], -1.0)], 0.0, math.inf)
        for ti in range(len(units)):
            m.row(self.cover[ti] + [(e, w * float(units[ti])) for e, w in others[ti]], float(units[ti]), float(units[ti]))
            if not self.count[ti]:
                continue
            m.row(self.count[ti] + others[ti], 1.0, math.inf)  # the devices holding t: at least one unless it is elsewhere
            lines = table_cut_lines(env, ti, 1 if self.table_wise else D)
            top = 1 if self.table_wise else min(D, int(units[ti]))
            for alpha, beta in lines:
                row = [(z, 1.0)] + [(v, -beta * w) for v, w in self.count[ti]]
                row += [(e, w * max(alpha, alpha + beta * top, 0.0)) for e, w in others[ti]]
                m.row(row, alpha, math.inf)


def _hierarchical_rows(m: SparseModel, ctx: AnalyticRelaxation, classes: list[DeviceClass], tw: dict[tuple[int, int], int],
                       hosts_of: dict[int, int], dims: np.ndarray) -> dict[int, int]:
    """Per class, hier_c >= both passes of the table-row-wise collectives (`milp._add_hierarchical_rows` averaged over
    the class's hosts: its host width W_c = sum_t dim_t tw_tc, all hosts' W = sum_c H_c W_c), at the mixed job's
    slowest links. Keyed by the class's first device."""
    bm = ctx.bm
    ct = bm.comm_terms()
    intra, send_x, recv_x = ct.hier_intra_ms, ct.hier_send_ms, ct.hier_recv_ms
    present = m.var(0, 1)
    for v in tw.values():
        m.row({present: 1.0, v: -1.0}, 0.0, math.inf)
    every = {v: float(hosts_of[d]) * float(dims[ti]) for (ti, d), v in tw.items()}
    out: dict[int, int] = {}
    for c in classes:
        d0 = c.devices[0]
        hier = out[d0] = m.var(0, math.inf)
        mine = {v: float(dims[ti]) for (ti, d), v in tw.items() if d == d0}
        send = {k: -2.0 * (intra + send_x) * w for k, w in mine.items()}
        recv = {k: -2.0 * recv_x * w for k, w in every.items()}
        for k, w in mine.items():
            recv[k] = recv.get(k, 0.0) - 2.0 * (intra - recv_x) * w
        for row in (send, recv):
            m.row({hier: 1.0, present: -2.0 * ct.hier_start_ms, **row}, 0.0, math.inf)
    return out


def _envelope_context(instance: Instance, profiles: list[HardwareProfile]) -> AnalyticRelaxation:
    """The relaxation of `instance` on the profiles' envelope (every device as fast as the fastest kind; one profile:
    itself): its table cuts hold on a device of any kind."""
    env = profiles[0] if len(profiles) == 1 else envelope_profile(profiles)
    return AnalyticRelaxation(instance, AnalyticCostModel(env), host_memory=False)


def kinds_lp_bound(instance: Instance, table_wise: bool = False, time_limit: float = 10.0, replicas: bool = True,
                   row_splits: bool = True, host_memory: bool = True, cost_model: CostModel | None = None) -> tuple[float | None, bool]:
    """(the per-kind LP's bound in ms, whether it covers host memory) of `instance`'s plans - table-wise ones with
    `table_wise`; else of table-wise and column-wise shards, data-parallel replicas (`replicas`) and row splits
    (`row_splits`) where the instance allows them (`AnalyticRelaxation.replicable`, `row_split`, `host_row_split`),
    in HBM and, with `host_memory` where every kind's relaxation covers it, in host memory - each device priced on
    its own kind (a job of one kind: on `cost_model`'s profile, the class LP of its memory classes). The bound is +inf
    when no such plan fits, None where the LP does not hold for the topology (`device_classes`) or HiGHS did not
    finish in time."""
    classes = device_classes(instance, one_kind=True)
    if isinstance(classes, str):
        return None, False
    ctx = AnalyticRelaxation(instance, cost_model, host_memory=False, row_splits=row_splits, replicas=replicas, own_kinds=True)
    kinds = list(dict.fromkeys(c.kind for c in classes))
    profiles = {k: get_profile(k) for k in kinds} if instance.topology.is_mixed else {kinds[0]: ctx.bm.profile}
    host = host_memory and all(host_tier_reason(AnalyticCostModel(p).bind(instance)) is None for p in profiles.values())
    fits = pair_fits(instance, ctx.terms, table_wise, host)
    elsewhere = np.zeros(len(ctx.terms.dims), dtype=bool) if table_wise else (ctx.replicable | ctx.row_split | ctx.host_row_split)
    if any(not fits[ti].any() and not elsewhere[ti] for ti in range(len(ctx.terms.dims))):
        return math.inf, host  # a table no device holds (whole, or a column shard) that may not be replicated or split by rows
    m, z = build_kinds_lp(ctx, classes, table_wise, replicas, row_splits, host, profiles)
    c = np.zeros(m.n_vars)
    c[z] = 1.0
    res = solve_milp(m, c, time_limit=max(time_limit, 0.05), integrality=False)
    if res.status is SolveStatus.infeasible:
        return math.inf, host
    if res.status is not SolveStatus.optimal or res.objective is None:
        return None, host
    return float(res.objective), host
