"""Does the default plan fast on this machine? The default solve (`--cost-model auto`) and `solve --pick cpu` against
greedy and neuroshard searching with the analytic model, measured on the cpu judge (docs/measured.md, "Calibrated").

    python benchmarks/bench_calibrated.py SUITE_DIR [SUITE_DIR ...] [--time-limit 5] [--out FILE.json] [--models DIR]

Per instance, one paired, interleaved `compare` session (shardopt.measure.compare, the judge's default stopping
rule) of four plans: the default solve's (neuroshard with auto), --pick's (the portfolio greedy / neuroshard / cpsat
with auto and with analytic, size and random once, measured in its own sessions first: shardopt.measure.pick), greedy with analytic, neuroshard
with analytic. The default is compared with each baseline: "x % faster (95 % CI [l, u])". Also: which model auto
chose and why not, and whether --pick's plan was measured slower than any of its candidates in the final session.

Run it with nothing else on the machine (the cpu judge times one pinned thread; docs/measured.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodels.auto import choose_cost_model  # noqa: E402
from costmodels.registry import get_cost_model  # noqa: E402
from shardopt.cli.pick import pick, portfolio_candidates  # noqa: E402
from shardopt.core.fingerprint import cpu_fingerprint  # noqa: E402
from shardopt.core.ir import load_instance  # noqa: E402
from shardopt.measure.compare import compare_plans  # noqa: E402
from shardopt.measure.pick import PICK_PORTFOLIO  # noqa: E402
from solvers.catalog import get_solver  # noqa: E402


def one(path: Path, time_limit: float, models: Path | None) -> dict:
    inst = load_instance(path)
    choice = choose_cost_model("auto", inst, models)
    analytic = get_cost_model("analytic")
    t0 = time.perf_counter()
    plans = {
        "default (neuroshard, auto)": get_solver("neuroshard").solve(inst, choice.model, time_limit=time_limit, seed=0),
        "greedy, analytic": get_solver("greedy").solve(inst, analytic, time_limit=time_limit, seed=0),
        "neuroshard, analytic": get_solver("neuroshard").solve(inst, analytic, time_limit=time_limit, seed=0),
    }
    cands = portfolio_candidates(inst, choice, list(PICK_PORTFOLIO), None, time_limit, 0)
    winner, pick_report, notes = pick(inst, cands, "cpu", 0)
    plans[f"pick ({winner.name})"] = winner.result
    solve_s = time.perf_counter() - t0
    names = list(plans)
    report = compare_plans(inst, [plans[n].plan for n in names], names, "cpu", seed=1)
    measured = {p.name: {"ms": p.cost_ms, "ci": [p.interval.low, p.interval.high]} for p in report.plans}
    cmp = {c.other: {"faster_pct": c.faster_pct.estimate, "ci": [c.faster_pct.low, c.faster_pct.high], "verdict": c.verdict,
                     "sentence": c.sentence()} for c in report.comparisons}
    pick_name = names[3]
    pick_ms = measured[pick_name]["ms"]
    pick_cands = {p.name: p.cost_ms for p in pick_report.first.plans} if pick_report is not None else {}
    return {
        "instance": path.name, "batch": inst.workload.batch_size, "tables": len(inst.tables), "devices": inst.topology.num_devices,
        "auto": {"card": choice.card_id, "notice": choice.notice},
        "predicted_ms": {n: float(plans[n].predicted.max_cost) for n in names},
        "measured": measured, "default_vs": cmp,
        "pick": {"winner": winner.name, "its_session_ms": pick_cands, "notes": notes,
                 "how": pick_report.how() if pick_report is not None else "one distinct plan",
                 "default_kept_over": (pick_report.names[pick_report.default_kept_over]
                                       if pick_report is not None and pick_report.default_kept_over is not None else None),
                 "slower_than_a_baseline_here": [n for n in names[:3] if measured[n]["ms"] < pick_ms and
                                                  not (measured[n]["ci"][1] >= measured[pick_name]["ci"][0])]},
        "rounds": report.rounds, "solve_s": solve_s, "judge": report.judge,
    }


def summarise(rows: list[dict]) -> dict:
    """Per suite: on how many instances the default was measured faster / slower than each baseline with 95 %
    confidence (a comparison's `faster_pct` is how much faster the *baseline* is than the default: the default is
    faster where its whole interval lies below 0), the geometric mean of default / baseline measured cost, and how
    often --pick's plan was measured slower than a baseline beyond both CIs."""
    summary = {}
    for suite in sorted({r["suite"] for r in rows}):
        mine = [r for r in rows if r["suite"] == suite]
        s: dict = {"instances": len(mine), "auto used a calibrated model on": sum(r["auto"]["card"] is not None for r in mine)}
        for base in ("neuroshard, analytic", "greedy, analytic"):
            vs = [r["default_vs"][base] for r in mine]
            default = [r["measured"][next(k for k in r["measured"] if k.startswith("default"))]["ms"] for r in mine]
            ratios = [d / r["measured"][base]["ms"] for d, r in zip(default, mine)]
            s[f"default faster than {base} (95 % CI)"] = sum(v["ci"][1] < 0 for v in vs)
            s[f"default slower than {base} (95 % CI)"] = sum(v["ci"][0] > 0 for v in vs)
            s[f"geo mean default / {base}"] = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        pick_ratio = [r["measured"][next(k for k in r["measured"] if k.startswith("pick"))]["ms"]
                      / min(v["ms"] for k, v in r["measured"].items() if not k.startswith("pick")) for r in mine]
        s["geo mean pick / best other plan"] = math.exp(sum(math.log(x) for x in pick_ratio) / len(pick_ratio))
        s["pick measured slower than a baseline (CIs apart)"] = sum(bool(r["pick"]["slower_than_a_baseline_here"]) for r in mine)
        summary[suite] = s
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("suites", nargs="*", type=Path)
    ap.add_argument("--summary-of", type=Path, default=None, help="only summarise the rows of an earlier --out file")
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--models", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.summary_of is not None:
        doc = json.loads(args.summary_of.read_text())
        doc["summary"] = summarise(doc["rows"])
        print(json.dumps(doc["summary"], indent=1))
        if args.out:
            args.out.write_text(json.dumps(doc, indent=1) + "\n")
        return
    rows = []
    for suite in args.suites:
        for path in sorted(p for p in suite.glob("*.json") if p.name != "suite.json"):
            row = one(path, args.time_limit, args.models)
            row["suite"] = suite.name
            rows.append(row)
            d = row["default_vs"]
            print(f"{suite.name}/{path.name}: auto={row['auto']['card'] or 'analytic'} | "
                  + " | ".join(f"{k} vs the default: {v['faster_pct']:+.1f} % faster [{v['ci'][0]:+.1f}, {v['ci'][1]:+.1f}]"
                               for k, v in d.items()), flush=True)
    summary = summarise(rows)
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"command": "python " + " ".join(sys.argv), "date": datetime.date.today().isoformat(),
                                        "machine": cpu_fingerprint().describe(), "summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
