"""Any plan TorchRec can load, rated by TorchRec's own estimators: the second referee beside shardopt's cost model.

Why: each planner's plan wins under its own model (TorchRec's perf estimator prefers TorchRec's plan, shardopt's
analytic model shardopt's), so "better than TorchRec" must also be asked of TorchRec's model - and of a measured judge.
TorchRec's estimators price sharding options (a table's sharding type, compute kernel and shard sizes), not
placements; so each table of the plan becomes the one option TorchRec's enumerator makes under constraints that
leave it only the plan's choice (its sharding type and kernel; for column-wise and grid tables a `min_partition` of
the plan's piece width, so TorchRec cuts the same pieces; its cache load factor; its pooling factor), and the plan's
rank of each shard is set on the option's shard of the same offsets. The rating is TorchRec's: per rank the sum of
its shards' perf (forward and backward compute and comms, input dist, prefetch), the max over ranks - what its
partitioner minimises and its stats table shows. Plans TorchRec cannot load (shardopt.core.torchrec_form) and column
pieces of unequal width (TorchRec's enumerator cuts equal ones only) are refused naming the table.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from shardopt.core.ir import Instance, Plan, Shard
from shardopt.data.torchrec_io import (
    apply_optimizer,
    embedding_bag_configs,
    per_rank_batch,
    rank_of_placement,
    require_torchrec,
    to_torchrec_plan,
)
from solvers.torchrec_solver import aliased, rank_estimates, torchrec_topology


class NotRatable(ValueError):
    """TorchRec's estimators cannot rate this plan as it is (the message names the table and why)."""


def torchrec_rating(instance: Instance, plan: Plan | list[Shard], compute_device: str = "cuda") -> dict[str, Any]:
    """TorchRec's per-rank estimates of `plan` (solvers.torchrec_solver.rank_estimates: `per_rank`,
    `torchrec_perf_rating_ms`), on the instance's TorchRec topology for `compute_device`."""
    require_torchrec()
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import CacheParams

    shards = plan.shards if isinstance(plan, Plan) else list(plan)
    # (TorchRec's module dict refuses some names: the solver's aliases, renamed back in the errors; the placement
    # constraints, by table name, say nothing TorchRec's estimators price)
    planned = aliased(instance.model_copy(update={"constraints": None}))
    alias = {t.name: a.name for t, a in zip(instance.tables, planned.tables)}
    moved = [s.model_copy(update={"table": alias[s.table]}) for s in shards]
    try:
        sharding_plan = to_torchrec_plan(planned, moved, compute_device=compute_device).plan[""]
    except ValueError as exc:
        raise NotRatable(_named(str(exc), alias)) from None
    constraints: dict[str, Any] = {}
    for t in planned.tables:
        ps = sharding_plan[t.name]
        widths = {int(m.shard_sizes[1]) for m in ps.sharding_spec.shards} if ps.sharding_spec is not None else {t.dim}
        if len(widths) > 1:
            raise NotRatable(f"table {_named(repr(t.name), alias)}: column pieces of widths {sorted(widths)}; TorchRec's estimators price "
                             "a table cut into pieces of one width only")
        cache = CacheParams(load_factor=ps.cache_params.load_factor) if ps.cache_params is not None else None
        constraints[t.name] = ParameterConstraints(sharding_types=[ps.sharding_type], compute_kernels=[ps.compute_kernel],
                                                   min_partition=min(widths), pooling_factors=[t.pooling_factor], cache_params=cache)
    topology, _ = torchrec_topology(planned, compute_device)
    ebc = EmbeddingBagCollection(tables=embedding_bag_configs(planned), device=torch.device("meta"))
    apply_optimizer(planned, ebc)
    options = EmbeddingEnumerator(topology, per_rank_batch(planned), constraints=constraints).enumerate(ebc, [EmbeddingBagCollectionSharder()])
    by_table: dict[str, list[Any]] = defaultdict(list)
    for so in options:
        by_table[so.name].append(so)
    chosen = []
    for t in planned.tables:
        ps = sharding_plan[t.name]
        (so,) = by_table[t.name]  # (the constraints leave one option)
        if ps.sharding_spec is None:  # data-parallel: TorchRec's option holds a shard per rank
            for rank, sh in enumerate(so.shards):
                sh.rank = rank
        else:
            rank_at = {(tuple(m.shard_offsets)): rank_of_placement(str(m.placement)) for m in ps.sharding_spec.shards}
            for sh in so.shards:
                sh.rank = rank_at.get(tuple(sh.offset))
                if sh.rank is None:
                    raise NotRatable(f"table {_named(repr(t.name), alias)}: TorchRec cuts it at offsets {sh.offset}, which the plan has no "
                                     "shard at")
        chosen.append(so)
    return rank_estimates(planned, chosen)


def _named(text: str, alias: dict[str, str]) -> str:
    for real, a in alias.items():
        text = text.replace(repr(a), repr(real))
    return text
