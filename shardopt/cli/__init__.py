"""The `shardopt` command line, one module per command group (docs/architecture.md, "Errors and exits").

`common` holds what every command shares (errors and exit statuses, the console, JSON output, the guard, the table
renderers) and imports no command module; `main` imports every command module and is the entry point.
"""

from shardopt.cli.main import DEFAULT_SOLVER, app, main

__all__ = ["DEFAULT_SOLVER", "app", "main"]
