"""The one problem IR every solver, cost model and judge speaks: instances and plans as validated JSON documents.

Validation happens once, at the boundary, so that everything downstream can trust the numbers: a bad document is
refused whole with an error naming the field and the value (``tables[3].dim: 30 is not a multiple of 4``) and
nothing half-valid is ever returned. pydantic does the parsing and gives the JSON Schema for free.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from shardopt.core.ir_base import (  # noqa: F401 - re-exported: the IR's names are imported from here
    ACCESS_BINS,
    DIM_ALIGNMENT,
    MAX_BATCH,
    MAX_BYTES,
    MAX_DEVICES,
    MAX_DIM,
    MAX_POOLING_FACTOR,
    MAX_ROWS,
    SCHEMA_VERSION,
    Dtype,
    IRError,
    IRModel,
    Kernel,
    Optimizer,
    PlanStatus,
)
from shardopt.core.ir_base import a_number as _a_number
from shardopt.core.topology import Topology, TopologyLevel  # noqa: F401 - re-exported
from shardopt.core.two_d import TwoDParallel


class AccessProfile(IRModel):
    """How a table's rows are hit: the papers' 17-bin histogram, or a Zipf exponent it can be derived from.

    The histogram is the share of unique rows whose access count in one batch falls in (0,1], (1,2], (2,4], ...,
    (2^14,2^15], >2^15 (see shardopt.core.stats). A Zipf exponent alone is a generator description: the histogram for a
    given batch is derived from it.
    """

    histogram: list[float] | None = Field(default=None, description="17 shares of unique rows per access-count bin")
    zipf: float | None = Field(default=None, ge=0, description="Zipf exponent of row popularity (0 = uniform)")

    @field_validator("histogram")
    @classmethod
    def _check_histogram(cls, v: list[float] | None) -> list[float] | None:
        if v is None:
            return v
        if len(v) != ACCESS_BINS:
            raise ValueError(f"has {len(v)} bins, expected {ACCESS_BINS}")
        for i, x in enumerate(v):
            if not math.isfinite(x) or x < 0:
                raise ValueError(f"bin {i} is {x}, expected a finite share >= 0")
        s = sum(v)
        if abs(s - 1.0) > 1e-3:
            raise ValueError(f"shares sum to {s:.6g}, expected 1")
        return v

    @field_validator("zipf")
    @classmethod
    def _check_zipf(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError(f"{v} is not finite")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> AccessProfile:
        if self.histogram is None and self.zipf is None:
            raise ValueError("give 'histogram' (17 shares) or 'zipf' (an exponent)")
        return self


class Table(IRModel):
    name: str = Field(min_length=1)
    rows: int = Field(ge=1, le=MAX_ROWS, description="hash size: number of embedding rows")
    dim: int = Field(ge=DIM_ALIGNMENT, le=MAX_DIM, description="embedding dimension, a multiple of 4")
    pooling_factor: float = Field(ge=0, le=MAX_POOLING_FACTOR, description="mean lookups per sample (bag length)")
    access: AccessProfile
    dtype: Dtype | None = Field(default=None, description="weight dtype; the workload's weight_dtype when absent")

    _numbers = field_validator("rows", "dim", "pooling_factor", mode="before")(_a_number)

    @field_validator("pooling_factor", mode="before")
    @classmethod
    def _check_pooling_finite(cls, v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):  # (before the range check, which would call NaN too large)
            raise ValueError(f"{v} is not finite")
        return v

    @field_validator("dim")
    @classmethod
    def _check_dim(cls, v: int) -> int:
        if v % DIM_ALIGNMENT:
            raise ValueError(f"{v} is not a multiple of {DIM_ALIGNMENT}")
        return v

    @field_validator("pooling_factor")
    @classmethod
    def _check_pooling(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError(f"{v} is not finite")
        return v



class Workload(IRModel):
    batch_size: int = Field(ge=1, le=MAX_BATCH, description="global batch size per iteration")
    _numbers = field_validator("batch_size", mode="before")(_a_number)
    optimizer: Optimizer = Optimizer.rowwise_adagrad
    weight_dtype: Dtype = Dtype.fp32


def check_unique_names(tables: list[Any]) -> None:
    """Table names are how plans refer to tables: a repeat is an error naming both places."""
    seen: dict[str, int] = {}
    for i, t in enumerate(tables):
        if t.name in seen:
            raise ValueError(f"tables[{i}].name: {t.name!r} repeats tables[{seen[t.name]}].name")
        seen[t.name] = i


# TorchRec's sharding types a constraint may name (shardopt.core.sharding_types has the same names; it imports this module)
CONSTRAINT_SHARDING_TYPES = ("table_wise", "column_wise", "row_wise", "table_row_wise", "table_column_wise", "data_parallel", "grid_shard")
# the kinds of placement constraint, as solvers declare what they honour (solvers.catalog.SolverSpec.constraints)
CONSTRAINT_KINDS = ("sharding_types", "kernels", "devices", "min_partition", "cache_load_factor", "colocate", "separate", "torchrec")


class TableConstraint(IRModel):
    """What one table may be, each field unset when free: its sharding types (TorchRec's names), its kernels (memory
    tiers), the devices its shards may use (pinning), the narrowest column piece it may be cut into (TorchRec's
    `min_partition`), and the cache load factor of its UVM-cached shards."""

    table: str = Field(min_length=1)
    sharding_types: list[str] | None = Field(default=None, min_length=1)
    kernels: list[Kernel] | None = Field(default=None, min_length=1)
    devices: list[int] | None = Field(default=None, min_length=1)
    min_partition: int | None = Field(default=None, ge=DIM_ALIGNMENT)
    cache_load_factor: float | None = Field(default=None, gt=0, le=1)

    @field_validator("sharding_types")
    @classmethod
    def _known_types(cls, v: list[str] | None) -> list[str] | None:
        for x in v or []:
            if x not in CONSTRAINT_SHARDING_TYPES:
                raise ValueError(f"{x!r} is not a sharding type (known: {', '.join(CONSTRAINT_SHARDING_TYPES)})")
        return v

    @field_validator("min_partition")
    @classmethod
    def _aligned(cls, v: int | None) -> int | None:
        if v is not None and v % DIM_ALIGNMENT:
            raise ValueError(f"{v} is not a multiple of {DIM_ALIGNMENT}")
        return v

    def kinds(self) -> set[str]:
        return {k for k in ("sharding_types", "kernels", "devices", "min_partition", "cache_load_factor") if getattr(self, k) is not None}

    def min_piece_width(self, dim: int) -> int | None:
        """The narrowest column piece of a table of `dim` columns: min(min_partition, dim), as TorchRec reads it (a
        min_partition wider than the table means the table is never cut by columns); None when free."""
        return None if self.min_partition is None else min(self.min_partition, dim)


class TorchRecForm(IRModel):
    """The plan is for TorchRec's DistributedModelParallel, so it keeps the form TorchRec loads
    (shardopt.core.torchrec_form): one kernel per table, TorchRec's row layouts, one shape for a table's slices on one
    rank, and with `even_columns` one width for all of a table's column slices (TorchRec 1.8's own state_dict reload
    needs it; torch.distributed.checkpoint does not)."""

    even_columns: bool = True


class PlacementConstraints(IRModel):
    """Where tables may go: per table (`tables`), and across tables - each group of `colocate` on the same devices,
    no two tables of a group of `separate` on one device. TorchRec's planner can do neither of the last two.
    `torchrec`: the plan must be one TorchRec loads as it is (TorchRecForm)."""

    tables: list[TableConstraint] = Field(default_factory=list)
    colocate: list[list[str]] = Field(default_factory=list)
    separate: list[list[str]] = Field(default_factory=list)
    torchrec: TorchRecForm | None = None

    def kinds(self) -> set[str]:
        """The constraint kinds used (CONSTRAINT_KINDS), for a solver to say which it does not honour."""
        out = {k for c in self.tables for k in c.kinds()}
        out |= {"torchrec"} if self.torchrec is not None else set()
        return out | ({"colocate"} if self.colocate else set()) | ({"separate"} if self.separate else set())

    @model_serializer(mode="wrap")
    def _drop_unset_form(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Constraints without a TorchRec form are written as before it existed (so their content hash is too)."""
        out = handler(self)
        if out.get("torchrec") is None:
            out.pop("torchrec", None)
        return out

    @property
    def even_columns(self) -> bool:
        """Whether every table's column slices must be of one width."""
        return self.torchrec is not None and self.torchrec.even_columns

    def of(self, table: str) -> TableConstraint | None:
        return next((c for c in self.tables if c.table == table), None)


class Instance(IRModel):
    """Tables + topology + workload: one min-max partitioning problem."""

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["instance"] = "instance"
    name: str = ""
    tables: list[Table] = Field(min_length=1)
    topology: Topology
    workload: Workload
    metadata: dict[str, Any] = Field(default_factory=dict, description="free: suite, family, seed, provenance")
    constraints: PlacementConstraints | None = Field(default=None, description="where tables may go (absent: anywhere)")
    two_d: TwoDParallel | None = Field(default=None, description="2D sparse parallelism (DMPCollection): the tables sharded "
                                       "over a group of ranks, the group replicated (absent: one flat group)")

    @model_serializer(mode="wrap")
    def _drop_flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A flat instance is written as before 2D parallelism existed, so its document and hashes are too."""
        out = handler(self)
        if out.get("two_d", 0) is None:
            out.pop("two_d")
        return out

    @model_validator(mode="after")
    def _two_d_fits_the_job(self) -> Instance:
        if self.two_d is None:
            return self
        self.two_d.check_group_size(self.topology.num_devices)
        g = self.two_d.fixed_group_size
        for i, tc in enumerate(self.constraints.tables if self.constraints is not None else []):
            for d in tc.devices or []:
                if g is None:
                    raise ValueError(f"constraints.tables[{i}].devices: {tc.devices} with two_d.group_size \"auto\": a pin "
                                     f"names ranks of the sharding group, so fix two_d.group_size to pin tables")
                if d >= g:
                    raise ValueError(f"constraints.tables[{i}].devices: {d} is not a rank of a sharding group of "
                                     f"two_d.group_size {g} (0..{g - 1}): with two_d, pins name the group's ranks")
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> Instance:
        check_unique_names(self.tables)
        return self

    @model_validator(mode="after")
    def _constraints_name_what_exists(self) -> Instance:
        c = self.constraints
        if c is None:
            return self
        names = {t.name for t in self.tables}
        seen: set[str] = set()
        for i, tc in enumerate(c.tables):
            if tc.table not in names:
                raise ValueError(f"constraints.tables[{i}].table: {tc.table!r} is not a table of the instance")
            if tc.table in seen:
                raise ValueError(f"constraints.tables[{i}].table: {tc.table!r} is constrained twice (one entry per table)")
            seen.add(tc.table)
            for d in tc.devices or []:
                if not 0 <= d < self.topology.num_devices:
                    raise ValueError(f"constraints.tables[{i}].devices: {d} is not a device (0..{self.topology.num_devices - 1})")
        for kind in ("colocate", "separate"):
            for g, group in enumerate(getattr(c, kind)):
                if len(set(group)) < 2:
                    raise ValueError(f"constraints.{kind}[{g}]: {group} names fewer than two distinct tables")
                for name in group:
                    if name not in names:
                        raise ValueError(f"constraints.{kind}[{g}]: {name!r} is not a table of the instance")
        return self

    def constraint_kinds(self) -> set[str]:
        """The placement constraint kinds the instance uses (CONSTRAINT_KINDS; empty: none)."""
        return self.constraints.kinds() if self.constraints is not None else set()

    def table_dtype(self, table: Table) -> Dtype:
        return table.dtype or self.workload.weight_dtype

    def table_index(self) -> dict[str, int]:
        return {t.name: i for i, t in enumerate(self.tables)}

    def content_hash(self) -> str:
        """A short stable hash of the problem (not its name or metadata), to tie plans and results to it."""
        absent = {name for name in ("constraints", "two_d") if getattr(self, name) is None}  # (old documents hash as before)
        body = self.model_dump(mode="json", exclude={"name", "metadata"} | absent)
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


class Shard(IRModel):
    """One slice of a table on one device.

    Table-wise: one shard with the defaults (whole table). Column-wise: several shards with column ranges, or one
    whole shard marked `column_wise` (TorchRec's column_wise with one rank: the table's lookups are a whole table's,
    and its pooled output joins the column-wise all-to-all rather than running the table-wise one beside it).
    Row-wise: row ranges. Data-parallel: a whole-table shard on every device, each marked `replicated`.
    `cols` / `rows` absent mean "to the end of the table". `kernel` says where the shard's weights live (HBM by
    default; host memory behind an HBM cache of `cache_load_factor` x its rows; host memory alone).
    """

    table: str = Field(min_length=1)
    device: int = Field(ge=0, le=MAX_DEVICES)
    col_offset: int = Field(default=0, ge=0, le=MAX_DIM)
    cols: int | None = Field(default=None, ge=1, le=MAX_DIM)
    row_offset: int = Field(default=0, ge=0, le=MAX_ROWS)
    rows: int | None = Field(default=None, ge=1, le=MAX_ROWS)
    replicated: bool = False
    column_wise: bool = Field(default=False, description="a table's one whole shard in the column-wise output dist (TorchRec column_wise, one rank)")
    kernel: Kernel = Kernel.fused
    cache_load_factor: float | None = Field(default=None, gt=0, le=1, description="fused_uvm_caching: HBM cache rows / shard rows")
    _numbers = field_validator("device", "col_offset", "cols", "row_offset", "rows", "cache_load_factor", mode="before")(_a_number)

    @model_validator(mode="after")
    def _check_kernel(self) -> Shard:
        if self.kernel is Kernel.fused_uvm_caching and self.cache_load_factor is None:
            raise ValueError("cache_load_factor: required with kernel 'fused_uvm_caching' (a share of the shard's rows in (0, 1])")
        if self.kernel is not Kernel.fused_uvm_caching and self.cache_load_factor is not None:
            raise ValueError(f"cache_load_factor: {self.cache_load_factor} is only meaningful with kernel 'fused_uvm_caching', not {self.kernel.value!r}")
        if self.replicated and self.column_wise:
            raise ValueError("column_wise: a data-parallel replica joins no column-wise all-to-all (replicated and column_wise both true)")
        if self.replicated and self.kernel is not Kernel.fused:
            raise ValueError(f"kernel: {self.kernel.value!r}: a data-parallel replica lives in HBM (kernel 'fused')")
        return self

    @model_serializer(mode="wrap")
    def _drop_default_kernel(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """An HBM shard is written as before kernels existed, so table-wise plans stay one short line per table; so is
        a shard that is not marked column_wise."""
        out = handler(self)
        if out.get("kernel") in (Kernel.fused, Kernel.fused.value):
            out.pop("kernel")
        if out.get("column_wise") is False:
            out.pop("column_wise")
        return out

    @property
    def label(self) -> str:
        """The shard in words, as tables and explanations print it: 't3', 't3[c0:32]', 't3[r0:1000]', 't3(rep)',
        't3(cw)' (a whole shard in the column-wise all-to-all)."""
        label = self.table
        if self.col_offset or self.cols is not None:
            label += f"[c{self.col_offset}:{self.col_offset + self.cols if self.cols is not None else 'end'}]"
        if self.row_offset or self.rows is not None:
            label += f"[r{self.row_offset}:{self.row_offset + self.rows if self.rows is not None else 'end'}]"
        if self.replicated:
            label += "(rep)"
        if self.column_wise:
            label += "(cw)"
        return label

    @property
    def is_whole(self) -> bool:
        """Every row and column of its table: no offsets, and counts to the end (a replica too)."""
        return not (self.col_offset or self.row_offset) and self.cols is None and self.rows is None

    def cache_rows(self, table: Table) -> int:
        """Rows of this shard held in its HBM cache: all for fused, none for fused_uvm."""
        if self.kernel is Kernel.fused:
            return self.height(table)
        if self.kernel is Kernel.fused_uvm:
            return 0
        return min(self.height(table), math.ceil(float(self.cache_load_factor or 0.0) * self.height(table)))

    def col_range(self, table: Table) -> tuple[int, int]:
        width = table.dim - self.col_offset if self.cols is None else self.cols
        return self.col_offset, self.col_offset + width

    def row_range(self, table: Table) -> tuple[int, int]:
        height = table.rows - self.row_offset if self.rows is None else self.rows
        return self.row_offset, self.row_offset + height

    def width(self, table: Table) -> int:
        a, b = self.col_range(table)
        return b - a

    def height(self, table: Table) -> int:
        a, b = self.row_range(table)
        return b - a


class Plan(IRModel):
    """A placement of every table's shards, and how it was found."""

    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["plan"] = "plan"
    instance: str = Field(default="", description="content hash of the instance this plan is for")
    solver: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    cost_model: str | None = None
    seed: int | None = None
    wall_time_s: float = Field(default=0.0, ge=0)
    status: PlanStatus = PlanStatus.feasible
    stopped: Literal["time_limit", "converged", "proven", "interrupted", "work_budget", "wall_cap"] | None = Field(
        default=None, description="why the search that made it stopped (solvers.base.StopReason)")
    lower_bound: float | None = None
    predicted_cost: float | None = None
    shards: list[Shard] = Field(min_length=1)
    sharding_group_size: int | None = Field(default=None, ge=1, le=MAX_DEVICES, description="a 2D instance's plan: the "
                                            "sharding group size G it places (shards name group ranks 0..G-1)")

    @model_serializer(mode="wrap")
    def _drop_flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A flat instance's plan is written as before 2D parallelism existed."""
        out = handler(self)
        if out.get("sharding_group_size", 0) is None:
            out.pop("sharding_group_size")
        return out


# ---------------------------------------------------------------------------------------------------------------
# JSON I/O with errors that name the field and the value


_UNION_TAGS = {"int", "float", "str", "bool", "none"}


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part) in _UNION_TAGS or "[" in str(part) or "(" in str(part):
            continue  # pydantic's union-member tags ("int", "list[int]"): not part of the user's path
        else:
            out += ("." if out else "") + str(part)
    return out or "(document)"


def _format_errors(exc: ValidationError) -> list[str]:
    lines: list[str] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        path = _loc_to_path(loc)
        msg = str(err.get("msg", "invalid"))
        etype = err.get("type", "")
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
            line = f"{_join_path(path, msg)}"
        elif etype == "missing":
            line = f"{path}: required field is missing"
        elif etype == "extra_forbidden":
            line = f"{path}: unknown field"
        else:
            value = err.get("input")
            shown = json.dumps(value) if _jsonable(value) else repr(value)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            line = f"{path}: {shown}: {msg[0].lower() + msg[1:] if msg else msg}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return lines


_SUBPATH = re.compile(r"^(\[\d+\]|[A-Za-z_]\w*(\[\d+\])?(\.\w+(\[\d+\])?)*): ")


def _join_path(path: str, msg: str) -> str:
    """Validators of a whole object name the sub-field they mean ("memory_bytes: ..."): fold it into the path."""
    m = _SUBPATH.match(msg)
    if not m:
        return f"{path}: {msg}"
    sub, rest = m.group(1), msg[m.end() :]
    if path == "(document)":
        return f"{sub}: {rest}"
    return f"{path}{sub}: {rest}" if sub.startswith("[") else f"{path}.{sub}: {rest}"


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def validate_document(cls: type[BaseModel], data: Any, source: str | None = None) -> Any:
    """Validate `data` as a document of model `cls` (which has `kind` and `schema_version`); IRError otherwise."""
    if not isinstance(data, dict):
        raise IRError([f"(document): expected a JSON object, got {type(data).__name__}"], source)
    kind = data.get("kind")
    expected = cls.model_fields["kind"].default
    if kind is not None and kind != expected:
        raise IRError([f"kind: {kind!r} is not {expected!r}"], source)
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise IRError([f"schema_version: {version!r} is not supported (this shardopt reads {SCHEMA_VERSION})"], source)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise IRError(_format_errors(exc), source) from None


def instance_from_dict(data: Any, source: str | None = None) -> Instance:
    return validate_document(Instance, data, source)


def plan_from_dict(data: Any, source: str | None = None) -> Plan:
    return validate_document(Plan, data, source)


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; IRError (not a stack trace) when it is missing or not JSON."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise IRError(["no such file"], str(p)) from None
    except IsADirectoryError:
        raise IRError(["is a directory, expected a JSON file"], str(p)) from None
    except (PermissionError, UnicodeDecodeError, OSError) as exc:
        raise IRError([f"cannot be read ({exc.__class__.__name__}: {exc})"], str(p)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise IRError([f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"], str(p)) from None


def load_instance(path: str | Path) -> Instance:
    return instance_from_dict(read_json(path), str(path))


def load_plan(path: str | Path) -> Plan:
    return plan_from_dict(read_json(path), str(path))


def load_document(path: str | Path) -> Instance | Plan:
    """An instance or a plan, told apart by the document's `kind`."""
    data = read_json(path)
    if isinstance(data, dict) and data.get("kind") == "plan":
        return plan_from_dict(data, str(path))
    if isinstance(data, dict) and "shards" in data and "tables" not in data:
        return plan_from_dict(data, str(path))
    return instance_from_dict(data, str(path))


def plan_key(plan: Plan) -> str:
    """What makes two plans the same placement (the shards, in any order; not the solver or its record): a plan
    measured once stands for every identical one (the measured leaderboard, `solve --pick`)."""
    shards = sorted((s.table, s.device, s.col_offset, s.cols, s.row_offset, s.rows, s.replicated)
                    + ((s.kernel.value, s.cache_load_factor) if s.kernel.value != "fused" else ()) for s in plan.shards)
    return json.dumps(shards, default=str)


def to_dict(doc: Instance | Plan) -> dict[str, Any]:
    return doc.model_dump(mode="json", exclude_none=True)


def dumps(doc: BaseModel, indent: int | None = 1) -> str:
    """JSON text of a document. With an indent, each element of a top-level list (tables, shards) sits on one line:
    an 856-table instance stays small and a diff of two plans stays readable."""
    body = doc.model_dump(mode="json", exclude_none=True)
    if indent is None:
        return json.dumps(body)
    return dumps_document(body, indent)


def dumps_document(body: dict[str, Any], indent: int = 1) -> str:
    return _dump_value(body, indent, 0)


def _dump_value(value: Any, indent: int, level: int) -> str:
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(value, dict) and value:
        parts = [f"{inner}{json.dumps(k)}: {_dump_value(v, indent, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(parts) + f"\n{pad}}}"
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        items = f",\n{inner}".join(json.dumps(v, separators=(",", ":")) for v in value)
        return f"[\n{inner}{items}\n{pad}]"
    return json.dumps(value, separators=(", ", ": "))


def save(doc: BaseModel, path: str | Path) -> None:
    Path(path).write_text(dumps(doc) + "\n")


def json_schema() -> dict[str, Any]:
    """The JSON Schema of both document kinds (`shardopt schema`)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "shardopt documents",
        "schema_version": SCHEMA_VERSION,
        "oneOf": [{"$ref": "#/$defs/Instance"}, {"$ref": "#/$defs/Plan"}],
        "$defs": _merged_defs(),
    }


def _merged_defs() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    for cls in (Instance, Plan):
        schema = cls.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        defs[cls.__name__] = schema
    return defs
