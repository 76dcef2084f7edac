"""The certified bound's plan-class LPs (solvers/bound/symmetric.py) solved by HiGHS's simplex (`solve_milp`) and by
its interior point (`solve_model_lp_ipm`): time and optimum of each, to choose the method `symmetric_lp_bound` uses
(the simplex for every class since 2026-11-29). Simulated
(analytic model); run on an otherwise idle machine, one instance at a time.

    .venv/bin/python benchmarks/bench_class_lp_methods.py instances/suites/production-xl/production-xl-all-s0-0000.json
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shardopt.core.ir import load_instance  # noqa: E402
from solvers.bound.context import AnalyticRelaxation  # noqa: E402
from solvers.bound.symmetric import COLUMN_CLASSES, build_symmetric_lp  # noqa: E402
from solvers.bound.table_cuts import table_cut_values  # noqa: E402
from solvers.milp import solve_milp, solve_model_lp_ipm  # noqa: E402


def main() -> None:
    for path in sys.argv[1:]:
        inst = load_instance(path)
        ctx = AnalyticRelaxation(inst)
        for t in range(len(inst.tables)):  # (the table cuts' values, computed once, out of the timings)
            table_cut_values(ctx, t, inst.topology.num_devices)
            table_cut_values(ctx, t, 1)
        total = {"simplex": 0.0, "ipm": 0.0}
        for name, table_wise, plans in [("any", False, "any"), *COLUMN_CLASSES]:
            for rows in ["any"] + (["none", "over_devices", "within_hosts"] if name == "table_wise" else []):
                m, z = build_symmetric_lp(ctx, table_wise, plans, None if name == "any" else True, rows)
                c = np.zeros(m.n_vars)
                c[z] = 1.0
                out = []
                for method in ("simplex", "ipm"):
                    start = time.perf_counter()
                    res = (solve_milp(m, c, time_limit=600, integrality=False) if method == "simplex"
                           else solve_model_lp_ipm(m, c, time_limit=600))
                    took = time.perf_counter() - start
                    total[method] += took
                    out.append(f"{method} {res.status.value} {res.objective} {took:.1f} s")
                print(f"{inst.name} {name} rows={rows}: " + " | ".join(out), flush=True)
        print(f"{inst.name} total: simplex {total['simplex']:.1f} s, interior point {total['ipm']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
