"""A torch batched embedding-bag kernel with the semantics of fbgemm's SplitTableBatchedEmbeddingBagsCodegen.

The `cuda` backend times fbgemm's fused TBE where fbgemm-gpu (with CUDA kernels) is installed. Where it is not —
this project's GPU machine has torch + CUDA + Triton but no fbgemm-gpu — it times this kernel instead, and every
result says so. It computes exactly what fbgemm's training TBE computes, with sum pooling:

* **forward**: for each table t and sample b, the sum of the looked-up rows; output [B, sum of dims] with the tables'
  columns in table order (fbgemm's layout), fp32 whatever the weight dtype (fbgemm's default output dtype).
* **backward + optimizer update** (fbgemm's fused backward): the sparse gradient of each looked-up row — the sum
  over the batch of the output gradients of the bags it was pooled into, coalesced over unique rows (never a dense
  gradient of the table) — then the optimizer update of those rows only, in place:

  - ``sgd`` (fbgemm's EXACT_SGD): ``w -= lr * g``
  - ``rowwise_adagrad`` (EXACT_ROWWISE_ADAGRAD): ``state += mean(g**2 over the row's columns)``;
    ``w -= lr * g / (sqrt(state) + eps)``; one fp32 accumulator per row.
  - ``adam`` (ADAM): fp32 moments ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g**2``, bias-corrected with the
    step count t (1 on the first update): ``w -= lr * (m / (1-b1**t)) / (sqrt(v / (1-b2**t)) + eps)``.

  Rows that no sample looked up keep their weights and their optimizer state. The update is computed in fp32 and
  written back in the weight dtype (round-to-nearest; fbgemm rounds fp16 stochastically by default).

How it is fused: all tables of one (dim, dtype) live in one weight matrix, one above the other, and one
``torch.nn.functional.embedding_bag(mode="sum")`` call looks them all up, each table's indices shifted by its row
offset in the matrix. A device whose tables have k distinct dims therefore runs k lookup calls (fbgemm runs one
kernel for any mix of dims), and the label says so: ``torch embedding_bag, one fused call per distinct dim (k
calls)``. Inside a group, bags are ordered sample-major (sample b's bags for the group's tables side by side), so
the call's output is already the group's [B, T_g * dim] block; the blocks are concatenated and, where the groups'
tables interleave in table order, their columns permuted into table order with one index_select.

Backward per group: output-gradient rows of the bags -> per-lookup rows (bag ids from the offsets) -> summed per
unique row with index_add_ over the inverse of ``torch.unique`` (a sort, like fbgemm's) -> optimizer update of the
unique rows. All of it runs on the kernel's device.

Inputs come in fbgemm's per-table format, ``(indices, offsets)`` with ``offsets`` of length B + 1 (see
shardopt.core.traces). Rearranging them into the fused per-group inputs is `prepare`, which is not timed (it is input
preparation, as building fbgemm's concatenated inputs is); `forward` and `backward_update` are what is timed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from shardopt.core.ir import Dtype, Optimizer

TORCH_KERNEL = "torch embedding_bag"

_TORCH_DTYPES = {Dtype.fp32: torch.float32, Dtype.fp16: torch.float16}


def as_dtype(value: Any) -> Dtype:
    """fp32 / fp16 from a Dtype, its name, or a torch dtype."""
    if isinstance(value, Dtype):
        return value
    if value is torch.float32:
        return Dtype.fp32
    if value is torch.float16:
        return Dtype.fp16
    try:
        return Dtype(value)
    except ValueError:
        raise ValueError(f"dtype: {value!r} is not one of fp32, fp16") from None


def as_optimizer(value: Any) -> Optimizer:
    try:
        return Optimizer(value)
    except ValueError:
        raise ValueError(f"optimizer: {value!r} is not one of {', '.join(o.value for o in Optimizer)}") from None


@dataclass
class _Group:
    """The tables of one (dim, dtype), stacked into one weight matrix."""

    dim: int
    dtype: Dtype
    tables: list[int]  # kernel table indices, in table order
    row_offsets: list[int]  # each table's first row in `weight`
    weight: torch.Tensor  # [sum of the tables' rows, dim]
    state: dict[str, torch.Tensor] = field(default_factory=dict)  # optimizer state, rows aligned with `weight`
    col_start: int = 0  # the group's first column in the group-major output

    @property
    def width(self) -> int:
        return self.dim * len(self.tables)


@dataclass
class PreparedBatch:
    """One batch in the fused per-group layout (on the kernel's device): what `forward` / `backward_update` take."""

    batch_size: int
    indices: list[torch.Tensor]  # per group: int64, sample-major bags, shifted by each table's row offset
    offsets: list[torch.Tensor]  # per group: int64, B * T_g + 1 (include_last_offset)
    lookups: list[int]  # per group: number of indices

    @property
    def total_lookups(self) -> int:
        return sum(self.lookups)


class TorchTBE:
    """Batched embedding bags (sum pooling) over several tables with a fused sparse optimizer update.

    rows, dims: per table (a row- or column-wise shard is a table of its rows x cols). dtype: fp32 / fp16, one for
    all tables or one per table. optimizer: sgd / rowwise_adagrad / adam. The initial weights are drawn per table
    from U(-1/sqrt(rows), 1/sqrt(rows)) with a generator seeded by `seed`.
    """

    def __init__(
        self,
        rows: Sequence[int],
        dims: Sequence[int],
        dtype: Any = Dtype.fp32,
        optimizer: Any = Optimizer.rowwise_adagrad,
        learning_rate: float = 0.01,
        eps: float = 1e-8,
        *,
        beta1: float = 0.9,
        beta2: float = 0.999,
        device: str | torch.device = "cpu",
        seed: int = 0,
    ):
        rows, dims = [int(r) for r in rows], [int(d) for d in dims]
        if not rows:
            raise ValueError("TorchTBE needs at least one table")
        if len(rows) != len(dims):
            raise ValueError(f"rows has {len(rows)} tables but dims has {len(dims)}")
        for t, (r, d) in enumerate(zip(rows, dims)):
            if r < 1:
                raise ValueError(f"rows[{t}]: {r} must be >= 1")
            if d < 1:
                raise ValueError(f"dims[{t}]: {d} must be >= 1")
        if isinstance(dtype, (list, tuple)):
            if len(dtype) != len(rows):
                raise ValueError(f"dtype has {len(dtype)} entries for {len(rows)} tables")
            dtypes = [as_dtype(x) for x in dtype]
        else:
            dtypes = [as_dtype(dtype)] * len(rows)
        self.rows, self.dims, self.dtypes = rows, dims, dtypes
        self.optimizer = as_optimizer(optimizer)
        self.learning_rate, self.eps, self.beta1, self.beta2 = float(learning_rate), float(eps), float(beta1), float(beta2)
        self.device = torch.device(device)
        self.step = 0  # optimizer updates done (adam's bias-correction step)

        # groups of one (dim, dtype), in order of first appearance
        keys: dict[tuple[int, Dtype], int] = {}
        self._groups: list[_Group] = []
        self._where: list[tuple[int, int]] = []  # table -> (group, position in group)
        gen = torch.Generator(device=self.device).manual_seed(int(seed))
        for t, (d, dt) in enumerate(zip(dims, dtypes)):
            g = keys.setdefault((d, dt), len(keys))
            if g == len(self._groups):
                self._groups.append(_Group(dim=d, dtype=dt, tables=[], row_offsets=[], weight=torch.empty(0)))
            grp = self._groups[g]
            self._where.append((g, len(grp.tables)))
            grp.row_offsets.append(sum(rows[u] for u in grp.tables))
            grp.tables.append(t)
        col = 0
        for grp in self._groups:
            total_rows = sum(rows[t] for t in grp.tables)
            w = torch.empty(total_rows, grp.dim, dtype=torch.float32, device=self.device)
            for t, r0 in zip(grp.tables, grp.row_offsets):
                bound = 1.0 / math.sqrt(rows[t])
                w[r0 : r0 + rows[t]].uniform_(-bound, bound, generator=gen)
            grp.weight = w.to(_TORCH_DTYPES[grp.dtype])
            if self.optimizer is Optimizer.rowwise_adagrad:
                grp.state["sum"] = torch.zeros(total_rows, dtype=torch.float32, device=self.device)
            elif self.optimizer is Optimizer.adam:
                grp.state["exp_avg"] = torch.zeros(total_rows, grp.dim, dtype=torch.float32, device=self.device)
                grp.state["exp_avg_sq"] = torch.zeros(total_rows, grp.dim, dtype=torch.float32, device=self.device)
            grp.col_start = col
            col += grp.width

        # output columns: group-major -> table order (None when they already agree)
        table_cols = np.concatenate([[0], np.cumsum(dims)])
        grouped = np.concatenate([np.arange(table_cols[t], table_cols[t] + dims[t]) for grp in self._groups for t in grp.tables])
        if np.array_equal(grouped, np.arange(table_cols[-1])):
            self._to_table_order = self._to_group_order = None
        else:  # out[:, j] = grouped_out[:, perm[j]] where grouped column perm[j] holds table column j
            perm = np.empty_like(grouped)
            perm[grouped] = np.arange(len(grouped))
            self._to_table_order = torch.from_numpy(perm).to(self.device)
            self._to_group_order = torch.from_numpy(grouped).to(self.device)

    # -- description ---------------------------------------------------------------------------------------------
    @property
    def num_tables(self) -> int:
        return len(self.rows)

    @property
    def total_dim(self) -> int:
        return sum(self.dims)

    @property
    def num_calls(self) -> int:
        """embedding_bag calls per forward: one per distinct (dim, dtype)."""
        return len(self._groups)

    @property
    def label(self) -> str:
        k = self.num_calls
        mixed = len(set(self.dtypes)) > 1
        per = "distinct (dim, dtype)" if mixed else "distinct dim"
        return (
            f"{TORCH_KERNEL}, one fused call per {per} ({k} call{'s' if k != 1 else ''}), "
            f"sparse {self.optimizer.value} update over unique rows ({self.device.type})"
        )

    # -- weights and state, per table (views into the fused matrices, like fbgemm's split_embedding_weights) -------
    def split_weights(self) -> list[torch.Tensor]:
        return [self._table_view(t, self._groups[g].weight) for t, (g, _) in enumerate(self._where)]

    def optimizer_state(self, table: int) -> dict[str, torch.Tensor]:
        """Views of table `table`'s optimizer state: {} (sgd), {"sum": [rows]} (rowwise_adagrad),
        {"exp_avg", "exp_avg_sq": [rows, dim]} (adam)."""
        g, _ = self._where[table]
        return {k: self._table_view(table, v) for k, v in self._groups[g].state.items()}

    def set_weights(self, weights: Sequence[torch.Tensor | np.ndarray]) -> None:
        """Overwrite every table's weights (one [rows, dim] array per table)."""
        if len(weights) != self.num_tables:
            raise ValueError(f"set_weights: {len(weights)} arrays for {self.num_tables} tables")
        for t, (view, w) in enumerate(zip(self.split_weights(), weights)):
            w = torch.as_tensor(w)
            if tuple(w.shape) != tuple(view.shape):
                raise ValueError(f"set_weights: table {t} has shape {tuple(view.shape)}, got {tuple(w.shape)}")
            view.copy_(w)

    def _table_view(self, t: int, tensor: torch.Tensor) -> torch.Tensor:
        g, pos = self._where[t]
        r0 = self._groups[g].row_offsets[pos]
        return tensor[r0 : r0 + self.rows[t]]

    # -- input preparation (not timed) ------------------------------------------------------------------------
    def prepare(self, traces: Sequence[tuple[Any, Any]]) -> PreparedBatch:
        """Per-table fbgemm-format (indices, offsets) -> the fused per-group inputs on the kernel's device.

        Every table's offsets have length B + 1 for one common B, start at 0, never decrease and end at the number
        of its indices; indices lie in [0, rows). A violation is a ValueError naming the table."""
        if len(traces) != self.num_tables:
            raise ValueError(f"prepare: {len(traces)} traces for {self.num_tables} tables")
        idx_np, off_np = [], []
        batch = None
        for t, (idx, off) in enumerate(traces):
            i = _to_numpy(idx)
            o = _to_numpy(off)
            if i.ndim != 1 or o.ndim != 1 or len(o) < 1:
                raise ValueError(f"table {t}: indices and offsets must be 1-d, offsets of length B + 1")
            b = len(o) - 1
            if batch is None:
                batch = b
            elif b != batch:
                raise ValueError(f"table {t}: batch {b} (offsets of length {len(o)}), other tables have batch {batch}")
            if o[0] != 0 or o[-1] != len(i) or (b and np.any(np.diff(o) < 0)):
                raise ValueError(f"table {t}: offsets must start at 0, not decrease and end at len(indices) = {len(i)}")
            if len(i) and (i.min() < 0 or i.max() >= self.rows[t]):
                raise ValueError(f"table {t}: indices must lie in [0, {self.rows[t]}), got [{i.min()}, {i.max()}]")
            idx_np.append(i)
            off_np.append(o)
        assert batch is not None
        indices, offsets, lookups = [], [], []
        for grp in self._groups:
            i, o = _sample_major(grp, idx_np, off_np, batch)
            indices.append(torch.from_numpy(i).to(self.device))
            offsets.append(torch.from_numpy(o).to(self.device))
            lookups.append(len(i))
        return PreparedBatch(batch_size=batch, indices=indices, offsets=offsets, lookups=lookups)

    # -- the timed passes --------------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, batch: PreparedBatch) -> torch.Tensor:
        """Pooled embeddings [B, sum of dims], fp32, tables' columns in table order."""
        B = batch.batch_size
        outs = []
        for g, grp in enumerate(self._groups):
            pooled = F.embedding_bag(batch.indices[g], grp.weight, batch.offsets[g], mode="sum", include_last_offset=True)
            outs.append(pooled.view(B, grp.width).float())
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
        if self._to_table_order is not None:
            out = out.index_select(1, self._to_table_order)
        return out

    def __call__(self, batch: PreparedBatch) -> torch.Tensor:
        return self.forward(batch)

    @torch.no_grad()
    def backward_update(self, batch: PreparedBatch, grad_output: torch.Tensor) -> None:
        """Sparse gradient of every looked-up row (coalesced over unique rows) and the optimizer update, in place."""
        B = batch.batch_size
        if tuple(grad_output.shape) != (B, self.total_dim):
            raise ValueError(f"grad_output has shape {tuple(grad_output.shape)}, expected ({B}, {self.total_dim})")
        grad = grad_output.to(device=self.device, dtype=torch.float32)
        if self._to_group_order is not None:
            grad = grad.index_select(1, self._to_group_order)
        self.step += 1
        for g, grp in enumerate(self._groups):
            n = batch.lookups[g]
            if n == 0:
                continue
            bag_grad = grad[:, grp.col_start : grp.col_start + grp.width].reshape(B * len(grp.tables), grp.dim)
            offsets = batch.offsets[g]
            bag_of_lookup = torch.repeat_interleave(offsets[1:] - offsets[:-1], output_size=n)
            rows, inverse = torch.unique(batch.indices[g], sorted=True, return_inverse=True)
            row_grad = torch.zeros(rows.numel(), grp.dim, dtype=torch.float32, device=self.device)
            row_grad.index_add_(0, inverse, bag_grad.index_select(0, bag_of_lookup))
            self._update(grp, rows, row_grad)

    def _update(self, grp: _Group, rows: torch.Tensor, g: torch.Tensor) -> None:
        lr, w = self.learning_rate, grp.weight
        if self.optimizer is Optimizer.sgd:
            step = g.mul_(-lr)
        elif self.optimizer is Optimizer.rowwise_adagrad:
            acc = grp.state["sum"]
            new = acc.index_select(0, rows).add_(g.square().mean(dim=1))
            acc.index_copy_(0, rows, new)
            step = g.mul_((-lr / (new.sqrt() + self.eps)).unsqueeze(1))
        else:  # adam
            b1, b2, t = self.beta1, self.beta2, self.step
            m_all, v_all = grp.state["exp_avg"], grp.state["exp_avg_sq"]
            m = m_all.index_select(0, rows).mul_(b1).add_(g, alpha=1 - b1)
            v = v_all.index_select(0, rows).mul_(b2).addcmul_(g, g, value=1 - b2)
            m_all.index_copy_(0, rows, m)
            v_all.index_copy_(0, rows, v)
            denom = v.div(1 - b2**t).sqrt_().add_(self.eps)
            step = m.div_(denom).mul_(-lr / (1 - b1**t))
        if w.dtype == torch.float32:
            w.index_add_(0, rows, step)  # rows are unique: each row gets exactly its own step
        else:
            w.index_copy_(0, rows, w.index_select(0, rows).float().add_(step).to(w.dtype))


def _to_numpy(a: Any) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    return np.ascontiguousarray(np.asarray(a), dtype=np.int64)


def _sample_major(grp: _Group, idx: list[np.ndarray], off: list[np.ndarray], batch: int) -> tuple[np.ndarray, np.ndarray]:
    """One group's inputs: bags ordered (sample, table), indices shifted by each table's row offset."""
    T = len(grp.tables)
    lengths = np.stack([np.diff(off[t]) for t in grp.tables]) if batch else np.zeros((T, 0), dtype=np.int64)  # [T, B]
    shifted = np.concatenate([idx[t] + r0 for t, r0 in zip(grp.tables, grp.row_offsets)])  # table-major
    base = np.concatenate([[0], np.cumsum([len(idx[t]) for t in grp.tables])[:-1]])
    src_start = np.stack([off[t][:-1] + base[k] for k, t in enumerate(grp.tables)]) if batch else lengths  # [T, B]
    new_len = lengths.T.ravel()  # bag (b, t) at position b * T + t
    new_off = np.concatenate([[0], np.cumsum(new_len)]).astype(np.int64)
    n = int(new_off[-1])
    pos = np.repeat(src_start.T.ravel() - new_off[:-1], new_len) + np.arange(n)
    return shifted[pos].astype(np.int64), new_off
