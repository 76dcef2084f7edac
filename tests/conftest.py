"""Shared test helpers: a hypothesis strategy for random valid instances, and a small fixed instance builder.

`instances(...)` draws any valid `shardopt.core.ir.Instance`: tables of 1..1e6 rows, dims in multiples of 4 up to 256,
float pooling factors in [0, 50], Zipf or 17-bin-histogram access, optional per-table dtype; 1..16 devices with
devices_per_host dividing the device count; any hardware profile; one memory size or one per device, drawn
relative to the tables' bytes so that instances range from roomy to tight to infeasible.

`make_instance(n_tables, n_devices, seed, mem_factor)` builds a deterministic instance from a numpy seed;
`spec_instance(name, spec, topology, batch)` one from (rows, dim, pooling factor, zipf) per table (bench_tiered's
random instances, inline in the tests that found something on them).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shardopt.core.hardware import PROFILES  # noqa: E402
from shardopt.core.ir import ACCESS_BINS, Instance, instance_from_dict  # noqa: E402
from shardopt.core.memory import table_bytes_array  # noqa: E402

HARDWARE = sorted(PROFILES)
OPTIMIZERS = ["sgd", "rowwise_adagrad", "adam"]
DTYPES = ["fp32", "fp16"]
# how device memory relates to the tables' bytes: roomy, tight (may need a careful packing), or too small
MEMORY_REGIMES = ["roomy", "tight", "too_small"]


# ---------------------------------------------------------------------------------------------------------------
# hypothesis strategies


@st.composite
def access_profiles(draw: st.DrawFn) -> dict[str, Any]:
    """{"zipf": s} or a valid 17-bin histogram (non-negative shares summing to 1)."""
    if draw(st.booleans()):
        return {"zipf": draw(st.floats(0.0, 2.0, allow_nan=False, allow_infinity=False))}
    weights = draw(st.lists(st.integers(0, 1000), min_size=ACCESS_BINS, max_size=ACCESS_BINS))
    if sum(weights) == 0:
        weights[draw(st.integers(0, ACCESS_BINS - 1))] = 1
    total = float(sum(weights))
    return {"histogram": [w / total for w in weights]}


@st.composite
def table_dicts(draw: st.DrawFn, name: str) -> dict[str, Any]:
    t: dict[str, Any] = {
        "name": name,
        "rows": draw(st.one_of(st.integers(1, 1000), st.integers(1, 10**6))),
        "dim": 4 * draw(st.integers(1, 64)),
        "pooling_factor": draw(st.floats(0.0, 50.0, allow_nan=False, allow_infinity=False)),
        "access": draw(access_profiles()),
    }
    dtype = draw(st.sampled_from([None, *DTYPES]))
    if dtype is not None:
        t["dtype"] = dtype
    return t


@st.composite
def instances(
    draw: st.DrawFn,
    min_tables: int = 1,
    max_tables: int = 12,
    min_devices: int = 1,
    max_devices: int = 16,
    tight: bool | None = None,
    heterogeneous: bool | None = None,
) -> Instance:
    """A random valid Instance.

    tight: None draws the memory regime (roomy / tight / too small, so some instances are infeasible); True draws
    tight or too-small memory; False keeps every device roomy enough that table-wise plans are easy.
    heterogeneous: None draws; True gives one memory value per device; False one value for all.
    """
    n_tables = draw(st.integers(min_tables, max_tables))
    n_dev = draw(st.integers(min_devices, max_devices))
    tables = [draw(table_dicts(f"t{i}")) for i in range(n_tables)]
    # hosts of equal size (uneven hosts, and more devices per host than devices, are refused by the IR)
    per_host = draw(st.sampled_from([d for d in range(1, n_dev + 1) if n_dev % d == 0]))
    topology: dict[str, Any] = {
        "num_devices": n_dev,
        "devices_per_host": per_host,
        "memory_bytes": 1,  # placeholder: set from the tables' bytes below
        "hardware": draw(st.sampled_from(HARDWARE)),
    }
    if draw(st.integers(0, 4)) == 0:
        topology["intra_host_bandwidth"] = draw(st.floats(1e9, 1e12))
        topology["inter_host_bandwidth"] = draw(st.floats(1e8, 1e11))
    workload = {
        "batch_size": draw(st.sampled_from([1, 128, 1024, 4096, 65536])),
        "optimizer": draw(st.sampled_from(OPTIMIZERS)),
        "weight_dtype": draw(st.sampled_from(DTYPES)),
    }
    doc = {"name": "hypothesis", "tables": tables, "topology": topology, "workload": workload, "metadata": {"source": "hypothesis"}}
    sizes = table_bytes_array(instance_from_dict(doc))
    total, largest = int(sizes.sum()), int(sizes.max())

    if tight is None:
        regime = draw(st.sampled_from(MEMORY_REGIMES))
    elif tight:
        regime = draw(st.sampled_from(["tight", "too_small"]))
    else:
        regime = "roomy"
    hetero = draw(st.booleans()) if heterogeneous is None else heterogeneous

    def capacity(factor: float) -> int:
        if regime == "roomy":  # every device could hold several times the average share and the largest table
            base = max(largest, math.ceil(total / n_dev))
            return max(1, math.ceil(base * (1.5 + factor)))
        if regime == "tight":  # between the largest table and a little over the average share
            base = max(largest, math.ceil(total / n_dev * (0.9 + 0.4 * factor)))
            return max(1, base)
        return max(1, int(largest * (0.3 + 0.9 * factor)))  # often smaller than the largest table

    if hetero:
        factors = draw(st.lists(st.floats(0.0, 1.0), min_size=n_dev, max_size=n_dev))
        topology["memory_bytes"] = [capacity(f) for f in factors]
    else:
        topology["memory_bytes"] = capacity(draw(st.floats(0.0, 1.0)))
    return instance_from_dict(doc)


# ---------------------------------------------------------------------------------------------------------------
# plain builders


def spec_instance(name: str, spec: list[tuple[int, int, float, float]], topology: dict, batch: int) -> Instance:
    """An instance from (rows, dim, pooling factor, zipf) per table, tables t0, t1, ...; rowwise_adagrad."""
    return instance_from_dict({
        "schema_version": 1, "kind": "instance", "name": name,
        "tables": [{"name": f"t{i}", "rows": r, "dim": d, "pooling_factor": p, "access": {"zipf": z}} for i, (r, d, p, z) in enumerate(spec)],
        "topology": topology, "workload": {"batch_size": batch, "optimizer": "rowwise_adagrad"}})


def make_instance(
    n_tables: int = 8,
    n_devices: int = 4,
    seed: int = 0,
    mem_factor: float = 2.0,
    *,
    per_host: int | None = None,
    hardware: str = "v100",
    optimizer: str = "rowwise_adagrad",
    batch_size: int = 4096,
    max_rows: int = 10**6,
) -> Instance:
    """A deterministic instance of `n_tables` DLRM-like tables on `n_devices` devices.

    Each device holds `mem_factor` x max(average share of the tables' bytes, the largest table), so 1.0 is tight
    and 2.0 roomy. Rows are log-uniform in [100, max_rows], dims from {16, ..., 256}, pooling log-normal, Zipf access.
    """
    rng = np.random.default_rng(seed)
    tables = []
    for i in range(n_tables):
        tables.append(
            {
                "name": f"t{i}",
                "rows": int(10 ** rng.uniform(2, math.log10(max(max_rows, 100)))),
                "dim": int(rng.choice([16, 32, 64, 128, 256])),
                "pooling_factor": float(np.round(rng.lognormal(1.5, 1.0), 3)),
                "access": {"zipf": float(np.round(rng.uniform(0.2, 1.4), 3))},
            }
        )
    doc = {
        "name": f"fixed-{n_tables}x{n_devices}-s{seed}",
        "tables": tables,
        "topology": {
            "num_devices": n_devices,
            "devices_per_host": per_host or min(n_devices, 8),
            "memory_bytes": 1,
            "hardware": hardware,
        },
        "workload": {"batch_size": batch_size, "optimizer": optimizer, "weight_dtype": "fp32"},
        "metadata": {"seed": seed, "source": "tests.conftest.make_instance"},
    }
    sizes = table_bytes_array(instance_from_dict(doc))
    doc["topology"]["memory_bytes"] = max(1, math.ceil(mem_factor * max(sizes.sum() / n_devices, sizes.max())))
    return instance_from_dict(doc)


def instance_doc(
    tables: list[tuple[int, int, float]],
    memory: int | list[int],
    *,
    n_devices: int | None = None,
    optimizer: str = "sgd",
    hardware: str = "v100",
    per_host: int | None = None,
) -> Instance:
    """A hand-made instance from (rows, dim, pooling_factor) triples, tables named t0, t1, ...; fp32, Zipf 1.0.
    With sgd (the default here) a table's bytes are rows x dim x 4."""
    n = n_devices if n_devices is not None else (len(memory) if isinstance(memory, list) else 1)
    doc = {
        "tables": [
            {"name": f"t{i}", "rows": r, "dim": d, "pooling_factor": p, "access": {"zipf": 1.0}} for i, (r, d, p) in enumerate(tables)
        ],
        "topology": {"num_devices": n, "devices_per_host": per_host or min(n, 8), "memory_bytes": memory, "hardware": hardware},
        "workload": {"batch_size": 1024, "optimizer": optimizer, "weight_dtype": "fp32"},
    }
    return instance_from_dict(doc)


@pytest.fixture
def small_instance() -> Instance:
    return make_instance(8, 4, seed=0, mem_factor=2.0)


@pytest.fixture
def tight_instance() -> Instance:
    return make_instance(12, 4, seed=1, mem_factor=1.05)


@pytest.fixture(autouse=True, scope="session")
def _isolated_model_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tests never read or write the user's calibrated-model store (~/.cache/shardopt/models) or measurement
    cache (~/.cache/shardopt/measurements.sqlite): `--cost-model auto` would otherwise plan with whatever the
    machine's user calibrated, a measured judge would answer from the user's earlier timings, and the test workers
    (pytest-xdist) would share one SQLite file. The CLI's tables are 160 columns wide whatever the terminal
    (pytest-xdist's workers set COLUMNS to 80, which the CLI honours). Subprocesses inherit the variables."""
    import os

    store = tmp_path_factory.mktemp("model-store")
    values = {"SHARDOPT_MODELS": str(store), "SHARDOPT_CACHE": str(tmp_path_factory.mktemp("measurements") / "measurements.sqlite"),
              "COLUMNS": "160"}
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    yield store
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def two_device_instance(name: str = "tiny") -> Instance:
    """Eight equal small tables on two devices with room for all: plans of it time in a second on the CPU kernels, and
    a plan's cost is its busier device's share of the same tables (balanced, mirrored or overloaded)."""
    return equal_tables_instance(name, devices=2)


def equal_tables_instance(name: str, devices: int) -> Instance:
    """Eight equal small tables on `devices` devices of one host with room for all (two_device_instance's, wider)."""
    tables = [{"name": f"t{i}", "rows": 4000, "dim": 32, "pooling_factor": 8.0, "access": {"zipf": 1.0}} for i in range(8)]
    return Instance.model_validate({
        "schema_version": 1, "kind": "instance", "name": name, "tables": tables,
        "topology": {"num_devices": devices, "devices_per_host": devices, "memory_bytes": 10**9, "hardware": "v100"},
        "workload": {"batch_size": 512, "optimizer": "sgd"},
    })


def launch_ranks(argv: list[str], tmp: Path, world: int, per_host: int, timeout: float = 420.0) -> list[dict[str, Any]]:
    """`argv` + [its report path] started once per rank as torchrun starts them on hosts of `per_host` (RANK,
    LOCAL_RANK, GROUP_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR / MASTER_PORT on a free port), each writing its
    log to tmp/rank{r}.log and its report (JSON) to tmp/rank{r}.json; every rank's report, AssertionError with the
    failed ranks' logs otherwise."""
    import json
    import os
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": str(rank), "LOCAL_RANK": str(rank % per_host), "GROUP_RANK": str(rank // per_host),
               "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(per_host), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1"}
        log = open(tmp / f"rank{rank}.log", "w")
        procs.append((subprocess.Popen([*argv, str(tmp / f"rank{rank}.json")], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp), log))
    deadline = time.monotonic() + timeout
    try:
        for p, _ in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    failed = [(r, p.returncode) for r, (p, _) in enumerate(procs) if p.returncode != 0]
    assert not failed, f"ranks {failed} failed:\n" + "\n".join((tmp / f"rank{r}.log").read_text()[-3000:] for r, _ in failed[:2])
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)]


def _enumerate_split(instance: Instance, cost_model: Any = None, apart: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, list, Any]:
    """Every plan where each table is whole on one device or cut into two equal column halves on two distinct devices
    (on any two when not `apart`), judged twice: with its whole tables table-wise, and with all of them marked
    column_wise (one collective; marking some only is never cheaper than both under the analytic judge: one
    all-to-all of summed widths is at most the sum of two). (cost [n], marked cost [n] (inf where memory does not
    hold), choices [n, T], each table's options [(item, devices)], the items)."""
    import itertools

    from costmodels.analytic import AnalyticCostModel
    from solvers.placement.split_items import build_items

    bm = (cost_model or AnalyticCostModel()).bind(instance)
    T, D = len(instance.tables), instance.topology.num_devices
    items = build_items(instance, bm, np.arange(T), 2, apart=True)
    caps = np.array(instance.topology.capacities())
    options = []  # per table: [(item, devices)]
    for t in range(T):
        its = range(int(items.first[t]), int(items.first[t + 1]))
        opts = [(its[0], (d,)) for d in range(D)]
        if len(its) > 1:
            pairs = itertools.combinations(range(D), 2) if apart else itertools.combinations_with_replacement(range(D), 2)
            opts += [(its[1], pair) for pair in pairs]
        options.append(opts)
    every = np.array(list(itertools.product(*[range(len(o)) for o in options])))
    n = len(every)
    states = np.zeros((n, D, bm.state_size))
    dims = np.zeros((n, 5, D))  # widths by output dist: whole tables table-wise (row 0), halves column-wise (row 1)
    use = np.zeros((n, D))
    for t in range(T):
        for k, (i, devs) in enumerate(options[t]):
            on = every[:, t] == k
            for d in devs:
                states[on, d] += items.states[i]
                dims[on, 0 if items.parts[i] == 1 else 1, d] += items.width[i]
                use[on, d] += items.size[i]
    compute = bm.compute_costs(states).sum(axis=-1)
    cost = (compute + bm.dist_comm_totals(dims)).max(axis=1)
    # the same plans with every whole table marked column_wise (Shard.column_wise): one all-to-all of all widths
    one = np.zeros_like(dims)
    one[:, 1] = dims.sum(axis=1)
    marked = (compute + bm.dist_comm_totals(one)).max(axis=1)
    over = (use > caps).any(axis=1)
    cost[over] = np.inf
    marked[over] = np.inf
    return cost, marked, every, options, items


def brute_force_split(instance: Instance, cost_model: Any = None, apart: bool = True, marked: bool = True) -> tuple[float, list]:
    """The best plan cost over every plan where each table is whole on one device or cut into two equal column
    halves on two distinct devices (on any two when not `apart`) -- what the exact solvers offer with
    max_split=2 -- memory respected; whole tables table-wise or all marked column_wise, whichever is cheaper (only
    table-wise when not `marked`)."""
    cost, with_marks, every, options, _ = _enumerate_split(instance, cost_model, apart)
    if marked:
        cost = np.minimum(cost, with_marks)
    j = int(np.argmin(cost))
    return float(cost[j]), [options[t][every[j, t]] for t in range(len(options))]


def brute_force_by_class(instance: Instance, cost_model: Any = None) -> dict[str, float]:
    """The best plan of `brute_force_split` (halves on any two devices, the same one included) in each class of the
    bound's plan classes by the collectives they run: whole tables only, table-wise ("table_wise"), every table
    column-wise (cut, or whole and marked so: "column_wise"), both ("mixed")."""
    cost, marked, every, options, items = _enumerate_split(instance, cost_model, apart=False)
    cut = np.zeros(every.shape, dtype=bool)
    for t, opts in enumerate(options):
        parts = np.array([items.parts[i] for i, _ in opts])
        cut[:, t] = parts[every[:, t]] > 1
    n_cut = cut.sum(axis=1)
    out = {}
    for name, keep in (("table_wise", n_cut == 0), ("column_wise", n_cut == len(options)), ("mixed", (n_cut > 0) & (n_cut < len(options)))):
        out[name] = float(cost[keep].min()) if keep.any() else float("inf")
    out["column_wise"] = min(out["column_wise"], float(marked.min()))  # (every whole table marked: all column-wise)
    return out


def solve_on_budget(name: str, instance: Instance, cost_model: Any, limit: float, *, seed: int = 0, **options: Any) -> Any:
    """A solve that a slow or busy machine does not change: a solver whose default is a work budget (cpsat: CP-SAT's
    deterministic time and the searches' counted work; neuroshard: its counted work; docs/architecture.md, "work
    budget") gets `limit` work seconds as that budget, so its plan is the same on any machine; the others (the MILPs,
    which have no deterministic clock here) a wall-clock limit of `limit` seconds."""
    from solvers.catalog import get_solver, spec_of

    solver = get_solver(name, **options)
    if spec_of(name).deterministic and hasattr(getattr(solver, "options", None), "default_time_limit"):
        return get_solver(name, default_time_limit=limit, **options).solve(instance, cost_model, seed=seed)
    return solver.solve(instance, cost_model, time_limit=limit, seed=seed)
