"""The certified bound's time and the gap to it of greedy, NeuroShard's default, NeuroShard and cpsat at a longer
limit (and TorchRec with --torchrec), per instance; each solver run in its own process under /usr/bin/time so its
wall time and peak memory are its own. Simulated (analytic judge). Rows as JSON lines on stdout.

    .venv/bin/python benchmarks/bench_bound_gaps.py INSTANCE.json [...] [--limit 60] [--bound-limit 60] [--torchrec]

Run it from a worktree of the commit to compare (`git worktree add /tmp/old COMMIT; cd /tmp/old; PYTHONPATH=. ...`)
for a before / after on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def _timed(cmd: list[str]) -> tuple[dict, float, float]:
    """(the command's --json document, wall s, peak resident GiB) of `cmd` run under /usr/bin/time -v."""
    out = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, check=False)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", out.stderr)
    seconds = (int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))) if wall else float("nan")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    gib = int(rss.group(1)) / 2**20 if rss else float("nan")
    try:
        doc = json.loads(out.stdout)
    except json.JSONDecodeError:
        doc = {"error": out.stderr[-500:]}
    return doc, seconds, gib


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="+")
    ap.add_argument("--limit", type=float, default=60.0, help="the longer limit of neuroshard and cpsat")
    ap.add_argument("--bound-limit", type=float, default=60.0)
    ap.add_argument("--torchrec", action="store_true", help="TorchRec's planner too (its default limit: 300 s)")
    args = ap.parse_args()
    py = [sys.executable, "-m", "shardopt"]
    for path in args.instances:
        doc, b_s, b_gib = _timed([*py, "bound", path, "--time-limit", str(args.bound_limit), "--json"])
        bound = doc.get("bound") or {}
        value = bound.get("value_ms")
        runs = [("greedy", []), ("neuroshard", []), (f"neuroshard {args.limit:g}s", ["--time-limit", str(args.limit)]),
                (f"cpsat {args.limit:g}s", ["--time-limit", str(args.limit)])] + ([("torchrec", [])] if args.torchrec else [])
        for label, extra in runs:
            with tempfile.TemporaryDirectory() as tmp:
                doc, wall, gib = _timed([*py, "solve", path, "--solver", label.split()[0], "-c", "analytic", *extra, "--json",
                                         "--out", os.path.join(tmp, "plan.json")])
            cost = (doc.get("predicted") or {}).get("max_cost_ms")
            gap = (cost - value) / cost if cost and value else None
            print(json.dumps({"instance": path, "solver": label, "cost_ms": cost, "wall_s": round(wall, 2), "peak_gib": round(gib, 3),
                              "bound_ms": value, "bound_status": bound.get("status"), "bound_source": bound.get("source"),
                              "bound_s": round(b_s, 2), "bound_peak_gib": round(b_gib, 3),
                              "gap": None if gap is None else round(gap, 5), "error": doc.get("error")}), flush=True)


if __name__ == "__main__":
    main()
