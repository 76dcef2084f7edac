"""Where TorchRec's planner spends its time when the `torchrec` solver drives it: a cProfile of one planning run, in
process, with the planner's stages timed separately.

The planner is built by the solver itself (`TorchRecSolver._plan`: the same EmbeddingBagCollection on the meta
device, Topology, ParameterConstraints, storage reservation and proposers as a solve), with TorchRec's own
`timeout_seconds` unset (what a solve without a time limit does), and run in this process (a solve with a limit forks
a child, which cProfile would not see). The instance can be scaled down: the first T tables on D devices (8 per host,
each device's memory and the global batch unchanged).

Stages, timed by wrapping TorchRec's classes for the run (wall clock, cheap enough to keep on under cProfile):

- reserve: the storage reservation (`StorageReservation.reserve`);
- enumerate: `EmbeddingEnumerator.enumerate` (building the sharding options and `populate_estimates`: the shard
  storage and perf estimators);
- proposers' load (sorting the options) and, in the proposal loop: propose/feedback (the proposers),
  `GreedyPerfPartitioner.partition` (one per proposal evaluated), `NoopPerfModel.rate`, and the rest of the loop
  (the planner's own bookkeeping: hashing each proposal for its cache, deep-copying each new best plan, resetting
  shard ranks, summing the storage of a proposal that did not fit);
- after: `to_sharding_plan` and the plan validation, then the solver's conversion of the plan back to shards.

Run: `.venv/bin/python benchmarks/profile_torchrec_planner.py [--instance PATH] [--tables T] [--devices D]
[--sharding-types a,b,...] [--out /tmp/x.prof] [--no-profile] [--top 25] [--proposers default|greedy,uniform,...]
[--planner-timeout S]`. Times are wall-clock on this machine and
inflated by cProfile (`--no-profile` gives the stage times without it).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shardopt.core.ir import Instance, load_instance  # noqa: E402
from solvers.torchrec_solver import DEFAULT_SHARDING_TYPES, TorchRecSolver  # noqa: E402

DEFAULT_INSTANCE = ROOT / "instances/suites/production/production-all-s0-0000.json"
PER_HOST = 8


def scaled(instance: Instance, tables: int | None, devices: int | None) -> Instance:
    """The first `tables` tables on `devices` devices (8 per host, or all when fewer), each device's memory unchanged."""
    topo = instance.topology
    n = devices or topo.num_devices
    update: dict = {"num_devices": n, "devices_per_host": min(PER_HOST if devices else topo.devices_per_host, n)}
    if n % update["devices_per_host"]:
        raise SystemExit(f"--devices {n}: must be a multiple of {update['devices_per_host']} (devices per host)")
    if isinstance(topo.memory_bytes, list):
        update["memory_bytes"] = [topo.capacity(d % topo.num_devices) for d in range(n)]
    if isinstance(topo.host_memory_bytes, list):
        update["host_memory_bytes"] = [topo.host_capacity(d % topo.num_devices) for d in range(n)]
    new_topo = topo.model_validate({**topo.model_dump(), **update})
    return instance.model_copy(update={"tables": list(instance.tables[: tables or len(instance.tables)]), "topology": new_topo,
                                       "name": f"{instance.name}[{tables or len(instance.tables)}x{n}]"})


def proposer_factory(spec: str):
    """`--proposers`: None for TorchRec's default list (Grid, Greedy, Greedy(use_depth=False), Uniform: what the solver
    runs), else a comma list of grid, greedy, greedy_nodepth, uniform, dp; greedy[_nodepth]:N sets its early-stop
    threshold N (stop after N consecutive partitionable proposals no better than its best)."""
    if spec in ("", "default"):
        return None

    def make():
        from torchrec.distributed.planner import proposers as P

        out = []
        for item in spec.split(","):
            name, _, arg = item.strip().partition(":")
            threshold = int(arg) if arg else None
            if name == "grid":
                out.append(P.GridSearchProposer())
            elif name == "greedy":
                out.append(P.GreedyProposer(threshold=threshold))
            elif name == "greedy_nodepth":
                out.append(P.GreedyProposer(use_depth=False, threshold=threshold))
            elif name == "uniform":
                out.append(P.UniformProposer())
            elif name == "dp":
                out.append(P.DynamicProgrammingProposer())
            else:
                raise SystemExit(f"--proposers: unknown {name!r}")
        return out

    make()  # fail early on a bad name
    return make


class Stages:
    """Wall-clock accumulators around TorchRec's planner stages (class methods patched for the run, restored after)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter = Counter()
        self.marks: dict[str, float] = {}
        self.options: list = []
        self.proposer = "?"
        self.partitions_by_proposer: Counter = Counter()
        self.failed_by_proposer: Counter = Counter()
        self.shards_partitioned = 0
        self.best_by_proposer: dict = {}
        self.seconds_by_proposer: dict[str, float] = defaultdict(float)  # wall time of its stretch of the proposal loop
        self._proposer_since = 0.0
        self.best = (float("inf"), "?", 0, 0)  # rating, proposer, its proposal number, overall proposal number
        self.proposers = None  # None: TorchRec's default proposers (what the solver uses); else a function making a list
        self._patched: list = []

    def _wrap(self, cls, name: str, stage: str, before=None, after=None) -> None:
        orig = cls.__dict__[name]
        fn = orig.__func__ if isinstance(orig, (classmethod, staticmethod)) else orig
        stages = self

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if before is not None:
                before(args, kwargs)
            t = time.perf_counter()
            ok = False
            try:
                out = fn(*args, **kwargs)
                ok = True
                return out
            finally:
                stages.seconds[stage] += time.perf_counter() - t
                stages.calls[stage] += 1
                if after is not None:
                    after(args, kwargs, out if ok else None, ok)

        setattr(cls, name, type(orig)(timed) if isinstance(orig, (classmethod, staticmethod)) else timed)
        self._patched.append((cls, name, orig))

    def install(self) -> None:
        import torchrec.distributed.planner.planners as planners
        from torchrec.distributed.planner import proposers as P
        from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
        from torchrec.distributed.planner.partitioners import GreedyPerfPartitioner
        from torchrec.distributed.planner.perf_models import NoopPerfModel
        from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation

        def mark(key):
            return lambda *a: self.marks.__setitem__(key, time.perf_counter())

        self._wrap(planners.EmbeddingShardingPlanner, "plan", "plan (total)", before=mark("plan_start"), after=mark("plan_end"))
        self._wrap(FixedPercentageStorageReservation, "reserve", "reserve")
        self._wrap(EmbeddingEnumerator, "enumerate", "enumerate",
                   after=lambda a, k, out, ok: (self.options.extend(out or []), self.marks.__setitem__("enum_end", time.perf_counter())))
        self._wrap(EmbeddingEnumerator, "populate_estimates", "  of which populate_estimates (storage/perf estimators)")

        def set_proposer(args, kwargs):
            name = f"{type(args[0]).__name__}" + ("(use_depth=False)" if getattr(args[0], "_use_depth", True) is False else "")
            now = time.perf_counter()
            if name != self.proposer and self.proposer != "?":
                self.seconds_by_proposer[self.proposer] += now - self._proposer_since
            if name != self.proposer:
                self._proposer_since = now
            self.proposer = name

        for cls in (P.GridSearchProposer, P.GreedyProposer, P.UniformProposer):
            self._wrap(cls, "load", "proposers' load")
            self._wrap(cls, "propose", "loop: propose", before=set_proposer)
            self._wrap(cls, "feedback", "loop: feedback")

        def count_partition(args, kwargs, out, ok):
            proposal = kwargs.get("proposal", args[1] if len(args) > 1 else None)
            self.partitions_by_proposer[self.proposer] += 1
            self.shards_partitioned += sum(so.num_shards for so in proposal)
            if not ok:
                self.failed_by_proposer[self.proposer] += 1

        self._wrap(GreedyPerfPartitioner, "partition", "loop: partition", after=count_partition)
        def record_rating(args, kwargs, out, ok):
            if ok and out is not None:
                n = self.partitions_by_proposer[self.proposer]
                if out < self.best_by_proposer.get(self.proposer, (float("inf"),))[0]:
                    self.best_by_proposer[self.proposer] = (out, n)
                if out < self.best[0]:
                    self.best = (out, self.proposer, n, sum(self.partitions_by_proposer.values()))

        self._wrap(NoopPerfModel, "rate", "loop: perf rate", after=record_rating)
        if self.proposers is not None:  # an experiment: the solver's planner with other proposers (injected at construction)
            orig_init = planners.EmbeddingShardingPlanner.__dict__["__init__"]
            make = self.proposers

            @functools.wraps(orig_init)
            def init(planner_self, *a, **k):
                k.setdefault("proposer", make())
                return orig_init(planner_self, *a, **k)

            planners.EmbeddingShardingPlanner.__init__ = init
            self._patched.append((planners.EmbeddingShardingPlanner, "__init__", orig_init))
        # the first call after the proposal loop: marks its end
        orig_tsp = planners.to_sharding_plan

        @functools.wraps(orig_tsp)
        def tsp(*a, **k):
            self.marks.setdefault("loop_end", time.perf_counter())
            if self.proposer != "?":
                self.seconds_by_proposer[self.proposer] += self.marks["loop_end"] - self._proposer_since
                self._proposer_since = self.marks["loop_end"]
            return orig_tsp(*a, **k)

        planners.to_sharding_plan = tsp
        self._patched.append((planners, "to_sharding_plan", orig_tsp))

    def uninstall(self) -> None:
        for obj, name, orig in reversed(self._patched):
            setattr(obj, name, orig)
        self._patched.clear()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instance", default=str(DEFAULT_INSTANCE))
    ap.add_argument("--tables", type=int, default=None, help="keep the first T tables (default all)")
    ap.add_argument("--devices", type=int, default=None, help="D devices, 8 per host (default the instance's)")
    ap.add_argument("--sharding-types", default=",".join(DEFAULT_SHARDING_TYPES), help="comma-separated (default the solver's)")
    ap.add_argument("--min-partition", type=int, default=None)
    ap.add_argument("--out", default=None, help="write the cProfile stats here (pstats format)")
    ap.add_argument("--no-profile", action="store_true", help="stage timers only, no cProfile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--planner-timeout", type=int, default=None,
                    help="TorchRec's timeout_seconds (checked between proposals; default unset, as a solve without a limit)")
    ap.add_argument("--proposers", default="default",
                    help="experiment: default (TorchRec's, as the solver) or a list of grid,greedy,greedy_nodepth,uniform,dp (greedy:N = threshold N)")
    args = ap.parse_args(argv)

    instance = scaled(load_instance(args.instance), args.tables, args.devices)
    types = tuple(x.strip() for x in args.sharding_types.split(",") if x.strip())
    solver = TorchRecSolver(sharding_types=types, min_partition=args.min_partition, default_time_limit=None)
    opts = getattr(solver, "options", solver)  # the solver's settings (an options object, or the solver itself in older versions)
    t0 = time.perf_counter()
    solver.prepare()  # import TorchRec outside the measurement
    import_s = time.perf_counter() - t0
    topo = instance.topology
    print(f"instance {instance.name}: {len(instance.tables)} tables x {topo.num_devices} devices ({topo.devices_per_host}/host), "
          f"sharding types {','.join(opts.sharding_types)}, kernels {','.join(solver.compute_kernels(instance))}, "
          f"per-rank batch {instance.workload.batch_size // topo.num_devices}; TorchRec import {import_s:.1f} s", flush=True)

    stages = Stages()
    stages.proposers = proposer_factory(args.proposers)
    if stages.proposers is not None:
        print(f"EXPERIMENT: proposers {args.proposers} instead of TorchRec's default list", flush=True)
    stages.install()
    prof = None if args.no_profile else cProfile.Profile()
    t0 = time.perf_counter()
    try:
        if prof is not None:
            prof.enable()
        out = solver._plan(instance, args.planner_timeout)  # the solver's own planner; TorchRec's timeout_seconds unset by default
    finally:
        if prof is not None:
            prof.disable()
        stages.uninstall()
    total = time.perf_counter() - t0

    s, m = stages.seconds, stages.marks
    plan_s = s["plan (total)"]
    loop_s = m.get("loop_end", m.get("plan_end", 0)) - m.get("enum_end", 0) if "enum_end" in m else 0.0
    loop_known = s["loop: propose"] + s["loop: feedback"] + s["loop: partition"] + s["loop: perf rate"]
    after_s = m.get("plan_end", 0) - m.get("loop_end", m.get("plan_end", 0))
    per_table = Counter(so.name for so in stages.options)
    by_type = Counter(so.sharding_type for so in stages.options)
    by_kernel = Counter(so.compute_kernel for so in stages.options)
    shards_in_options = sum(so.num_shards for so in stages.options)
    result = "plan found" if out["shards"] is not None else f"no plan: {out['error'][1]}"

    print(f"\nresult: {result}; perf rating {out['estimates']['torchrec_perf_rating_ms']:.3f} ms" if out["estimates"] else f"\nresult: {result}")
    if out["estimates"]:
        print(f"chosen sharding types: {out['estimates']['sharding_types_chosen']}")
    print(f"sharding options enumerated: {len(stages.options)} ({len(stages.options) / max(1, len(per_table)):.2f} per table; "
          f"{shards_in_options} shards in all) by type {dict(by_type)}, by kernel {dict(by_kernel)}")
    if args.planner_timeout:
        print(f"TorchRec's timeout_seconds={args.planner_timeout}: {'it stopped the proposal loop' if out['timed_out'] else 'not reached'}")
    print(f"proposals evaluated (partitioned): {out['num_proposals']}, of which partitionable {out['num_plans']}; "
          f"propose() calls {stages.calls['loop: propose']} (the rest are ends of a proposer or cache hits)")
    for name, n in stages.partitions_by_proposer.items():
        best = stages.best_by_proposer.get(name)
        print(f"  {name}: {n} proposals, {stages.failed_by_proposer[name]} did not fit, {stages.seconds_by_proposer.get(name, 0.0):.2f} s"
              + (f"; its best rating {best[0]:.3f} ms at its proposal {best[1]}" if best else "; no plan"))
    if stages.best[1] != "?":
        print(f"best rating {stages.best[0]:.3f} ms: {stages.best[1]}'s proposal {stages.best[2]} (proposal {stages.best[3]} overall)")
    if out["num_proposals"]:
        print(f"shards per proposal: {stages.shards_partitioned / out['num_proposals']:.0f} on average")
    print(f"\nseconds{' (under cProfile)' if prof else ''}: solver._plan {total:.2f}, of which planner.plan {plan_s:.2f}")
    rows = [
        ("reserve", s["reserve"]),
        ("enumerate", s["enumerate"]),
        ("  of which populate_estimates (storage/perf estimators)", s["  of which populate_estimates (storage/perf estimators)"]),
        ("proposers' load", s["proposers' load"]),
        ("propose+partition loop", loop_s),
        ("  loop: partition", s["loop: partition"]),
        ("  loop: propose + feedback", s["loop: propose"] + s["loop: feedback"]),
        ("  loop: perf rate", s["loop: perf rate"]),
        ("  loop: planner bookkeeping (hash, deepcopy of best, reset ranks, ...)", loop_s - loop_known),
        ("after the loop (to_sharding_plan, validation)", after_s),
        ("solver: outside planner.plan (EBC, topology, constraints, plan back to shards)", total - plan_s),
    ]
    for label, v in rows:
        print(f"  {label:<80} {v:9.2f}  {100 * v / total if total else 0:5.1f} %")
    if out["num_proposals"]:
        print(f"  per proposal: partition {1e3 * s['loop: partition'] / out['num_proposals']:.2f} ms, loop {1e3 * loop_s / out['num_proposals']:.2f} ms")
    print(f"SUMMARY tables={len(instance.tables)} devices={topo.num_devices} types={','.join(opts.sharding_types)} total_s={total:.2f} "
          f"enumerate_s={s['enumerate']:.2f} loop_s={loop_s:.2f} partition_s={s['loop: partition']:.2f} other_s={total - s['enumerate'] - loop_s:.2f} "
          f"options={len(stages.options)} proposals={out['num_proposals']} plans={out['num_plans']} profiled={prof is not None} "
          f"proposers={args.proposers} rating_ms={stages.best[0]:.3f} timed_out={out['timed_out']}")

    if prof is not None:
        if args.out:
            prof.dump_stats(args.out)
            print(f"\ncProfile stats written to {args.out}")
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            st = pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key)
            st.print_stats(args.top if key == "cumulative" else 15)
            text = buf.getvalue()
            print(f"\n--- top functions by {key} time ---")
            print(text[text.find("   ncalls"):].rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
