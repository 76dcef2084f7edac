"""`shardopt inspect INSTANCE.json --draw FILE.svg`: a picture of the network a topology is priced with.

A graph (`topology.graph`) is drawn as it is: devices as squares, switches as circles, each link as wide as the log
of its bandwidth and, on small graphs, labelled with it. Levels (listed or the two of old) are drawn as the tree of
their groups - the job, then each level's groups, down to the hosts - each row labelled with its level's bandwidth;
the devices themselves are left out above 64 of them (a host box says how many it holds).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

LABELLED_LINKS = 60  # links labelled with their bandwidth on graphs at most this large
DRAWN_DEVICES = 64  # levels' trees show the devices at most this many


def draw_topology(topology: Any, profile: Any, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    fig, ax = plt.subplots(figsize=(11, 7))
    if topology.graph is not None:
        from shardopt.core.network_graph import parse_network_graph

        g = parse_network_graph(topology.graph, topology.num_devices, topology.devices_per_host).graph
        pos = nx.kamada_kawai_layout(g) if g.number_of_nodes() <= 150 else nx.spring_layout(g, seed=0)
        devices = [n for n, d in g.nodes(data=True) if d.get("device") is not None]
        switches = [n for n, d in g.nodes(data=True) if d.get("device") is None]
        bws = [d["bandwidth"] for _, _, d in g.edges(data=True)]
        lo = min(bws)
        nx.draw_networkx_edges(g, pos, ax=ax, width=[0.8 + 1.5 * math.log10(b / lo + 1) for b in bws], edge_color="#888888")
        nx.draw_networkx_nodes(g, pos, nodelist=switches, node_shape="o", node_color="#cccccc", node_size=420, ax=ax)
        nx.draw_networkx_nodes(g, pos, nodelist=devices, node_shape="s", node_color="#4c72b0", node_size=300, ax=ax)
        nx.draw_networkx_labels(g, pos, font_size=7, ax=ax)
        if g.number_of_edges() <= LABELLED_LINKS:
            nx.draw_networkx_edge_labels(g, pos, edge_labels={(u, v): f"{d['bandwidth'] / 1e9:.3g} GB/s" for u, v, d in g.edges(data=True)},
                                         font_size=6, ax=ax)
        ax.set_title(f"{topology.num_devices} devices, {len(switches)} switches, {g.number_of_edges()} links (topology.graph)")
    else:
        from shardopt.core.levels import comm_levels

        levels = list(comm_levels(topology, profile))
        # the job, each level's groups and the hosts (they nest: a level holds whole hosts or lies inside one), outermost first
        sizes = {lv.devices for lv in levels} | {topology.num_devices, topology.devices_per_host}
        show_devices = topology.num_devices <= DRAWN_DEVICES
        rows = sorted((s for s in sizes if s > 1), reverse=True) + ([1] if show_devices else [])
        tree = nx.DiGraph()
        for depth, size in enumerate(rows):
            for k in range(topology.num_devices // size):
                tree.add_node((depth, k), label=str(k) if size == 1 else str(size))
                if depth:
                    tree.add_edge((depth - 1, k * size // rows[depth - 1]), (depth, k))
        # each group centred over its devices, one row per level (outermost on top): no crossing lines
        pos = {(depth, k): ((k + 0.5) * rows[depth] / topology.num_devices, -float(depth)) for depth, k in tree.nodes}
        nx.draw_networkx_edges(tree, pos, ax=ax, arrows=False, edge_color="#888888")
        nx.draw_networkx_nodes(tree, pos, ax=ax, node_shape="s", node_color="#4c72b0", node_size=260 if len(tree) < 200 else 60)
        if len(tree) <= 120:
            nx.draw_networkx_labels(tree, pos, labels=nx.get_node_attributes(tree, "label"), font_size=6, font_color="white", ax=ax)
        by_size = {lv.devices: lv for lv in levels}
        for depth, size in enumerate(rows):
            y = pos[(depth, 0)][1]
            lv = by_size.get(rows[depth - 1]) if depth else None
            own = by_size.get(size)
            kind = (f"{own.name}s of {size}" if own is not None else f"hosts of {size}" if size == topology.devices_per_host
                    else f"groups of {size}" if size > 1 else "devices")
            text = f"{topology.num_devices} devices" if depth == 0 else kind + (
                f" - linked to one another by the {lv.name} level, {lv.bandwidth / 1e9:.3g} GB/s" if lv else "")
            ax.annotate(text, xy=(1.02, y), xycoords=("axes fraction", "data"), fontsize=8, va="center")
        where = "topology.levels" if topology.levels is not None else f"the {profile.name} profile's two levels"
        ax.set_title(" -> ".join(f"{lv.name} ({lv.devices}, {lv.bandwidth / 1e9:.3g} GB/s)" for lv in levels) + f"  [{where}]", fontsize=9)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
