"""ShardoptPlanner against TorchRec's EmbeddingShardingPlanner on the same module and topology (issue 'planner'):
planning time and the predicted cost of each plan.

For each instance: an EmbeddingBagCollection of its tables on the meta device, one TorchRec `Topology` (the
instance's world, local world, HBM and DDR per rank, compute device cuda, its profile's bandwidths), one
`ParameterConstraints` per table carrying its pooling factor, and one HBM reservation (`--reservation`, default 0:
the suites' device memory is already the tables' budget); both planners plan that module with the same sharder.
Both plans are costed by the analytic model on the instance ShardoptPlanner built (simulated: the judge is the
analytic model, not a GPU), and TorchRec's plan is also rated by TorchRec's own estimate of its slowest rank.

    .venv/bin/python benchmarks/bench_shardopt_planner.py --instances 'instances/suites/dreamshard-test/*-000[0-3].json' \\
        --solver neuroshard --out benchmarks/results/shardopt-planner.jsonl
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import time
import warnings
from pathlib import Path

import torch


def compare(path: str, solver: str, time_limit: float | None, reservation: float) -> dict:
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner
    from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
    from torchrec.distributed.planner.types import (
        CustomTopologyData,
        HardwareConfig,
        KernelConfig,
        ParameterConstraints,
        PlannerError,
        TopologyFactory,
        TrainerConfig,
    )

    from costmodels.registry import get_cost_model
    from shardopt.core.ir import load_instance
    from shardopt.data.torchrec_io import (
        apply_optimizer,
        embedding_bag_configs,
        from_torchrec_plan,
        per_rank_batch,
        topology_bandwidths,
    )
    from shardopt.torchrec import ShardoptPlanner

    inst = load_instance(path)
    topo = inst.topology
    caps, ddr = topo.capacities(), topo.host_capacities()
    extra = {"custom_topology_data": CustomTopologyData(data={"hbm_cap": list(caps), "ddr_cap": list(ddr)}, world_size=topo.num_devices)}
    topology = TopologyFactory.create_topology(
        trainer_config=TrainerConfig(world_size=topo.num_devices, local_world_size=topo.devices_per_host, additional_params=extra),
        hardware_config=HardwareConfig(hbm_cap_bytes=min(caps), ddr_cap_bytes=max(1, min(ddr)), **topology_bandwidths(topo)),
        kernel_config=KernelConfig(compute_device="cuda", use_hardware_based_bandwidth=True))
    batch = per_rank_batch(inst)
    constraints = {t.name: ParameterConstraints(pooling_factors=[t.pooling_factor]) for t in inst.tables}

    def module() -> EmbeddingBagCollection:
        ebc = EmbeddingBagCollection(tables=embedding_bag_configs(inst), device=torch.device("meta"))
        apply_optimizer(inst, ebc)
        return ebc

    sharders = [EmbeddingBagCollectionSharder()]
    t0 = time.perf_counter()
    theirs = EmbeddingShardingPlanner(topology=topology, batch_size=batch, constraints=constraints,
                                      storage_reservation=FixedPercentageStorageReservation(reservation))
    try:
        torchrec_plan = theirs.plan(module(), sharders)
    except PlannerError as exc:  # (its storage model can find no plan where ours does: recorded, not fatal)
        torchrec_plan, refused = None, str(exc).splitlines()[0][:200]
    torchrec_s = time.perf_counter() - t0
    ours = ShardoptPlanner(topology, batch_size=batch, constraints=constraints, solver=solver, cost_model="analytic",
                           hardware=topo.hardware, time_limit=time_limit, seed=0, storage_reservation=reservation)
    t0 = time.perf_counter()
    ours.plan(module(), sharders)
    shardopt_s = time.perf_counter() - t0
    planned = ours.last["instance"]  # (the same tables and topology, HBM less the planners' shared 15 % reservation)
    bm = get_cost_model("analytic").bind(planned)
    theirs_cost = float(bm.plan_costs(from_torchrec_plan(planned, torchrec_plan)).max_cost) if torchrec_plan is not None else None
    best = getattr(theirs, "_best_plan", None) if torchrec_plan is not None else None
    torchrec_estimate = None
    if best:
        per_rank: dict[int, float] = {}
        for so in best:
            for sh in so.shards:
                if sh.rank is not None and sh.perf is not None:
                    per_rank[sh.rank] = per_rank.get(sh.rank, 0.0) + float(sh.perf.total)
        torchrec_estimate = max(per_rank.values()) if per_rank else None
    return {"instance": Path(path).name, "tables": len(inst.tables), "devices": topo.num_devices, "solver": solver,
            "torchrec_planner_s": round(torchrec_s, 3), "shardopt_planner_s": round(shardopt_s, 3),
            "torchrec_plan_ms_sim": theirs_cost, "shardopt_plan_ms_sim": ours.last["predicted_ms"],
            "torchrec_own_estimate_ms": torchrec_estimate, "reservation": reservation, "shardopt_status": ours.last["status"], "shardopt_stopped": ours.last["stopped"],
            **({"torchrec_refused": refused} if torchrec_plan is None else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", action="append", required=True, help="glob of instance files (repeatable)")
    ap.add_argument("--solver", default="neuroshard")
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--reservation", type=float, default=0.0,
                    help="HBM share both planners keep back (TorchRec's FixedPercentageStorageReservation; the suites' memory is already the tables' budget)")
    ap.add_argument("--out", type=Path, default=None, help="append the rows (JSON lines) here too")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    files = [f for g in args.instances for f in sorted(glob.glob(g)) if not f.endswith("suite.json")]
    for f in files:
        row = compare(f, args.solver, args.time_limit, args.reservation)
        print(json.dumps(row), flush=True)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
