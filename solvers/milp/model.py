"""A sparse MILP in the form HiGHS takes (lo <= A x <= hi, lb <= x <= ub, some x integer), built row by row."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SparseModel:
    """Variables (bounds, integrality) and rows (coefficient triplets, bounds). Variables are added one at a time
    (`var`) or as a block whose bounds the caller sets later (`reserve`); rows from a mapping or pairs (`row`) or
    from arrays (`add`)."""

    n_vars: int = 0
    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    row_lo: list[float] = field(default_factory=list)
    row_hi: list[float] = field(default_factory=list)

    def var(self, lo: float, hi: float, integer: bool = False) -> int:
        self.lb.append(lo)
        self.ub.append(hi)
        self.integer.append(1 if integer else 0)
        self.n_vars += 1
        return self.n_vars - 1

    def reserve(self, count: int) -> int:
        """`count` more variables (bounds 0..inf, continuous until said otherwise); the index of the first."""
        first = self.n_vars
        self.lb.extend([0.0] * count)
        self.ub.extend([np.inf] * count)
        self.integer.extend([0] * count)
        self.n_vars += count
        return first

    def row(self, coefs: dict[int, float] | Iterable[tuple[int, float]], lo: float, hi: float) -> None:
        """One row lo <= sum coef x <= hi; zero coefficients are left out."""
        r = len(self.row_lo)
        items = coefs.items() if isinstance(coefs, dict) else coefs
        for c, v in items:
            if v != 0.0:
                self.rows.append(r)
                self.cols.append(c)
                self.vals.append(float(v))
        self.row_lo.append(lo)
        self.row_hi.append(hi)

    def add(self, cols: np.ndarray, vals: np.ndarray, lo: float, hi: float) -> None:
        """One row from arrays of columns and coefficients (kept as given, zeros included)."""
        r = len(self.row_lo)
        self.rows.extend([r] * len(cols))
        self.cols.extend(int(c) for c in cols)
        self.vals.extend(float(v) for v in vals)
        self.row_lo.append(lo)
        self.row_hi.append(hi)

    @property
    def n_rows(self) -> int:
        return len(self.row_lo)

    def matrix(self):  # -> scipy.sparse.csr_array
        from scipy.sparse import csr_array

        return csr_array((self.vals, (self.rows, self.cols)), shape=(self.n_rows, self.n_vars))
