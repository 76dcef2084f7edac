"""Necessary conditions for a table-wise plan to exist, each with a reason a person can act on.

The published systems put a table that fits nowhere on the last device and carried on; here an instance that
fails one of these conditions is reported infeasible with the table or the byte count that makes it so.
"""

from __future__ import annotations

from shardopt.core.ir import Instance
from shardopt.core.memory import table_bytes_array


def infeasibility_reason(instance: Instance) -> str | None:
    """Why no table-wise plan can exist, or None when these necessary conditions hold.

    Conditions: every table fits on the largest device on its own; all tables fit in the devices' total memory.
    Passing them does not prove a plan exists (bin packing is NP-hard); failing either proves none does.
    """
    sizes = table_bytes_array(instance)
    caps = instance.topology.capacities()
    largest = max(caps)
    for t, size in zip(instance.tables, sizes):
        if size > largest:
            return (
                f"table {t.name!r} needs {int(size):,} bytes (weights and {instance.workload.optimizer.value} state) "
                f"but the largest device holds {largest:,} bytes: it fits on no device"
            )
    total, room = int(sizes.sum()), sum(caps)
    if total > room:
        return f"the tables need {total:,} bytes in all but the {len(caps)} devices hold {room:,}: short by {total - room:,} bytes"
    return None


def tiered_infeasibility_reason(instance: Instance) -> str | None:
    """Why no plan of any kind (row-wise splits, UVM placements included) can exist, or None.

    With row-wise shards a table is no longer bound to one device, and a UVM shard (`fused_uvm`) keeps nothing in
    HBM, so the one condition every plan needs is that the tables fit in all the cluster's HBM and host memory
    together. Failing it proves no plan exists; passing it is necessary only (shards are whole rows).
    """
    sizes = table_bytes_array(instance)
    topo = instance.topology
    hbm, host = sum(topo.capacities()), sum(topo.host_capacities())
    total = int(sizes.sum())
    if total > hbm + host:
        where = f"{hbm:,} bytes of HBM and {host:,} of host memory" if host else f"{hbm:,} bytes of HBM and no host memory"
        return f"the tables need {total:,} bytes in all but the {topo.num_devices} devices have {where}: short by {total - hbm - host:,} bytes"
    return None
