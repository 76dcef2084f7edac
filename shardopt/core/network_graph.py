"""A topology's network as an explicit graph: devices, switches and links, read from a networkx node-link document.

Why a graph beside the levels: a rail-optimised or oversubscribed network makes a device's bandwidth depend on which
devices it talks to, which nested groups cannot say. The document is networkx's node-link JSON
(`networkx.node_link_data`), embedded as `topology.graph`:

    {"nodes": [{"id": "gpu0", "device": 0}, ..., {"id": "leaf0", "latency_s": 1e-6}, ...],
     "edges": [{"source": "gpu0", "target": "leaf0", "bandwidth": 5e10}, ...]}

(`"links"` is accepted for `"edges"`, as networkx wrote it before 3.4). A node with `device` is that device (each
of 0 .. num_devices - 1 exactly once; an optional `host` must be the one `devices_per_host` gives it); any other node
is a switch, whose `latency_s` (default 0) a path through it pays. A link is full duplex with `bandwidth` bytes/s in
each direction. The costing is costmodels/graph_comm.py; the checks here name the element that is wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NetworkGraph:
    """A checked graph: `graph` (networkx.Graph: node attribute `latency_s`, edge attribute `bandwidth`), the node of
    each device in device order."""

    graph: Any
    device_nodes: tuple[Any, ...]


def parse_network_graph(doc: Any, num_devices: int, devices_per_host: int) -> NetworkGraph:
    """The checked graph of a node-link document; ValueError naming the element (`graph.nodes[3]`, `graph.edges[5]
    (gpu1 - leaf0)`) for a bad one: a device missing or given twice, a device on the wrong host, a link of zero,
    negative or missing bandwidth, a link to a node that is not listed, a device no path reaches."""
    import networkx as nx

    if not isinstance(doc, dict):
        raise ValueError(f"graph: a node-link document (an object with nodes and edges), not {type(doc).__name__}")
    nodes = doc.get("nodes")
    key = "edges" if "edges" in doc else "links"
    edges = doc.get(key)
    if not isinstance(nodes, list) or not nodes:
        raise ValueError("graph.nodes: a non-empty list of nodes is required")
    if not isinstance(edges, list) or not edges:
        raise ValueError("graph.edges: a non-empty list of links is required")
    g = nx.Graph()
    device_node: dict[int, Any] = {}
    for i, n in enumerate(nodes):
        if not isinstance(n, dict) or "id" not in n:
            raise ValueError(f"graph.nodes[{i}]: a node is an object with an id")
        nid = n["id"]
        if not isinstance(nid, (str, int)) or isinstance(nid, bool):
            raise ValueError(f"graph.nodes[{i}].id: {nid!r} is not a string or an integer")
        if nid in g:
            raise ValueError(f"graph.nodes[{i}].id: {nid!r} is listed twice")
        latency = n.get("latency_s", 0.0)
        if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not math.isfinite(latency) or latency < 0:
            raise ValueError(f"graph.nodes[{i}].latency_s: {latency!r} must be a number >= 0")
        if "device" in n:
            d = n["device"]
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < num_devices:
                raise ValueError(f"graph.nodes[{i}].device: {d!r} is not a device index in 0..{num_devices - 1}")
            if d in device_node:
                raise ValueError(f"graph.nodes[{i}].device: device {d} is node {device_node[d]!r} already")
            if "host" in n and n["host"] != d // devices_per_host:
                raise ValueError(f"graph.nodes[{i}].host: device {d} says host {n['host']!r}, but devices_per_host {devices_per_host} "
                                 f"puts it on host {d // devices_per_host}")
            device_node[d] = nid
        g.add_node(nid, latency_s=float(latency), device=n.get("device"))
    missing = [d for d in range(num_devices) if d not in device_node]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise ValueError(f"graph.nodes: no node for device(s) {shown} (each device of num_devices {num_devices} is one node with \"device\")")
    for i, e in enumerate(edges):
        if not isinstance(e, dict) or "source" not in e or "target" not in e:
            raise ValueError(f"graph.{key}[{i}]: a link is an object with source and target")
        u, v = e["source"], e["target"]
        where = f"graph.{key}[{i}] ({u} - {v})"
        for end in (u, v):
            if end not in g:
                raise ValueError(f"{where}: node {end!r} is not in graph.nodes")
        if u == v:
            raise ValueError(f"{where}: a link joins two different nodes")
        bw = e.get("bandwidth")
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or not math.isfinite(bw) or bw <= 0:
            raise ValueError(f"{where}.bandwidth: {bw!r} must be a number > 0 (bytes/s in each direction)")
        if g.has_edge(u, v):
            raise ValueError(f"{where}: the link is listed twice (give one link its whole bandwidth)")
        g.add_edge(u, v, bandwidth=float(bw))
    devices = [device_node[d] for d in range(num_devices)]
    reach = nx.node_connected_component(g, devices[0])
    cut_off = [d for d in range(num_devices) if devices[d] not in reach]
    if cut_off:
        shown = ", ".join(map(str, cut_off[:8])) + (" ..." if len(cut_off) > 8 else "")
        raise ValueError(f"graph: no path joins device(s) {shown} to device 0 (the network graph is disconnected)")
    return NetworkGraph(g, tuple(devices))


def two_level_graph(num_devices: int, devices_per_host: int, intra_bandwidth: float, inter_bandwidth: float,
                    network_latency_s: float = 0.0) -> dict[str, Any]:
    """The node-link document of the two levels of old as a graph: each device linked to its host's NVSwitch
    (`intra_bandwidth`) and, with several hosts, to one network switch (`inter_bandwidth`, `network_latency_s` to
    cross it). Priced by the graph model, it costs what the two-level model does: a starting point for describing
    one's own network (replace the network switch by leaves and spines, give links their own bandwidths)."""
    hosts = num_devices // devices_per_host
    nodes: list[dict[str, Any]] = [{"id": f"gpu{d}", "device": d, "host": d // devices_per_host} for d in range(num_devices)]
    edges: list[dict[str, Any]] = []
    if devices_per_host > 1:
        nodes += [{"id": f"nvswitch{h}"} for h in range(hosts)]
        edges += [{"source": f"gpu{d}", "target": f"nvswitch{d // devices_per_host}", "bandwidth": intra_bandwidth} for d in range(num_devices)]
    if hosts > 1:
        nodes.append({"id": "network", "latency_s": network_latency_s})
        edges += [{"source": f"gpu{d}", "target": "network", "bandwidth": inter_bandwidth} for d in range(num_devices)]
    return {"directed": False, "multigraph": False, "graph": {}, "nodes": nodes, "edges": edges}
