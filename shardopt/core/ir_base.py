"""What every part of the IR shares: its limits, its error, its enums and the frozen, strict base model.

A leaf below `ir.py` and `topology.py`, so that the topology can live in a module of its own without a circle; callers
import these names from `shardopt.core.ir`, which re-exports them.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict

from shardopt.core.errors import UserError

SCHEMA_VERSION = 1
ACCESS_BINS = 17
DIM_ALIGNMENT = 4  # fbgemm's TBE kernels need embedding dims (and column-shard widths) in multiples of 4

# the largest numbers the models hold exactly (int64 byte counts, float64 costs): beyond them a document is refused
# with the field named, never an OverflowError deep in a solver
MAX_ROWS = 2**40  # ~1.1e12 rows: 100x the largest published tables
MAX_DIM = 2**16
MAX_POOLING_FACTOR = 1e6
MAX_DEVICES = 2**20
MAX_BATCH = 2**40
MAX_BYTES = 2**62  # per-device memory; table bytes stay below 2^63 (int64)


class IRError(UserError, ValueError):
    """A document that is not a valid instance or plan. `errors` holds one `field: message` line each."""

    error_kind = "invalid_input"

    def __init__(self, errors: list[str], source: str | None = None):
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        if len(errors) == 1:
            super().__init__(head + errors[0])
        else:
            super().__init__(head + f"{len(errors)} errors:\n" + "\n".join("  " + e for e in errors))


class Dtype(str, Enum):
    fp32 = "fp32"
    fp16 = "fp16"

    @property
    def nbytes(self) -> int:
        return 4 if self is Dtype.fp32 else 2


class Optimizer(str, Enum):
    sgd = "sgd"
    rowwise_adagrad = "rowwise_adagrad"
    adam = "adam"


class Kernel(str, Enum):
    """Where a shard's weights live: TorchRec's compute kernels, so plans export one to one."""

    fused = "fused"  # weights and optimizer state in HBM (the default)
    fused_uvm_caching = "fused_uvm_caching"  # in host memory, read through an HBM cache of cache_load_factor x rows
    fused_uvm = "fused_uvm"  # in host memory only, every lookup over the host link

    @property
    def in_host_memory(self) -> bool:
        return self is not Kernel.fused


class PlanStatus(str, Enum):
    optimal = "optimal"
    feasible = "feasible"
    timeout = "timeout"  # written by versions before `stop`: read as a feasible plan the time limit stopped


class IRModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


def a_number(v: Any) -> Any:
    """A count or size given as a number, not as text or a truth value: pydantic's lax mode read "rows": "100" as
    100 and "device": true as 1, so a typo in a hand-written document became a silent wrong instance or plan."""
    if isinstance(v, (bool, str, bytes)) or type(v).__name__ == "bool_":
        raise ValueError(f"{v!r} is not a number")
    if isinstance(v, list):
        for x in v:
            a_number(x)
    return v


def check_byte_counts(v: int | list[int], zero_ok: bool) -> int | list[int]:
    """One memory size or one per device: each > 0 (>= 0 where `zero_ok`) and at most MAX_BYTES."""
    values = v if isinstance(v, list) else [v]
    for i, m in enumerate(values):
        where = f"[{i}]: " if isinstance(v, list) else ""
        if m < 0 or (m == 0 and not zero_ok):
            raise ValueError(f"{where}{m} must be {'>= 0' if zero_ok else '> 0'}")
        if m > MAX_BYTES:
            raise ValueError(f"{where}{m} is more than {MAX_BYTES} bytes (2^62), the most the memory model holds")
    return v
