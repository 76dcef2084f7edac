"""TorchRec's planner arguments as ShardoptPlanner reads them: what maps, and what is refused by name.

Why a module of its own: a drop-in for `EmbeddingShardingPlanner` must take every argument a training script passes
it, and each has a rule here - mapped onto the instance or the solve (storage reservations priced by TorchRec's own
`reserve`, `timeout_seconds` as the time limit, `enumerator`'s constraints and batch), kept for the log (`debug`,
`stats`), or refused naming the argument where it is a part of TorchRec's own search that shardopt's solver replaces
(`proposer`, `partitioner`, `performance_model`, `callbacks`, `plan_loader`). The defaults follow TorchRec: no
topology means TorchRec's default topology of the running job; the compute device decides the hardware profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardopt.core.errors import UserError
from shardopt.core.hardware import DEFAULT_PROFILE, PROFILES

# TorchRec's planner keeps this share of each rank's HBM for the dense part of the model and its activations
# (torchrec.distributed.planner.storage_reservations.HeuristicalStorageReservation's default percentage)
DEFAULT_STORAGE_RESERVATION = 0.15
# the per-rank batch TorchRec's planner assumes when none is given (torchrec.distributed.planner.constants.BATCH_SIZE)
TORCHREC_DEFAULT_BATCH = 512
# TorchRec versions whose own checkpoint reload (`dmp.load_state_dict(dmp.state_dict())`) restores a table cut into
# column slices of unequal widths: none known. 1.8.0 fails on every rank (tests/test_torchrec_user_model.py runs it);
# a version added here lets plans for it keep uneven widths (shardopt.core.torchrec_form).
RELOADS_UNEVEN_COLUMNS: frozenset[str] = frozenset()
# TorchRec's own search components, which shardopt's solver replaces: refused by name where given
SEARCH_PARTS = ("proposer", "partitioner", "performance_model", "callbacks", "plan_loader")


class PlannerInputError(UserError, ValueError):
    """The module, topology or constraints ask for something this planner cannot plan (the message names it)."""


def refuse_search_parts(given: dict[str, Any], solver: str) -> None:
    """PlannerInputError naming the first of TorchRec's search components given (module docstring)."""
    for name in SEARCH_PARTS:
        value = given.get(name)
        if value is not None and value != []:
            raise PlannerInputError(
                f"{name}: {type(value).__name__} is a part of TorchRec's own search, which shardopt's solver ({solver!r}) replaces; "
                f"leave it out (solver=... chooses the search, cost_model=... how plans are priced)")


def even_columns_default() -> bool:
    """Whether plans for the installed TorchRec must cut tables into column slices of one width: unless its version
    reloads uneven ones (RELOADS_UNEVEN_COLUMNS)."""
    import torchrec

    return str(getattr(torchrec, "__version__", "")).split("+")[0] not in RELOADS_UNEVEN_COLUMNS


def default_topology() -> Any:
    """TorchRec's default topology of the running job (EmbeddingPlannerBase without a topology): the world and local
    sizes of the default process group, the device type, the NVLink domain multiple."""
    import torch.distributed as dist
    from torchrec.distributed.planner import planners as tp
    from torchrec.distributed.planner.types import Topology

    if not dist.is_initialized():
        raise PlannerInputError("topology: None, and no process group to read the job's world size from (pass TorchRec's Topology, "
                                "or call torch.distributed.init_process_group first)")
    return Topology(local_world_size=tp.get_local_size(), world_size=dist.get_world_size(), compute_device=tp.get_device_type(),
                    pod_size=tp.get_topology_domain_multiple())


def default_hardware(compute_device: str) -> tuple[str, str | None]:
    """The hardware profile for a topology's compute device, and a note when it is a guess: `cpu` on CPU; on CUDA the
    profile of this machine's GPU where one names it, else DEFAULT_PROFILE (said so)."""
    if compute_device == "cpu":
        return "cpu", None
    from shardopt.core.fingerprint import gpu_profile_name

    try:
        import torch

        if torch.cuda.is_available():
            name = torch.cuda.get_device_name(0)
            found = gpu_profile_name(name)
            if found is not None:
                return found, None
            return DEFAULT_PROFILE, f"hardware: no profile names this machine's GPU ({name}); priced as {DEFAULT_PROFILE} (pass hardware=...)"
    except Exception:  # noqa: BLE001 - a broken CUDA set-up must not stop planning: the default profile is said
        pass
    return DEFAULT_PROFILE, (f"hardware: compute device {compute_device!r} but no GPU visible here; priced as {DEFAULT_PROFILE} "
                             f"(pass hardware=... among {', '.join(sorted(PROFILES))})")


@dataclass(frozen=True)
class RankMemory:
    """Each rank's memory for the tables after the reservation (HBM on CUDA, DDR on CPU) and host memory for UVM (CUDA
    only), and how the reservation was priced (for the log)."""

    memory: list[int]
    host: list[int]
    how: str


def rank_memory(topology: Any, reservation: Any, batch_size: int, module: Any, sharders: list[Any], constraints: dict[str, Any]) -> RankMemory:
    """The memory left for the tables: `reservation` a share in [0, 1) of each rank's memory (shardopt's own), or one
    of TorchRec's StorageReservation objects, whose `reserve` prices it as TorchRec's planner does (Heuristical: the
    share plus the dense part of the model and the input buffers; FixedPercentage: the share of HBM; and any other
    with TorchRec's interface)."""
    cuda = topology.compute_device == "cuda"
    if hasattr(reservation, "reserve"):
        from torchrec.distributed.planner.types import PlannerError

        try:
            reserved = reservation.reserve(topology=topology, batch_size=batch_size, module=module, sharders=sharders,
                                           constraints=constraints or None)
        except PlannerError as exc:
            raise PlannerInputError(f"storage_reservation: {type(reservation).__name__} leaves no memory for the tables: {exc}") from None
        memory = [int(d.storage.hbm) if cuda else int(d.storage.ddr) for d in reserved.devices]
        host = [int(d.storage.ddr) for d in reserved.devices] if cuda else [0] * len(memory)
        how = f"TorchRec's {type(reservation).__name__}"
    else:
        share = float(reservation)
        if not (math.isfinite(share) and 0.0 <= share < 1.0):
            raise PlannerInputError(f"storage_reservation: {reservation!r} must be a share in [0, 1) or a TorchRec StorageReservation")
        full = [int(d.storage.hbm) if cuda else int(d.storage.ddr) for d in topology.devices]
        memory = [int(m * (1.0 - share)) for m in full]
        host = [int(d.storage.ddr) for d in topology.devices] if cuda else [0] * len(memory)
        how = f"{share:.0%} of each rank's {'HBM' if cuda else 'memory'} kept back"
    if not memory or min(memory) <= 0:
        worst = memory.index(min(memory)) if memory else 0
        raise PlannerInputError(f"topology: rank {worst} has no memory left for tables ({min(memory) if memory else 0:,} bytes after "
                                f"the storage reservation: {how})")
    return RankMemory(memory, host, how)


def enumerator_inputs(enumerator: Any) -> tuple[dict[str, Any] | None, int | None, str | None]:
    """What an enumerator carries that the planner also takes (its constraints and batch, for where the planner's
    own are not given), and a note for the log: its estimators price TorchRec's options, not shardopt's plans."""
    if enumerator is None:
        return None, None, None
    constraints = getattr(enumerator, "_constraints", None)
    batch = getattr(enumerator, "_batch_size", None)
    return (dict(constraints) if constraints else None, int(batch) if batch else None,
            f"enumerator: {type(enumerator).__name__}'s constraints and batch are read; its estimators are not used "
            "(shardopt's cost model prices the plans)")
