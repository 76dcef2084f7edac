"""The `shardopt` command: the root callback, every command group registered on `app`, and the entry point.

The command modules register their commands on `app` (shardopt.cli.common) when imported; this module imports
them all, so `shardopt.cli.main:main` is the console script and `python -m shardopt` runs it."""

from __future__ import annotations

from typing import Annotated

import typer

import shardopt.cli.compare  # noqa: E402,F401  (compare)
import shardopt.cli.evaluate  # noqa: E402,F401  (evaluate)
import shardopt.cli.info  # noqa: E402,F401  (solvers, schema)
import shardopt.cli.inspect  # noqa: E402,F401  (inspect)
import shardopt.cli.scale  # noqa: E402,F401  (scale)

# importing a command module registers its commands on `app`
import shardopt.cli.solve  # noqa: E402,F401  (solve)
from shardopt.cli.common import app
from solvers.catalog import DEFAULT_SOLVER


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"shardopt {version('shardopt')}")
        except PackageNotFoundError:
            typer.echo("shardopt (not installed)")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    """Embedding-table sharding as min-max partitioning: solve, judge and inspect plans."""


import shardopt.cli.bound  # noqa: E402,F401  (bound)
import shardopt.cli.calibrate  # noqa: E402,F401  (calibrate)
import shardopt.cli.costmodel  # noqa: E402,F401  (costmodel collect / train / eval / list)
import shardopt.cli.explain  # noqa: E402,F401  (explain)
import shardopt.cli.leaderboard  # noqa: E402,F401  (leaderboard run / report)
import shardopt.cli.profile  # noqa: E402,F401  (profile)
import shardopt.cli.rl  # noqa: E402,F401  (rl train)
import shardopt.cli.suites  # noqa: E402,F401  (generate, make-pool, import-dlrm)
import shardopt.cli.torchrec  # noqa: E402,F401  (export, import-torchrec)


def main(argv: list[str] | None = None) -> None:
    """Console entry point (`shardopt`, `python -m shardopt`)."""
    app(args=argv, prog_name="shardopt")


__all__ = ["DEFAULT_SOLVER", "app", "main"]

if __name__ == "__main__":
    main()
