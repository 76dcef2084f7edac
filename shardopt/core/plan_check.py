"""The plan checker: the one gate every solver's result goes through before anyone sees it.

A plan is valid when every column of every row of every table is covered exactly once (replicas aside), every
shard's width is a multiple of 4 (fbgemm's alignment), every shard lies inside its table and on a real device, and
every device's memory (weights + optimizer state, see shardopt.core.memory) fits, and the placement constraints hold -
among them, for a plan meant for TorchRec (`constraints.torchrec`), the form TorchRec loads (shardopt.core.torchrec_form),
so that no solver can hand TorchRec a plan it refuses. Each violation names the table and the device, so a user (or a
solver author) can see what went wrong without reading code.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from shardopt.core.ir import DIM_ALIGNMENT, Instance, Kernel, Plan, Shard, Table
from shardopt.core.memory import shard_bytes, shard_host_bytes
from shardopt.core.sharding_types import layouts_it_is, sharding_type
from shardopt.core.torchrec_form import form_problems


@dataclass(frozen=True)
class PlanViolation:
    kind: str  # unknown_table | bad_device | alignment | out_of_bounds | overlap | coverage | replication | column_wise | memory | host_memory | constraint | torchrec
    message: str
    table: str | None = None
    device: int | None = None

    def __str__(self) -> str:
        return self.message


@dataclass
class PlanCheck:
    violations: list[PlanViolation] = field(default_factory=list)
    memory_use: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # HBM bytes per device
    host_memory_use: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # host (UVM) bytes per device

    @property
    def ok(self) -> bool:
        return not self.violations


class PlanError(ValueError):
    """A plan that breaks the rules; `violations` lists every problem found."""

    def __init__(self, violations: list[PlanViolation], context: str | None = None):
        self.violations = violations
        self.context = context
        shown = "\n".join("  " + v.message for v in violations[:20])
        more = f"\n  ... and {len(violations) - 20} more" if len(violations) > 20 else ""
        where = f"{context}: " if context else ""
        super().__init__(f"{where}invalid plan: {len(violations)} violation(s):\n{shown}{more}")


def check_plan(instance: Instance, plan: Plan | list[Shard]) -> PlanCheck:
    """Every violation of `plan` against `instance` (an empty list when the plan is valid), and memory per device."""
    shards = plan.shards if isinstance(plan, Plan) else plan
    topo = instance.topology
    n_dev = topo.num_devices
    index = instance.table_index()
    out: list[PlanViolation] = []
    use = np.zeros(n_dev, dtype=np.int64)
    host_use = np.zeros(n_dev, dtype=np.int64)
    by_table: dict[str, list[Shard]] = defaultdict(list)

    for k, s in enumerate(shards):
        i = index.get(s.table)
        if i is None:
            out.append(PlanViolation("unknown_table", f"shards[{k}]: table {s.table!r} is not in the instance", s.table, s.device))
            continue
        t = instance.tables[i]
        if s.device >= n_dev:
            out.append(
                PlanViolation("bad_device", f"table {s.table!r}: shard on device {s.device}, but the topology has devices 0..{n_dev - 1}", s.table, s.device)
            )
        c0, c1 = s.col_range(t)
        r0, r1 = s.row_range(t)
        if c0 % DIM_ALIGNMENT or (c1 - c0) % DIM_ALIGNMENT:
            out.append(
                PlanViolation("alignment", f"table {s.table!r} on device {s.device}: columns [{c0}, {c1}) are not aligned to multiples of {DIM_ALIGNMENT}", s.table, s.device)
            )
        if c1 <= c0 or c1 > t.dim:
            out.append(PlanViolation("out_of_bounds", f"table {s.table!r} on device {s.device}: columns [{c0}, {c1}) outside [0, {t.dim})", s.table, s.device))
            continue
        if r1 <= r0 or r1 > t.rows:
            out.append(PlanViolation("out_of_bounds", f"table {s.table!r} on device {s.device}: rows [{r0}, {r1}) outside [0, {t.rows})", s.table, s.device))
            continue
        by_table[s.table].append(s)
        if s.device < n_dev:
            use[s.device] += shard_bytes(instance, t, s)
            host_use[s.device] += shard_host_bytes(instance, t, s)

    for t in instance.tables:
        out.extend(_check_coverage(instance, t, by_table.get(t.name, [])))
    if instance.constraints is not None:
        out.extend(_check_constraints(instance, by_table))

    for d in range(n_dev):
        cap = topo.capacity(d)
        if use[d] > cap:
            listed, first = _listed(shards, d, index, lambda s: s.kernel is not Kernel.fused_uvm)
            out.append(PlanViolation(
                "memory", f"device {d}: {int(use[d]):,} bytes of shards ({listed}) exceed its {cap:,} bytes of HBM by {int(use[d] - cap):,}",
                first, d))
        host_cap = topo.host_capacity(d)
        if host_use[d] > host_cap:
            listed, first = _listed(shards, d, index, lambda s: s.kernel.in_host_memory)
            if host_cap == 0:
                msg = (f"device {d}: UVM shards ({listed}, {int(host_use[d]):,} bytes) but the device has no host memory "
                       f"(topology.host_memory_bytes is 0 for it)")
            else:
                msg = (f"device {d}: {int(host_use[d]):,} bytes of UVM shards ({listed}) exceed its {host_cap:,} bytes of "
                       f"host memory by {int(host_use[d] - host_cap):,}")
            out.append(PlanViolation("host_memory", msg, first, d))
    return PlanCheck(out, use, host_use)


def _listed(shards: list[Shard], device: int, index: dict[str, int], keep) -> tuple[str, str | None]:  # noqa: ANN001
    """The tables of `device`'s shards that count in a tier, for a message: up to five names, and the first."""
    names = sorted({s.table for s in shards if s.device == device and s.table in index and keep(s)})
    listed = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return listed, (names[0] if names else None)


def _check_coverage(instance: Instance, t: Table, shards: list[Shard]) -> list[PlanViolation]:
    name = t.name
    if not shards:
        return [PlanViolation("coverage", f"table {name!r} is not placed on any device", name, None)]
    replicas = [s for s in shards if s.replicated]
    if replicas:
        out: list[PlanViolation] = []
        if len(replicas) != len(shards):
            out.append(PlanViolation("replication", f"table {name!r} mixes replicated and sharded placements", name, None))
        devices = [s.device for s in replicas]
        n_dev = instance.topology.num_devices
        for s in replicas:
            if s.col_range(t) != (0, t.dim) or s.row_range(t) != (0, t.rows):
                out.append(PlanViolation("replication", f"table {name!r}: a replica on device {s.device} is not the whole table", name, s.device))
        missing = sorted(set(range(n_dev)) - set(devices))
        if missing:
            out.append(PlanViolation("replication", f"table {name!r} is replicated but has no replica on device(s) {missing[:8]}", name, missing[0]))
        dup = sorted({d for d in devices if devices.count(d) > 1})
        if dup:
            out.append(PlanViolation("replication", f"table {name!r} has more than one replica on device(s) {dup[:8]}", name, dup[0]))
        return out

    out = []
    rects = [(s.row_range(t), s.col_range(t), s.device) for s in shards]
    marked = [s for s in shards if s.column_wise]
    if marked and any(r != (0, t.rows) for r, _, _ in rects):
        out.append(PlanViolation(
            "column_wise", f"table {name!r}: its shard on device {marked[0].device} is marked column_wise, but the table is split by rows "
            "(a column-wise table's shards hold every row)", name, marked[0].device))
    for a in range(len(rects)):
        (ra0, ra1), (ca0, ca1), da = rects[a]
        for b in range(a + 1, len(rects)):
            (rb0, rb1), (cb0, cb1), db = rects[b]
            if ra0 < rb1 and rb0 < ra1 and ca0 < cb1 and cb0 < ca1:
                out.append(
                    PlanViolation(
                        "overlap",
                        f"table {name!r}: shards on devices {da} and {db} both cover rows [{max(ra0, rb0)}, {min(ra1, rb1)}) x columns [{max(ca0, cb0)}, {min(ca1, cb1)})",
                        name,
                        db,
                    )
                )
    if not out:
        area = sum((r1 - r0) * (c1 - c0) for (r0, r1), (c0, c1), _ in rects)
        if area != t.rows * t.dim:
            # disjoint shards inside the table: the area shortfall is exactly the uncovered part
            out.append(
                PlanViolation(
                    "coverage",
                    f"table {name!r}: shards cover {area:,} of its {t.rows * t.dim:,} cells ({t.rows} rows x {t.dim} columns); some rows or columns are on no device",
                    name,
                    None,
                )
            )
    return out


def constraint_violations(instance: Instance, shards: list[Shard]) -> list[PlanViolation]:
    """Only the placement constraints broken by `shards` (none on an instance without constraints): for a search
    that keeps a step's plan only where the constraints still hold, without the whole check's memory and coverage."""
    if instance.constraints is None:
        return []
    by_table: dict[str, list[Shard]] = defaultdict(list)
    for s in shards:
        by_table[s.table].append(s)
    return _check_constraints(instance, by_table)


def _check_constraints(instance: Instance, by_table: dict[str, list[Shard]]) -> list[PlanViolation]:
    """The instance's placement constraints (shardopt.core.ir.PlacementConstraints), each broken one named."""
    c = instance.constraints
    assert c is not None
    out: list[PlanViolation] = []
    tables = {t.name: t for t in instance.tables}
    for tc in c.tables:
        t, shards = tables[tc.table], by_table.get(tc.table, [])
        if not shards:
            continue  # (coverage says so)
        if tc.sharding_types is not None:
            kind = sharding_type(instance.topology, t, shards)
            if not layouts_it_is(instance.topology, t, shards) & set(tc.sharding_types):
                out.append(PlanViolation("constraint", f"table {t.name!r} is placed {kind}; its constraint allows {', '.join(tc.sharding_types)}", t.name, None))
        for s in shards:
            if tc.kernels is not None and s.kernel not in tc.kernels:
                out.append(PlanViolation("constraint", f"table {t.name!r} on device {s.device}: kernel {s.kernel.value}; its constraint allows "
                                         f"{', '.join(k.value for k in tc.kernels)}", t.name, s.device))
            if tc.devices is not None and s.device not in tc.devices:
                out.append(PlanViolation("constraint", f"table {t.name!r} has a shard on device {s.device}; its constraint allows devices {tc.devices}",
                                         t.name, s.device))
            if (narrowest := tc.min_piece_width(t.dim)) is not None and not s.replicated and s.width(t) < narrowest:
                out.append(PlanViolation("constraint", f"table {t.name!r} on device {s.device}: a column piece {s.width(t)} wide, narrower than "
                                         f"its min_partition {tc.min_partition}", t.name, s.device))
            if tc.cache_load_factor is not None and s.kernel is Kernel.fused_uvm_caching and s.cache_load_factor != tc.cache_load_factor:
                out.append(PlanViolation("constraint", f"table {t.name!r} on device {s.device}: cache load factor {s.cache_load_factor}; its "
                                         f"constraint says {tc.cache_load_factor}", t.name, s.device))
    devices = {name: {s.device for s in shards} for name, shards in by_table.items()}
    for group in c.colocate:
        sets = {name: devices.get(name, set()) for name in group}
        if len({frozenset(v) for v in sets.values()}) > 1:
            shown = "; ".join(f"{n} on {sorted(v)}" for n, v in sets.items())
            out.append(PlanViolation("constraint", f"co-located tables on different devices: {shown}", group[0], None))
    for group in c.separate:
        for a_i, a in enumerate(group):
            for b in group[a_i + 1 :]:
                both = devices.get(a, set()) & devices.get(b, set())
                if both:
                    out.append(PlanViolation("constraint", f"tables {a!r} and {b!r} must be apart but share device(s) {sorted(both)}", a, min(both)))
    if c.torchrec is not None:
        out.extend(PlanViolation("torchrec", why, name, None) for name, why in form_problems(instance, by_table, c.torchrec.even_columns))
    return out


def assert_valid_plan(instance: Instance, plan: Plan | list[Shard]) -> PlanCheck:
    """The check, raising PlanError when anything is wrong."""
    result = check_plan(instance, plan)
    if not result.ok:
        raise PlanError(result.violations)
    return result
