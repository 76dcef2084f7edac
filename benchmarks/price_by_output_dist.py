"""A plan priced by the analytic judge as it is (one all-to-all per sharding type, TorchRec's output dists) and as if
all its widths went through one all-to-all (the pricing the certified bound uses): how much of a plan's cost, and of
its gap to the bound, the per-type collectives make. Simulated (analytic model).

    .venv/bin/python benchmarks/price_by_output_dist.py instances/suites/production/production-all-s0-0000.json \\
        PLAN.json [PLAN.json ...]

A PLAN.json is a plan document (`shardopt solve --out`) or a JSON list of shards.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from costmodels.registry import get_cost_model
from shardopt.core.ir import Shard, load_instance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance")
    ap.add_argument("plans", nargs="+")
    args = ap.parse_args()
    inst = load_instance(args.instance)
    bm = get_cost_model("analytic").bind(inst)
    for path in args.plans:
        doc = json.load(open(path))
        shards = [Shard(**d) for d in (doc["shards"] if isinstance(doc, dict) else doc)]
        states, dists, extra = bm.background(shards)
        compute = bm.compute_costs(states).sum(axis=-1)
        per_type = compute + bm.dist_comm_totals(dists) + extra
        one = compute + bm.comm_totals(dists.sum(axis=0)) + extra
        used = [int(g) for g in np.flatnonzero(dists.sum(axis=1) > 0)]
        print(json.dumps({"plan": path, "per_type_ms": float(per_type.max()), "one_all_to_all_ms": float(one.max()),
                          "output_dists_used": used}))


if __name__ == "__main__":
    main()
