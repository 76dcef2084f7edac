"""Leaderboard entries that are not one catalog solver: a portfolio whose plan is chosen among other solvers' plans
by measuring them (`pick`, what `shardopt solve --pick` does), with its capabilities as data.

Why a registry beside the solver catalog: such an entry has no `Solver` class (it needs a measurement backend, which
no solve has), yet the leaderboard must know what it is - which backends it needs, whether it runs per cost model,
which solvers it draws on - without comparing names in each place that meets one.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardopt.measure.pick import PICK_PORTFOLIO


@dataclass(frozen=True)
class PortfolioEntry:
    """An entry whose row is the measured-fastest plan among its portfolio's plans (each solver with the entry's cost
    model and with the analytic model; shardopt.measure.pick.portfolio_pairs)."""

    name: str
    description: str
    portfolio: tuple[str, ...]
    measured_only: bool = True  # its choice is made by measurement: an entry of the measured leaderboards only
    uses_cost_model: bool = True  # run once per cost model of the leaderboard
    takes_options: bool = False  # -O options for it (its solvers take their own)


PORTFOLIO_ENTRIES: dict[str, PortfolioEntry] = {
    "pick": PortfolioEntry("pick", "solve --pick's portfolio: its plans measured in a session of their own, the fastest kept",
                           PICK_PORTFOLIO),
}


def portfolio_entry(name: str) -> PortfolioEntry | None:
    """The portfolio entry of that name, or None for a catalog solver (or an unknown name: the catalog says so)."""
    return PORTFOLIO_ENTRIES.get(name)
