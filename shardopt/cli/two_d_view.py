"""A 2D solve as the user reads it: the group sizes tried, as a table, and the chosen size's cost in words."""

from __future__ import annotations

from typing import Any

from shardopt.cli.common import _esc, _fmt_ms
from shardopt.core.ir import Instance
from solvers.results import TwoDChoice


def group_size_table(choice: TwoDChoice) -> Any:
    """One row per (group size, solver) tried: embedding, sync and their total per iteration, the chosen one bold."""
    from rich.table import Table

    table = Table(title="sharding group sizes tried (ms per iteration)", title_justify="left")
    for head, right in (("G", True), ("solver", False), ("status", False), ("embedding", True), ("sync", True),
                        ("total", True), ("s", True), ("why not", False)):
        table.add_column(head, justify="right" if right else "left", overflow="fold", max_width=None if head != "why not" else 60)
    for t in choice.trials:
        has = t.embedding_ms is not None
        row = [str(t.group_size), t.solver or "-", t.status, _fmt_ms(t.embedding_ms) if has else "-",
               _fmt_ms(t.sync_ms) if has else "-", _fmt_ms(t.total_ms) if has else "-", f"{t.wall_s:.2f}", _esc(t.why or "")]
        chosen = t.group_size == choice.group_size and t.refined
        table.add_row(*row, style="bold" if chosen else None)
    return table


def two_d_setting(job: Instance, choice: TwoDChoice) -> str:
    """The chosen group as DMPCollection's arguments."""
    assert job.two_d is not None and choice.group_size is not None
    args = job.two_d.dmp_collection_args(choice.group_size, job.topology.num_devices)
    return "DMPCollection: " + ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in args.items())


def draw_group_size_curve(plan_two_d: dict[str, Any], out: Any) -> None:
    """A 2D plan's sizes tried (`params.two_d.group_sizes`) as curves over G: embedding, sync and their total, the
    scout's and the refined plans apart, the chosen size marked (an SVG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = plan_two_d.get("group_sizes") or []
    fig, ax = plt.subplots(figsize=(8, 5))
    for refined, style, label in ((False, "--", "scout"), (True, "-", "refined")):
        part = sorted((r for r in rows if r["refined"] is refined), key=lambda r: r["group_size"])
        if not part:
            continue
        g = [r["group_size"] for r in part]
        ax.plot(g, [r["embedding_ms"] + r["sync_ms"] for r in part], style, marker="o", color="#4c72b0", label=f"total ({label})")
        ax.plot(g, [r["embedding_ms"] for r in part], style, marker=".", color="#55a868", label=f"embedding ({label})")
        ax.plot(g, [r["sync_ms"] for r in part], style, marker=".", color="#c44e52", label=f"replica sync ({label})")
    chosen = plan_two_d.get("sharding_group_size")
    if chosen is not None:
        ax.axvline(chosen, color="#888888", linewidth=1)
        ax.annotate(f"chosen G = {chosen}", (chosen, ax.get_ylim()[1]), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sharding group size G (ranks)")
    ax.set_ylabel("ms per iteration")
    ax.set_title(f"2D: cost per group size (world {plan_two_d.get('world_size')}, sync every {plan_two_d.get('sync_interval')})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, format="svg")
    plt.close(fig)
