"""Where the long work runs: a local process pool (the default) or a Ray cluster (`--engine ray`).

Why one seam: a leaderboard over thousands of instances, NeuroShard-scale cost data and re-timing plans on real GPUs
outgrow one machine, and every one of them is the same shape - many independent tasks whose results go to *one*
writer (the SQLite store, a JSONL file), which keeps the stores' guarantees (unique keys, resumable, nothing lost,
nothing twice) whatever ran the tasks. An engine runs a module-level function over a list of items and yields
`(index, result)` as each finishes; the caller writes each result the moment it arrives, so a driver killed at any
point loses only the tasks in flight, and the next run resumes from the store.

- `LocalEngine(jobs)`: `jobs` worker processes (1: in this process), at most 2 x jobs tasks in flight so an
  interrupted run wastes little.
- `RayEngine(address)`: each item a Ray task, asking for `Resources` (one CPU; a GPU for the cuda backend's timing).
  A worker killed mid-task (its node lost, its process killed) is retried by Ray (`max_retries`) on any worker that
  has the resources; its result still comes back once, so the row lands once. `address=None` starts a local Ray
  (`num_cpus`), `"auto"` joins the cluster this machine is part of (`ray start --head` / `ray start --address`).
  Ray is imported only here and only when a RayEngine is made: `--engine local` never loads it.

A task's own failure (a solver raising) is the task function's business: the project's task functions turn it into
a failed row. An exception that escapes a task, or a task whose workers died more than `max_retries` times, stops
the run with an EngineError naming the item; what finished before it is already written.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from shardopt.core.errors import UserError

T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("local", "ray")
RAY_PIN = "ray==2.60.0"  # the [ray] extra's pin (pyproject.toml); a test keeps the two in step


class EngineError(UserError, ValueError):
    """A request the engine cannot serve (unknown engine, Ray missing or unreachable) or a task that failed for
    good. A ValueError: the CLI reports it as bad input (exit 2) with the message."""

    error_kind = "engine"


@dataclass(frozen=True)
class Resources:
    """What one task asks of the worker that runs it (Ray's num_cpus / num_gpus; the local engine runs one task per
    process and ignores them)."""

    cpus: float = 1.0
    gpus: float = 0.0


def timing_resources(backend: str) -> Resources:
    """A timing task's resources: a GPU for the cuda backend, one CPU otherwise."""
    return Resources(cpus=1.0, gpus=1.0 if backend == "cuda" else 0.0)


class Engine(ABC):
    name: str = "engine"

    @property
    @abstractmethod
    def slots(self) -> int:
        """How many tasks can run at once (for messages and the in-flight window)."""

    @abstractmethod
    def run(self, fn: Callable[[T], R], items: Sequence[T], *, resources: Resources = Resources()) -> Iterator[tuple[int, R]]:
        """`fn(item)` for every item, yielded as (index into items, result) in the order they finish. `fn` must be a
        module-level function and the items picklable (they travel to worker processes)."""

    def describe(self) -> str:
        return self.name

    def close(self) -> None:  # noqa: B027 - a hook: most engines hold nothing to release
        """Release what the engine started (a local Ray it initialised)."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LocalEngine(Engine):
    name = "local"

    def __init__(self, jobs: int = 1):
        if jobs < 1:
            raise EngineError(f"--jobs: {jobs} must be >= 1")
        self.jobs = jobs

    @property
    def slots(self) -> int:
        return self.jobs

    def describe(self) -> str:
        return f"local ({self.jobs} process{'es' if self.jobs > 1 else ''})"

    def run(self, fn: Callable[[T], R], items: Sequence[T], *, resources: Resources = Resources()) -> Iterator[tuple[int, R]]:
        if self.jobs == 1 or len(items) <= 1:
            for i, item in enumerate(items):
                yield i, fn(item)
            return
        with ProcessPoolExecutor(max_workers=self.jobs) as pool:
            pending: dict[Any, int] = {}
            queue = iter(enumerate(items))
            try:
                for i, item in queue:
                    pending[pool.submit(fn, item)] = i
                    if len(pending) >= 2 * self.jobs:
                        break
                while pending:
                    finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                    for fut in finished:
                        i = pending.pop(fut)
                        yield i, fut.result()
                        nxt = next(queue, None)
                        if nxt is not None:
                            pending[pool.submit(fn, nxt[1])] = nxt[0]
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise


class RayEngine(Engine):
    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, max_retries: int = 3, in_flight: int | None = None):
        try:
            import ray
        except ImportError:
            raise EngineError(f"--engine ray: Ray is not installed; pip install 'shardopt[ray]' (or {RAY_PIN})") from None
        self._ray = ray
        self.address = address
        self.max_retries = max_retries
        self._owned = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
            if address is None:
                kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"the cluster at {address!r}" if address else "a local Ray"
                raise EngineError(f"--engine ray: cannot start or reach {where}: {exc}") from None
            self._owned = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.in_flight = in_flight or max(2, 2 * cpus)

    @property
    def slots(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def describe(self) -> str:
        res = self._ray.cluster_resources()
        gpus = int(res.get("GPU", 0))
        where = self.address or "local"
        return f"ray ({where}: {int(res.get('CPU', 0))} CPUs" + (f", {gpus} GPUs" if gpus else "") + ")"

    def run(self, fn: Callable[[T], R], items: Sequence[T], *, resources: Resources = Resources()) -> Iterator[tuple[int, R]]:
        ray = self._ray
        if resources.gpus > 0 and self._ray.cluster_resources().get("GPU", 0) < resources.gpus:
            raise EngineError(f"--engine ray: the tasks ask for {resources.gpus:g} GPU each but the cluster has "
                              f"{self._ray.cluster_resources().get('GPU', 0):g}: start GPU workers (ray start --num-gpus ...)")
        remote = ray.remote(fn).options(num_cpus=resources.cpus, num_gpus=resources.gpus, max_retries=self.max_retries,
                                        retry_exceptions=False)
        pending: dict[Any, int] = {}
        queue = iter(enumerate(items))
        try:
            for i, item in queue:
                pending[remote.remote(item)] = i
                if len(pending) >= self.in_flight:
                    break
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - a task that failed for good ends the run, by name
                        raise EngineError(f"task {i} ({_short(items[i])}) failed on the Ray cluster: {type(exc).__name__}: {exc}") from exc
                    yield i, result
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending[remote.remote(nxt[1])] = nxt[0]
        except BaseException:
            # (a gentle cancel: a queued task is dropped, a running one gets a KeyboardInterrupt, and no worker is
            # killed under the raylet. A CI run once lost the driver process itself - exit 1, no output - in the test
            # that interrupts a collection, when this cancel forced; not reproduced on the 2-core VM in 22 runs.)
            for ref in pending if ray.is_initialized() else []:
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - best effort: the run is ending anyway
                    pass
            raise

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
            self._owned = False


def _short(item: Any) -> str:
    text = repr(item)
    return text if len(text) <= 160 else text[:157] + "..."


def call(job: tuple[Callable[..., R], tuple, dict]) -> R:
    """`fn(*args, **kwargs)` for a job `(fn, args, kwargs)`: any module-level function as an engine task."""
    fn, args, kwargs = job
    return fn(*args, **kwargs)


@contextlib.contextmanager
def results(engine: Engine, fn: Callable[[T], R], items: Sequence[T], *, resources: Resources = Resources()) -> Iterator[Iterator[tuple[int, R]]]:
    """`engine.run`'s results, closed as the block ends, also by an exception (an interrupted collection): its
    tasks are cancelled then and there. Why: a generator an exception leaves open is closed - and cancels its tasks -
    whenever it is garbage-collected (a traceback can hold it for long), on Ray possibly after ray.shutdown."""
    gen = engine.run(fn, items, resources=resources)
    try:
        yield gen
    finally:
        gen.close()


def run_one(engine: Engine, fn: Callable[..., R], *args: Any, resources: Resources = Resources(), **kwargs: Any) -> R:
    """One call of `fn` on the engine (a measured judge re-timing a plan on a cluster's GPU worker), its result."""
    with results(engine, call, [(fn, args, kwargs)], resources=resources) as out:
        for _, result in out:
            return result
    raise EngineError("the engine returned no result")  # (cannot happen: one item in, one out)


def make_engine(name: str = "local", *, jobs: int = 1, address: str | None = None, num_cpus: int | None = None) -> Engine:
    """The engine `--engine NAME [--address ADDR] [--jobs N]` asks for."""
    if name == "local":
        if address is not None:
            raise EngineError("--address: only with --engine ray")
        return LocalEngine(jobs)
    if name == "ray":
        return RayEngine(address, num_cpus=num_cpus)
    raise EngineError(f"--engine: unknown engine {name!r} (known: {', '.join(ENGINES)})")
