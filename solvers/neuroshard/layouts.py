"""The default layout proposer of NeuroShard's tiered search (solvers.protocols.LayoutProposer): the tiered layouts
its seed (greedy) packed, rebuilt from the typed `TieredLayoutChoice` values greedy hands over, in the order they are
searched. Its own module, so that a caller can hand NeuroShardSolver another proposer (`layouts=`) and this one stays
the default (docs/architecture.md, "Seams")."""

from __future__ import annotations

from shardopt.core.ir import Instance
from solvers.placement.tiering import HEADROOM, TieredLayout, plan_tiers
from solvers.results import SolveResult, TieredLayoutChoice


def _to_host_of(instance: Instance, chosen: bool | tuple[str, ...]) -> bool | frozenset[int]:
    """A layout's `oversized_to_host` (a flag, or the names of the oversized tables greedy put in host memory) as
    plan_tiers' argument."""
    if isinstance(chosen, tuple):
        index = instance.table_index()
        return frozenset(index[name] for name in chosen)
    return bool(chosen)


def search_order(layouts: list[tuple[TieredLayoutChoice, TieredLayout]]) -> list[tuple[TieredLayoutChoice, TieredLayout]]:
    """`layouts` (cheapest packed first) with the cheapest one that splits the oversized tables the other way
    (within one host / over all devices) moved second: the two ways differ most (the old pair of searches)."""
    if len(layouts) < 3:
        return layouts
    other = next((i for i, (a, _) in enumerate(layouts) if a.within_host != layouts[0][0].within_host), None)
    if other is None or other == 1:
        return layouts
    return [layouts[0], layouts[other]] + [x for i, x in enumerate(layouts) if i not in (0, other)]


def tiered_layouts(instance: Instance, greedy: SolveResult) -> list[tuple[TieredLayoutChoice, TieredLayout]] | str:
    """The tiered layouts to search, each with what made it (greedy's `layouts`: row splits within a host or over all
    devices, lean, the tables retried row-wise, the tables sent to host memory whole, and the cost of greedy's plan in
    it), in greedy's order, cheapest packed plan first, distinct; where greedy packed none, the default layout (split
    within a host, else over all devices). A string: why no layout could be made."""
    index = instance.table_index()
    ranked = list(greedy.layouts) or [
        TieredLayoutChoice(within_host=w, lean=False, rowwise=(), oversized_to_host=False, cost=None, headroom=h)
        for h in (HEADROOM, 1.0) for w in (True, False)]  # (HEADROOM a preference: all of the HBM where nothing fits within it)
    out: list[tuple[TieredLayoutChoice, TieredLayout]] = []
    seen: set[tuple] = set()
    why = ""
    for about in ranked:
        layout = plan_tiers(instance, frozenset(index[n] for n in about.rowwise), lean=about.lean, within_host=about.within_host,
                            oversized_to_host=_to_host_of(instance, about.oversized_to_host), headroom=about.headroom)
        if isinstance(layout, str):
            why = why or layout
            continue
        if layout.key() in seen:
            continue
        seen.add(layout.key())
        out.append((about, layout))
        if about.cost is None:  # (greedy packed no layout: the first that can be made is the one)
            break
    return out or why
