"""Greedy on an instance given the network graph of its two levels (shardopt.core.network_graph.two_level_graph):
the time to bind the graph model and to solve, and the plan cost (simulated). Run against two trees to compare:

    .venv/bin/python benchmarks/bench_graph_greedy.py REPO_ROOT INSTANCE.json
"""
import json
import sys
import time

sys.path.insert(0, sys.argv[1])
from costmodels.analytic import AnalyticCostModel
from shardopt.core.hardware import get_profile
from shardopt.core.ir import Instance, load_instance
from shardopt.core.network_graph import two_level_graph
from solvers.catalog import get_solver

inst = load_instance(sys.argv[2])
topo, prof = inst.topology, get_profile(inst.topology.hardware)
doc = json.loads(inst.model_dump_json())
doc["topology"]["graph"] = two_level_graph(topo.num_devices, topo.devices_per_host, prof.nvlink_bandwidth, prof.network_bandwidth, prof.network_latency_s)
g = Instance.model_validate(doc)
cm = AnalyticCostModel()
t = time.perf_counter()
bm = cm.bind(g)
bind = time.perf_counter() - t
t = time.perf_counter()
r = get_solver("greedy").solve(g, cm, seed=0)
wall = time.perf_counter() - t
print(sys.argv[1], inst.name, "bind", round(bind, 1), "greedy", round(wall, 1), "cost", cm.plan_costs(g, r.plan).max_cost)
