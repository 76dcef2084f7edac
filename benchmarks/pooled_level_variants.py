"""Instances whose networks go beyond the certified bound's two roles (levels, a graph), for measuring the bound that
bounds them (docs/analytic-bound.md, "Three levels or more") with `bench_topology_levels.py --bound-limit S`.
Simulated (analytic judge); nothing is timed here.

* `-pod`: the 288-GPU nvl72-test instances with a pod of two racks between the NVLink domain and the spine (the
  racks of a pod reach each other at 100 GB/s, other pods at the spine's 50 GB/s): domain -> pod -> network;
* `-pcie`: production-all-s0-0000 (856 tables x 128 A100s in hosts of 8) as PCIe servers with NVLink-bridged
  pairs: pair (2, 112.5 GB/s) -> host (8, PCIe 32 GB/s) -> network (25 GB/s): a level inside a host;
* `-spine`: the same job's hosts as a network graph: NVSwitch (300 GB/s) in each host, each GPU's NIC (25 GB/s) on
  its host's leaf switch, every leaf on one spine by an uplink of 8 x 25 / 4 = 50 GB/s (4:1 oversubscribed).

    .venv/bin/python benchmarks/pooled_level_variants.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shardopt.core.ir import Instance, load_instance  # noqa: E402

GB = 1e9


def with_levels(inst: Instance, suffix: str, levels: list[dict]) -> Instance:
    doc = inst.model_dump(mode="json")
    doc["name"] = f"{inst.name}-{suffix}"
    doc["topology"]["levels"] = levels
    return Instance.model_validate(doc)


def variants() -> list[Instance]:
    out = []
    for name in ("nvl72-test-s1-0001", "nvl72-test-s1-0003"):
        inst = load_instance(ROOT / "instances/suites/nvl72-test" / f"{name}.json")
        domain, network = inst.topology.levels
        out.append(with_levels(inst, "pod", [domain.model_dump(mode="json"),
                                             {"name": "pod", "devices": 2 * domain.devices, "bandwidth": 100 * GB, "latency_s": 5e-6},
                                             network.model_dump(mode="json")]))
    prod = load_instance(ROOT / "instances/suites/production/production-all-s0-0000.json")
    D = prod.topology.num_devices
    out.append(with_levels(prod, "pcie", [{"name": "nvlink_pair", "devices": 2, "bandwidth": 112.5 * GB, "latency_s": 0.0},
                                          {"name": "pcie_host", "devices": 8, "bandwidth": 32 * GB, "latency_s": 2e-6},
                                          {"name": "network", "devices": D, "bandwidth": 25 * GB, "latency_s": 1e-5}]))
    out.append(leaf_spine(prod, "spine", nvlink=300 * GB, nic=25 * GB, oversubscription=4.0))
    return out


def leaf_spine(inst: Instance, suffix: str, *, nvlink: float, nic: float, oversubscription: float) -> Instance:
    """`inst`'s hosts as a network graph: each host's devices on its NVSwitch (`nvlink`) and on its leaf switch
    (`nic` each), every leaf joined to one spine by an uplink of the host's NIC bandwidth over `oversubscription`."""
    topo = inst.topology
    D, L = topo.num_devices, topo.devices_per_host
    nodes = [{"id": f"g{d}", "device": d} for d in range(D)]
    edges = []
    for h in range(D // L):
        nodes += [{"id": f"nvs{h}"}, {"id": f"leaf{h}", "latency_s": 1e-6}]
        for d in range(h * L, (h + 1) * L):
            edges += [{"source": f"g{d}", "target": f"nvs{h}", "bandwidth": nvlink},
                      {"source": f"g{d}", "target": f"leaf{h}", "bandwidth": nic}]
        edges.append({"source": f"leaf{h}", "target": "spine", "bandwidth": L * nic / oversubscription})
    nodes.append({"id": "spine", "latency_s": 5e-6})
    doc = inst.model_dump(mode="json")
    doc["name"] = f"{inst.name}-{suffix}"
    doc["topology"]["graph"] = {"nodes": nodes, "edges": edges}
    for name in ("intra_host_bandwidth", "inter_host_bandwidth", "levels"):
        doc["topology"].pop(name, None)
    return Instance.model_validate(doc)


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for inst in variants():
        path = out / f"{inst.name}.json"
        path.write_text(inst.model_dump_json(indent=1))
        print(path)


if __name__ == "__main__":
    main()
