"""ShardoptPlanner's plan and TorchRec's planner's, each judged by both models and on the cpu judge (issue 'user').

Why three referees: each planner's plan wins under its own model, so a claim that one plan is better must hold under
shardopt's analytic model (sim), under TorchRec's own estimators (`solvers.torchrec_estimate.torchrec_rating`: the
rating TorchRec's partitioner minimises), and on measured fbgemm kernels (cpu, a paired interleaved comparison with a
95 % CI). For each instance:
- ours: what ShardoptPlanner plans - `neuroshard` (the default solver, its default budget) with the analytic model on
  the instance carrying TorchRec's form (constraints.torchrec, even column widths);
- theirs: TorchRec's EmbeddingShardingPlanner (the `torchrec` solver: its default proposers and partitioner), for
  the compute device the instance names (cpu for a cpu-profile instance, else cuda);
- both priced by the analytic model and by TorchRec's estimators; planning time of each;
- with --cpu, the cpu judge: on the instance itself where it is CPU-sized (`--cpu-max-rows`), else on a copy made by
  `shardopt scale` (batch, rows and memory scaled, hardware cpu) that both planners plan again, so the judge times what
  each planner optimised.
`--user-model` adds the 8-table DLRM-like model of tests/test_torchrec_user_model.py on 4 CPU ranks, and times
ShardoptPlanner.plan() with every solver of the catalog on it.

    .venv/bin/python benchmarks/bench_torchrec_referees.py --user-model --cpu \\
        --instances 'instances/suites/dreamshard-test/*-000[0-3].json' --instances 'instances/suites/neuroshard-test/*-000[0-3].json' \\
        --out benchmarks/results/torchrec-referees.jsonl
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def with_form(instance: Any) -> Any:
    from shardopt.core.ir import PlacementConstraints, TorchRecForm

    c = instance.constraints or PlacementConstraints()
    return instance.model_copy(update={"constraints": c.model_copy(update={"torchrec": TorchRecForm(even_columns=True)})})


def without_form(instance: Any) -> Any:
    c = instance.constraints
    return instance if c is None else instance.model_copy(update={"constraints": c.model_copy(update={"torchrec": None})})


def plan_both(instance: Any, seed: int) -> dict[str, Any]:
    """(ours, theirs) results on `instance`, with their planning times."""
    from costmodels.analytic import AnalyticCostModel
    from solvers.catalog import get_solver

    cm = AnalyticCostModel()
    device = "cpu" if instance.topology.hardware == "cpu" else "cuda"
    t0 = time.perf_counter()
    ours = get_solver("neuroshard").solve(with_form(instance), cm, seed=seed)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = get_solver("torchrec", compute_device=device).solve(without_form(instance), cm, seed=seed)
    theirs_s = time.perf_counter() - t0
    return {"ours": ours, "theirs": theirs, "ours_s": ours_s, "theirs_s": theirs_s, "device": device}


def referee(instance: Any, got: dict[str, Any]) -> dict[str, Any]:
    """Both plans under the analytic model and TorchRec's estimators."""
    from costmodels.analytic import AnalyticCostModel
    from solvers.torchrec_estimate import NotRatable, torchrec_rating

    bm = AnalyticCostModel().bind(without_form(instance))
    row: dict[str, Any] = {}
    for who in ("ours", "theirs"):
        r = got[who]
        if r.plan is None:
            row[f"{who}_status"] = f"{r.status.value}: {r.reason}"[:300]
            continue
        row[f"{who}_sim_ms"] = float(bm.plan_costs(r.plan.shards).max_cost)
        try:
            row[f"{who}_torchrec_ms"] = torchrec_rating(without_form(instance), r.plan, got["device"])["torchrec_perf_rating_ms"]
        except NotRatable as exc:
            row[f"{who}_torchrec_ms"] = None
            row[f"{who}_torchrec_note"] = str(exc)[:300]
    row["ours_plan_s"], row["theirs_plan_s"] = round(got["ours_s"], 3), round(got["theirs_s"], 3)
    return row


def cpu_judged(instance: Any, planned: dict[str, Any], seed: int, max_rows: int, batch: int, time_cap: float) -> dict[str, Any]:
    """The cpu judge's paired comparison (theirs first) on the instance or a scaled copy planned again by both."""
    from shardopt.data.scale import scale_instance
    from shardopt.measure.compare import compare_plans

    judged = instance
    scaled = max(t.rows for t in instance.tables) > max_rows or instance.topology.hardware != "cpu"
    if scaled:
        judged = scale_instance(instance, batch_size=min(batch, instance.workload.batch_size), max_rows=max_rows, memory="scale", hardware="cpu")
    got = plan_both(judged, seed) if scaled else planned
    ours, theirs = got["ours"], got["theirs"]
    if ours.plan is None or theirs.plan is None:
        return {"cpu": "a planner found no plan on the judged instance"}
    rep = compare_plans(without_form(judged), [theirs.plan, ours.plan], ["torchrec", "shardopt"], backend="cpu", time_cap_s=time_cap, seed=seed)
    c = rep.comparisons[0].to_dict()
    return {"cpu_instance": "scaled copy" if scaled else "as is", "cpu_batch": judged.workload.batch_size,
            "cpu_max_rows": max(t.rows for t in judged.tables), "cpu_torchrec_ms": rep.plans[0].cost_ms,
            "cpu_shardopt_ms": rep.plans[1].cost_ms, "cpu_comparison": c, "cpu_rounds": rep.rounds, "cpu_judge": rep.judge}


def user_model_instance() -> Any:
    from test_torchrec_user_model import LOCAL_BATCH, user_constraints, user_model, user_sharders, user_topology

    from shardopt.torchrec.planner import tables_of

    return tables_of(user_model("meta", sequence=False), user_sharders(), user_topology(), LOCAL_BATCH, user_constraints(cuts=False), "cpu").instance


def user_model_plan_times(repeats: int) -> list[dict[str, Any]]:
    """ShardoptPlanner.plan() per catalog solver on the user model (median of `repeats`), and TorchRec's planner's."""
    from test_torchrec_user_model import LOCAL_BATCH, user_constraints, user_model, user_sharders, user_topology
    from torchrec.distributed.planner import EmbeddingShardingPlanner

    from shardopt.torchrec import ShardoptPlanner
    from solvers.catalog import solver_names

    rows = []
    model, sharders = user_model("meta", sequence=False), user_sharders()
    for name in solver_names():
        cost_model = "calibrated-cpu-epyc-f25m17" if name == "milp_exact_neural" else "auto"
        planner = ShardoptPlanner(user_topology(), LOCAL_BATCH, constraints=user_constraints(cuts=False), solver=name, cost_model=cost_model)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            planner.plan(model, sharders)
            times.append(time.perf_counter() - t0)
        rows.append({"solver": name, "plan_s_median": round(statistics.median(times), 3), "plan_s_min": round(min(times), 3),
                     "predicted_ms": planner.last["predicted_ms"], "cost_model": planner.last["cost_model"], "stopped": planner.last["stopped"]})
    theirs = EmbeddingShardingPlanner(user_topology(), LOCAL_BATCH, constraints=user_constraints(cuts=False), debug=False)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        theirs.plan(model, sharders)
        times.append(time.perf_counter() - t0)
    rows.append({"solver": "TorchRec EmbeddingShardingPlanner", "plan_s_median": round(statistics.median(times), 3), "plan_s_min": round(min(times), 3)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", action="append", default=[], help="glob of instance files (repeatable)")
    ap.add_argument("--user-model", action="store_true", help="the 8-table user model too, and plan() times per solver on it")
    ap.add_argument("--cpu", action="store_true", help="also the cpu judge (a paired comparison, 95 % CI)")
    ap.add_argument("--cpu-max-rows", type=int, default=200_000, help="rows above which the cpu judge times a scaled copy")
    ap.add_argument("--cpu-batch", type=int, default=4096, help="the scaled copy's global batch")
    ap.add_argument("--time-cap", type=float, default=60.0, help="seconds of cpu timing per comparison")
    ap.add_argument("--repeats", type=int, default=5, help="plan() timings per solver on the user model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="append the rows (JSON lines) here too")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    import torch

    from shardopt.core.ir import load_instance

    torch.set_num_threads(1)
    todo: list[tuple[str, Any]] = []
    if args.user_model:
        todo.append(("user-model-8x4", user_model_instance()))
    todo += [(Path(f).stem, load_instance(f)) for g in args.instances for f in sorted(glob.glob(g)) if not f.endswith("suite.json")]

    def emit(row: dict[str, Any]) -> None:
        print(json.dumps(row), flush=True)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")

    date = time.strftime("%Y-%m-%d")
    for name, inst in todo:
        row = {"instance": name, "tables": len(inst.tables), "devices": inst.topology.num_devices, "hardware": inst.topology.hardware, "date": date}
        planned = plan_both(inst, args.seed)
        row.update(referee(inst, planned))
        if args.cpu:
            row.update(cpu_judged(inst, planned, args.seed, args.cpu_max_rows, args.cpu_batch, args.time_cap))
        emit(row)
    if args.user_model:
        for r in user_model_plan_times(args.repeats):
            emit({"plan_time": "user-model-8x4", "date": date, **r})


if __name__ == "__main__":
    main()
