"""The RL solvers against the heuristics: mean plan cost per suite and per instance shape (tables x devices), the
transfer result (a policy trained on one shape judged on another), and inference time.

Every plan is judged by the analytic model (simulated ms), the model the solvers also search with here.

    .venv/bin/python benchmarks/bench_rl.py instances/suites/dreamshard-test instances/suites/autoshard-test \
        --solvers dreamshard,autoshard,greedy,lookup,size_lookup \
        --variant dreamshard-50x4=dreamshard:checkpoint=solvers/checkpoints/dreamshard-50x4.npz --timing

`--variant LABEL=SOLVER[:key=value...]` adds a solver with options (a checkpoint, `samples=0` for the greedy rollout
alone). `--greedy-safe` adds the ablation `greedy+safe-mask`: the cost-model greedy's device rule (lowest predicted
plan cost after the move, ties by the device's own cost) run through the RL solvers' driver, i.e. with their table
order and safe memory mask, to show what the learning adds beyond the mask. `--shape TxD` keeps only instances of that shape (repeatable). `--timing` also times one 100 x 8 and one
856 x 128 solve of each RL solver (median of `--repeats`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402
from solvers.rl.common import NumpyPolicy, PolicySolver  # noqa: E402


class _GreedyRule(NumpyPolicy):
    algo = "greedy-rule"

    def step(self, state, ob):  # lowest plan cost after the move, then lowest own cost, then lowest index
        return -(ob.dev[..., 7] * 1e6 + ob.dev[..., 5]), None, None


class GreedySafeSolver(PolicySolver):
    name = "greedy+safe-mask"
    algo = "greedy-rule"

    def __init__(self) -> None:
        super().__init__(samples=0)
        self._policy = _GreedyRule({}, {"algo": "greedy-rule"})

    def params(self) -> dict:
        return {"layout": "table-wise", "rule": "greedy", "safe_mask": True}


def make_solver(name: str, **options):
    return GreedySafeSolver() if name == "greedy+safe-mask" else get_solver(name, **options)


def parse_variant(text: str) -> tuple[str, str, dict]:
    label, _, spec = text.partition("=")
    name, *opts = spec.split(":")
    options: dict = {}
    for o in opts:
        k, _, v = o.partition("=")
        options[k] = int(v) if v.isdigit() else v
    return label, name, options


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suites", nargs="*", type=Path, default=[ROOT / "instances" / "suites" / s for s in ("dreamshard-test", "autoshard-test")])
    ap.add_argument("--solvers", default="dreamshard,autoshard,greedy,lookup,size_lookup")
    ap.add_argument("--variant", action="append", default=[], help="LABEL=SOLVER[:key=value...]")
    ap.add_argument("--shape", action="append", default=[], help="TABLESxDEVICES: only instances of this shape")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--greedy-safe", action="store_true", help="add the greedy+safe-mask ablation")
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    solvers = [(n, n, {}) for n in args.solvers.split(",") if n] + [parse_variant(v) for v in args.variant]
    if args.greedy_safe:
        solvers.append(("greedy+safe-mask", "greedy+safe-mask", {}))
    shapes = {tuple(int(x) for x in s.lower().split("x")) for s in args.shape}
    model = get_cost_model("analytic")
    report: list[dict] = []
    for suite in args.suites:
        files = sorted(p for p in suite.glob("*.json") if p.name != "suite.json")
        rows: list[tuple[tuple[int, int], dict[str, float | None], dict[str, float]]] = []
        for f in files:
            inst = load_instance(f)
            shape = (len(inst.tables), inst.topology.num_devices)
            if shapes and shape not in shapes:
                continue
            costs, times = {}, {}
            for label, name, opts in solvers:
                solver = make_solver(name, **opts)
                r = solver.solve(inst, model, seed=args.seed)
                costs[label] = r.predicted_cost if r.status.has_plan else None
                times[label] = r.wall_time_s
            rows.append((shape, costs, times))
        groups: dict[str, list] = defaultdict(list)
        for shape, costs, times in rows:
            groups["all"].append((costs, times))
            groups[f"{shape[0]}x{shape[1]}"].append((costs, times))
        for group, items in groups.items():
            best = [min((c for c in costs.values() if c is not None), default=None) for costs, _ in items]
            print(f"\n{suite.name} [{group}]: {len(items)} instances (analytic judge, simulated ms)")
            print(f"{'solver':<22} {'mean cost':>10} {'vs best':>8} {'failed':>7} {'mean s':>8}")
            for label, _, _ in solvers:
                ok = [(c[label], b) for (c, _), b in zip(items, best) if c[label] is not None and b]
                mean = statistics.mean(c for c, _ in ok) if ok else float("nan")
                ratio = statistics.mean(c / b for c, b in ok) if ok else float("nan")
                failed = sum(c[label] is None for c, _ in items)
                secs = statistics.mean(t[label] for _, t in items)
                report.append({"suite": suite.name, "shape": group, "solver": label, "instances": len(items), "mean_cost_ms": mean,
                               "mean_ratio_to_best": ratio, "failed": failed, "mean_solve_s": secs})
                print(f"{label:<22} {mean:>10.3f} {ratio:>8.3f} {failed:>7d} {secs:>8.3f}")
    if args.timing:
        cases = [("100x8", ROOT / "instances" / "suites" / "dreamshard-test" / "dreamshard-test-s1-0003.json"), ("856x128", ROOT / "instances" / "examples" / "large.json")]
        print("\ninference time (median of repeats, s; the policy file is loaded before the clock starts)")
        for label, name, opts in solvers:
            if name not in ("dreamshard", "autoshard"):
                continue
            for case, path in cases:
                inst = load_instance(path)
                solver = get_solver(name, **opts)
                solver.solve(inst, model, seed=args.seed)  # warm: load the checkpoint
                walls = []
                for _ in range(args.repeats if case == "100x8" else max(1, args.repeats // 2)):
                    t0 = time.perf_counter()
                    solver.solve(inst, model, seed=args.seed)
                    walls.append(time.perf_counter() - t0)
                med = statistics.median(walls)
                report.append({"timing": case, "solver": label, "median_s": med, "repeats": len(walls)})
                print(f"{label:<22} {case:>8} {med:>8.3f} s")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
