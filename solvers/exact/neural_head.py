"""Exact neural mode (`milp_exact_neural`): the compute head of the neural cost model encoded exactly inside the
MILP, in place of the linearised compute terms.

Why a module of its own: it is the one part of the exact solvers that is not a linear model of a cost model but a
MILP encoding of a neural network (big-M rows per ReLU with bounds from enumerating the subsets of tables that fit,
softplus by tangent lines); it is a `_milp_rows` extension (milp.py) and is used only by the MILP backends, with the
neural cost model, on small instances (solver.py's check).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from costmodels.base import BoundCostModel
from costmodels.neural import BoundNeural
from shardopt.core.ir import Instance
from solvers.exact.formulation import Problem
from solvers.exact.milp import _Rows

SOFTPLUS_STEP = 0.15  # tangent spacing of the softplus under-approximation: error <= STEP^2 / 32 (+ 1e-5) ms
SOFTPLUS_RANGE = 12.0  # tangents at points in [-12, 12] (beyond, softplus is 0 or its argument to within 6e-6)

# the largest instance of exact neural mode (its catalog spec's max_tables / max_devices say the same: a test holds them equal)
EXACT_NEURAL_MAX_TABLES = 12
EXACT_NEURAL_MAX_DEVICES = 4


def exact_neural_refusal(solver: str, instance: Instance, bm: BoundCostModel) -> str | None:
    """Why exact neural mode cannot take this instance or cost model (None: it can): the head's ReLUs cost up to 192
    binaries per device, and only the neural model has a head to encode (told apart by its type)."""
    T, D = len(instance.tables), instance.topology.num_devices
    if T > EXACT_NEURAL_MAX_TABLES or D > EXACT_NEURAL_MAX_DEVICES:
        return (
            f"{solver}: exact neural mode is for small instances only (at most {EXACT_NEURAL_MAX_TABLES} tables on "
            f"at most {EXACT_NEURAL_MAX_DEVICES} devices: the head's ReLUs cost up to 192 binaries per device); this "
            f"instance has {T} tables on {D} devices. Use milp / cpsat (linearised) instead."
        )
    if not (isinstance(bm, BoundNeural) and bm.w.layers("head")):
        return f"{solver}: exact neural mode needs the neural cost model (--cost-model neural or a MODEL.npz), not {type(bm).__name__}"
    return None


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def softplus_tangents(lo: float, hi: float, step: float = SOFTPLUS_STEP) -> np.ndarray:
    """Tangent points whose lines' max under-approximates softplus on [lo, hi] within step^2 / 32 (softplus'' <=
    1/4, so between two tangents `step` apart the gap is at most step^2 / 32) plus 1e-5 outside [-12, 12]."""
    a, b = max(lo, -SOFTPLUS_RANGE), min(hi, SOFTPLUS_RANGE)
    pts = list(np.linspace(a, b, max(2, int(math.ceil((b - a) / step)) + 1))) if b > a else []
    pts += [lo, hi]
    return np.unique(np.array(pts, dtype=np.float64))


def softplus_error(step: float = SOFTPLUS_STEP) -> float:
    return step * step / 32.0 + 1e-5


def _widen(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A hair of slack on enumerated bounds (float summation order differs between the enumeration and a solver)."""
    pad = 1e-9 * (1.0 + np.maximum(np.abs(lo), np.abs(hi)))
    return lo - pad, hi + pad


def _subsets_that_fit(sizes: np.ndarray, cap: int) -> np.ndarray:
    """[S, n] 0/1 rows: every subset of n tables (n <= EXACT_NEURAL_MAX_TABLES) whose bytes fit in `cap`."""
    n = len(sizes)
    masks = ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)
    return masks[masks @ sizes.astype(np.float64) <= cap]

def neural_head_extra(bm: BoundCostModel, prob: Problem) -> tuple[Any, dict[str, Any]]:
    """A `_milp_rows` extension that adds each device's exact neural compute cost c_d and the rows z >= m_d + c_d.

    The neural compute model (costmodels.neural) pools a device's tables by summing their encodings e_t (the state,
    shard count last), then runs a ReLU MLP head and a softplus per output (fwd, bwd ms). With x[t, d] binary the
    first layer's pre-activations are linear in x: a1 = b1 + sum_t (e_t W1) x[t, d]. Each ReLU unit becomes
    h >= a, h >= 0, h <= a - lo (1 - s), h <= hi s with a binary s and [lo, hi] the unit's range over the possible
    pooled states (every subset of the tables that fit on d); units whose range is one-signed need no
    binary (always off: dropped; always on: h = a). The bounds are exact: a forward pass over every subset of the
tables that fits in the device's memory (at most 2^12 of them). The second layer likewise.
    Softplus is convex and only bounded below here (z is minimised), so its epigraph is the max of tangent lines:
    an under-approximation within softplus_error() ms per output. An empty device computes nothing:
    c_d >= fwd + bwd - M (1 - y_d), c_d >= 0."""
    layers = bm.w.layers("head")  # type: ignore[attr-defined]
    if len(layers) != 3:
        raise ValueError(f"exact neural mode encodes a head of 3 layers; this model has {len(layers)}")
    E = np.asarray(bm.table_states, dtype=np.float64)  # [T, E + 1]
    stats = {"relu_binaries": 0, "relu_linear": 0, "relu_off": 0, "tangents": 0, "softplus_error_ms": softplus_error()}

    def extend(rows: _Rows, b: dict[str, Any]) -> tuple[_Rows, dict[str, Any]]:
        head = _HeadEncoding(rows, b, prob, layers, E, stats)
        for d in range(prob.num_devices):
            head.encode_device(d)
        return rows, head.bounds()

    return extend, stats


class _HeadEncoding:
    """The head's columns and rows added to one `_milp_rows` model, device by device, and what the hint needs to
    fill the new columns in (`plan`: per device, the columns of each unit and output)."""

    def __init__(self, rows: _Rows, b: dict[str, Any], prob: Problem, layers: list, E: np.ndarray, stats: dict[str, Any]):
        self.rows, self.b, self.prob, self.E, self.stats = rows, b, prob, E, stats
        (self.W1, self.b1), (self.W2, self.b2), (self.W3, self.b3) = layers
        self.lo_b, self.hi_b = list(b["lo"]), list(b["hi"])
        self.integer = list(np.asarray(b.get("integer", []), dtype=int))
        self.hi_b[b["Z"]] = np.inf  # the linear model's cutoff does not apply to this model
        self.plan: list[dict[str, Any]] = []  # per device: what the hint needs to fill the new columns in

    def new_var(self, lo: float, hi: float, is_int: bool = False) -> int:
        j = self.rows.n_vars
        self.rows.n_vars += 1
        self.lo_b.append(lo)
        self.hi_b.append(hi)
        if is_int:
            self.integer.append(j)
        return j

    def relu_layer(self, cols: np.ndarray, coef: np.ndarray, bias: np.ndarray, lo: np.ndarray, hi: np.ndarray, rec: list) -> list[int | None]:
        """Units j: a_j = bias_j + coef[:, j] . cols. Returns per unit: its column, or None (always 0)."""
        rows, stats = self.rows, self.stats
        out: list[int | None] = []
        for j in range(len(bias)):
            c = coef[:, j]
            keep = c != 0
            cc, cv = cols[keep], c[keep]
            if hi[j] <= 0:
                out.append(None)
                stats["relu_off"] += 1
                rec.append(("off",))
                continue
            h = self.new_var(0.0, float(hi[j]))
            if lo[j] >= 0:  # h = a
                rows.add(np.append(cc, h), np.append(-cv, 1.0), float(bias[j]), float(bias[j]))
                stats["relu_linear"] += 1
                rec.append(("lin", h))
            else:
                sv = self.new_var(0.0, 1.0, True)
                rows.add(np.append(cc, h), np.append(-cv, 1.0), float(bias[j]), np.inf)  # h >= a
                rows.add(np.concatenate([cc, [h, sv]]), np.concatenate([-cv, [1.0, -float(lo[j])]]), -np.inf, float(bias[j] - lo[j]))
                rows.add(np.array([h, sv]), np.array([1.0, -float(hi[j])]), -np.inf, 0.0)  # h <= hi s
                stats["relu_binaries"] += 1
                rec.append(("bin", h, sv))
            out.append(h)
        return out

    def softplus_outputs(self, cols2: np.ndarray, W3a: np.ndarray, O: np.ndarray, rec: dict[str, Any]) -> tuple[list[int], float]:
        """A column per output, above the softplus's tangents over the output's range in `O` [S, outputs]. Returns
        (the columns, the sum of the softplus's maxima)."""
        sp_cols, sp_max = [], 0.0
        for m_out in range(self.W3.shape[1]):
            w = W3a[:, m_out]
            olo, ohi = (float(v) for v in _widen(O[:, m_out].min(), O[:, m_out].max()))
            sp = self.new_var(0.0, float(_softplus(np.array(ohi))) + 1.0)
            for p in softplus_tangents(olo, ohi):  # sp >= softplus(p) + sigmoid(p) (o - p)
                g = float(_sigmoid(np.array(p)))
                self.rows.add(np.append(cols2, sp), np.append(-g * w, 1.0), float(_softplus(np.array(p)) + g * (self.b3[m_out] - p)), np.inf)
                self.stats["tangents"] += 1
            sp_cols.append(sp)
            sp_max += float(_softplus(np.array(ohi)))
            rec["sp"].append((sp, w, float(self.b3[m_out]), olo, ohi))
        return sp_cols, sp_max

    def encode_device(self, d: int) -> None:
        """Device d's head: both ReLU layers, the softplus outputs, c_d (0 on an empty device) and z >= m_d + c_d."""
        rows, b, prob, W2, W3 = self.rows, self.b, self.prob, self.W2, self.W3
        pairs = rows.pairs
        idx = np.flatnonzero(pairs[:, 1] == d)
        ts = pairs[idx, 0]
        rec: dict[str, Any] = {"d": d, "l1": [], "l2": [], "sp": []}
        C1 = self.E[ts] @ self.W1  # [n, H1]
        # the bounds of every unit: exact, from a forward pass over every subset of the tables that fits on d
        # (empty included) -- the tightest big-Ms there are; interval arithmetic is far looser
        sub = _subsets_that_fit(prob.sizes[ts], int(prob.caps[d]))  # [S, n] 0/1
        A1 = sub @ C1 + self.b1  # [S, H1]
        lo1, hi1 = _widen(A1.min(axis=0), A1.max(axis=0))
        h1 = self.relu_layer(idx, C1, self.b1, lo1, hi1, rec["l1"])
        on1 = [j for j, c in enumerate(h1) if c is not None]
        cols1 = np.array([h1[j] for j in on1], dtype=np.int64)
        W2a = W2[on1] if on1 else np.zeros((0, W2.shape[1]))
        A2 = np.maximum(A1[:, on1], 0.0) @ W2a + self.b2  # [S, H2]
        lo2, hi2 = _widen(A2.min(axis=0), A2.max(axis=0))
        h2 = self.relu_layer(cols1, W2a, self.b2, lo2, hi2, rec["l2"])
        on2 = [k for k, c in enumerate(h2) if c is not None]
        cols2 = np.array([h2[k] for k in on2], dtype=np.int64)
        W3a = W3[on2] if on2 else np.zeros((0, W3.shape[1]))
        O = np.maximum(A2[:, on2], 0.0) @ W3a + self.b3  # [S, 2]
        self.stats["subsets"] = self.stats.get("subsets", 0) + len(sub)
        sp_cols, sp_max = self.softplus_outputs(cols2, W3a, O, rec)
        M = sp_max + 1.0
        cd = self.new_var(0.0, M)
        y = b["Y"] + d
        rows.add(np.array([cd, *sp_cols, y]), np.array([1.0, *([-1.0] * len(sp_cols)), -M]), -M, np.inf)
        rows.add(np.array([b["Z"], b["M"] + d, cd]), np.array([1.0, -1.0, -1.0]), 0.0, np.inf)
        rec.update(cd=cd, on1=on1, on2=on2)
        self.plan.append(rec)

    def hint(self, values: np.ndarray) -> np.ndarray:
        """The new columns' values at the hint plan: a forward pass of the head per device."""
        b, pairs, E = self.b, self.rows.pairs, self.E
        v = np.zeros(self.rows.n_vars)
        v[: len(values)] = values
        n = len(pairs)
        zmax = -np.inf
        for rec in self.plan:
            d = rec["d"]
            on = [j for j in range(n) if pairs[j, 1] == d and values[j] > 0.5]
            pooled = E[pairs[on, 0]].sum(axis=0) if on else np.zeros(E.shape[1])
            a1 = self.b1 + pooled @ self.W1
            _relu_hint(v, rec["l1"], a1)
            h1 = np.maximum(a1, 0.0)
            a2 = self.b2 + h1 @ self.W2
            _relu_hint(v, rec["l2"], a2)
            h2 = np.maximum(a2, 0.0)
            total = 0.0
            for sp, w, bias, olo, ohi in rec["sp"]:
                o = float(bias + h2[rec["on2"]] @ w)
                val = max(0.0, max(float(_softplus(np.array(p)) + _sigmoid(np.array(p)) * (o - p)) for p in softplus_tangents(olo, ohi)))
                v[sp] = val
                total += val
            v[rec["cd"]] = total if on else 0.0
            zmax = max(zmax, v[b["M"] + d] + v[rec["cd"]])
        v[b["Z"]] = zmax
        return v

    def bounds(self) -> dict[str, Any]:
        """The model's column bounds, integer columns and hint, with the head's columns."""
        return {**self.b, "lo": np.array(self.lo_b), "hi": np.array(self.hi_b), "integer": np.array(self.integer, dtype=np.int64), "hint": self.hint}


def _relu_hint(v: np.ndarray, units: list, a: np.ndarray) -> None:
    """A ReLU layer's columns at pre-activations `a`: h = max(a, 0), s = (a > 0)."""
    for j, r in enumerate(units):
        if r[0] != "off":
            v[r[1]] = max(a[j], 0.0)
            if r[0] == "bin":
                v[r[2]] = float(a[j] > 0)
