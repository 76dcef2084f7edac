"""Errors a caller of the solvers may need to tell apart, in a leaf module so that any solver can raise them without
importing the catalog that imports it."""

from __future__ import annotations

from shardopt.core.errors import UserError


class UnknownSolverError(UserError, KeyError):
    """A solver name the catalog does not have, or a solver whose optional extra is missing: bad input (exit 2)."""

    error_kind = "unknown_solver"

    def __init__(self, message: str, name: str):
        self.name = name
        super().__init__(message)

    def __str__(self) -> str:
        return self.args[0]
