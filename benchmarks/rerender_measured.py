"""Re-render a measured leaderboard report from its committed rows (what `shardopt leaderboard report` writes from a
store, for a store that is not in the repository).

    .venv/bin/python benchmarks/rerender_measured.py ROWS.jsonl.gz --out docs --stem measured-leaderboard \
        --command "the command that made the rows"

ROWS: one JSON object per line, the `measured` table's columns (as committed under benchmarks/results/). Writes
STEM.md and STEM.html into --out: the same renderer as `shardopt leaderboard report` (HTML tables, matplotlib figures).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shardopt.leaderboard.measured import MEASURED_COLUMNS, build_measured_reports, write_measured_report  # noqa: E402


def read_rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    missing = [c for c in ("suite", "instance_file", "solver", "cost_model", "measured_ms") if rows and c not in rows[0]]
    if missing:
        raise SystemExit(f"{path}: rows lack the measured table's columns {missing}")
    return [{c: r.get(c) for c in MEASURED_COLUMNS} for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stem", default="measured-leaderboard")
    ap.add_argument("--command", default="", help="the command that made the rows (the page's 'Made by')")
    args = ap.parse_args()
    rows = read_rows(args.rows)
    made_by = (f"{args.command} (rows: {args.rows.relative_to(ROOT) if args.rows.is_relative_to(ROOT) else args.rows}; "
               f"rendered by benchmarks/rerender_measured.py)") if args.command else ""
    for p in write_measured_report(build_measured_reports(rows), args.out, made_by, stem=args.stem):
        print(p)


if __name__ == "__main__":
    main()
