"""The RL solvers: the Gymnasium placement env, the DreamShard / AutoShard policies, training, checkpoints.

Training runs here are a few seconds on 50-table instances (torch on 1 thread)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, instance_doc

from costmodels.registry import get_cost_model
from shardopt.core.feasibility import infeasibility_reason, tiered_infeasibility_reason
from shardopt.core.ir import instance_from_dict, load_instance, to_dict
from shardopt.core.plan_check import check_plan
from solvers.base import SolveStatus
from solvers.catalog import get_solver, solver_names
from solvers.rl.common import (
    CHECKPOINT_DIR,
    FD,
    FT,
    Context,
    Lanes,
    NumpyPolicy,
    TrainSettings,
    load_checkpoint,
    load_policy,
    load_policy_file,
    mean_sampled_cost,
    rollout,
)
from solvers.rl.train import load_suite, train_policy

SUITES = ROOT / "instances" / "suites"
EXAMPLES = ROOT / "instances" / "examples"
ALGOS = ["dreamshard", "autoshard"]


@pytest.fixture(scope="module")
def analytic():
    return get_cost_model("analytic")


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory) -> Path:
    """Four 50-table x 4-device instances of the dreamshard train suite, copied into a suite directory."""
    d = tmp_path_factory.mktemp("tiny-suite")
    files = sorted((SUITES / "dreamshard-train").glob("dreamshard-train-*.json"))
    picked = [f for f in files if len(load_instance(f).tables) == 50 and load_instance(f).topology.num_devices == 4][:4]
    assert len(picked) == 4
    for f in picked:
        shutil.copy(f, d / f.name)
    return d


def _mod(algo: str):
    import importlib

    return importlib.import_module(f"solvers.rl.{algo}")


# ---------------------------------------------------------------------------------------------------------------
# the environment


def test_env_passes_gymnasium_checker():
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    from solvers.rl.env import ENV_ID

    check_env(gym.make(ENV_ID).unwrapped)
    env = gym.make(ENV_ID, instances=SUITES / "dreamshard-train", reward="step", max_devices=16)
    check_env(env.unwrapped)


@pytest.mark.parametrize("reward", ["terminal", "step"])
def test_env_episode_return_is_minus_plan_cost(reward, analytic):
    from solvers.rl.env import PlacementEnv

    inst = load_instance(EXAMPLES / "small.json")
    env = PlacementEnv(inst, analytic, reward=reward)
    obs, info = env.reset(seed=0)
    assert obs["devices"].shape == (4, FD) and obs["table"].shape == (FT,)
    total, done, steps = 0.0, False, 0
    while not done:
        mask = env.action_masks()
        assert mask.any() and np.array_equal(mask, obs["action_mask"].astype(bool))
        obs, r, done, trunc, info = env.step(int(np.flatnonzero(mask)[-1]))
        total += r
        steps += 1
    assert steps == len(inst.tables) and not trunc
    shards = env.shards()
    assert check_plan(inst, shards).ok
    cost = analytic.bind(inst).plan_costs(shards).max_cost
    assert info["plan_cost_ms"] == pytest.approx(cost)
    scale = env._ctx.scale
    start = float(env._ctx.empty_comm.max())
    expected = -cost / scale if reward == "terminal" else -(cost - start) / scale
    assert total == pytest.approx(expected)


def test_env_judge_gives_the_final_reward(analytic):
    from solvers.rl.env import PlacementEnv

    inst = load_instance(EXAMPLES / "small.json")
    env = PlacementEnv(inst, analytic, judge=lambda instance, shards: 7.0)
    env.reset(seed=0)
    done = False
    while not done:
        _, r, done, _, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert info["plan_cost_ms"] == 7.0 and r == pytest.approx(-7.0 / env._ctx.scale)


def test_env_masks_devices_without_room_and_ends_on_invalid_actions(analytic):
    from solvers.rl.env import PlacementEnv

    # 4 tables of 4,000 bytes (sgd: rows x dim x 4); device 0 holds 5,000 bytes, device 1 holds 20,000
    inst = instance_doc([(250, 4, 1.0)] * 4, [5_000, 20_000])
    env = PlacementEnv(inst, analytic, max_devices=4, safe_mask=False)
    obs, _ = env.reset(seed=0)
    assert obs["device_mask"].tolist() == [1, 1, 0, 0]
    assert env.action_masks().tolist() == [True, True, False, False]
    env.step(0)
    assert env.action_masks().tolist() == [False, True, False, False]  # device 0 is full
    _, r, terminated, _, info = env.step(0)
    assert terminated and info["invalid_action"] and r < 0
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(3)  # a padded device
    assert terminated and info["invalid_action"]


def test_safe_mask_keeps_a_completion(analytic):
    # two devices of 10,000 bytes; tables of 6,000, 6,000, 4,000, 4,000: the two 4,000s must not share a device
    inst = instance_doc([(250, 4, 1.0), (250, 4, 1.0), (375, 4, 1.0), (375, 4, 1.0)], [10_000, 10_000])
    ctx = Context(inst, analytic.bind(inst))
    order = np.array([0, 1, 2, 3])  # the two small tables first
    lanes = Lanes(ctx, 1, order, safe=True)
    ob = lanes.observe()
    assert ob.mask[0].tolist() == [True, True]
    lanes.apply(np.array([0]), ob)
    ob = lanes.observe()
    assert ob.room[0].tolist() == [True, True] and ob.mask[0].tolist() == [False, True]
    unsafe = Lanes(ctx, 1, order, safe=False)
    ob = unsafe.observe()
    unsafe.apply(np.array([0]), ob)
    assert unsafe.observe().mask[0].tolist() == [True, True]


# ---------------------------------------------------------------------------------------------------------------
# policies: numpy inference agrees with the torch networks it was exported from


class _Recorder(NumpyPolicy):
    def __init__(self, inner: NumpyPolicy):
        super().__init__(inner.arrays, inner.meta)
        self.inner, self.logits = inner, []

    def start(self, k):
        return self.inner.start(k)

    def step(self, state, ob):
        logits, state, extra = self.inner.step(state, ob)
        self.logits.append(logits.copy())
        return logits, state, extra


@pytest.mark.parametrize("algo", ALGOS)
def test_numpy_inference_matches_torch(algo, analytic):
    import torch

    mod = _mod(algo)
    torch.manual_seed(0)
    net = mod.make_net(32)
    rec = _Recorder(mod.numpy_policy(net, 32))
    inst = load_instance(EXAMPLES / "small.json")
    ctx = Context(inst, analytic.bind(inst))
    ro = rollout(ctx, rec, 3, np.random.default_rng(0), record=True)
    r = ro.record
    T, K = r["actions"].shape
    tab = torch.as_tensor(r["tab"], dtype=torch.float32)[:, None, :].expand(T, K, FT)
    with torch.no_grad():
        out = net(tab, torch.as_tensor(r["dev"]))
    logits = out[0] if isinstance(out, tuple) else out
    np.testing.assert_allclose(logits.numpy(), np.stack(rec.logits), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# training


@pytest.mark.parametrize("algo", ALGOS)
def test_short_training_lowers_mean_cost(algo, tiny_suite, analytic, tmp_path):
    """20 updates lower the policy's expected plan cost (mean of 16 seeded sampled rollouts on each of the four
    instances) by more than 10 % from the untrained start (in a calibration run: 19 % and 23 %)."""
    import torch

    mod = _mod(algo)
    instances = load_suite(tiny_suite)
    insts = [i for _, i in instances]
    torch.manual_seed(0)  # train_policy seeds the same way: this is its untrained start
    before = mean_sampled_cost(mod.numpy_policy(mod.make_net(64), 64), insts, analytic, k=16, seed=0)
    settings = TrainSettings(algo=algo, episodes=320, rollouts=16, seed=0, learning_rate=3e-3)
    summary = train_policy(instances, analytic, settings, tmp_path / "p.pt")
    _, meta = load_policy_file(tmp_path / "p.npz")
    trained = load_policy(tmp_path / "p.npz", type(mod.numpy_policy(mod.make_net(8), 8)), algo)
    after = mean_sampled_cost(trained, insts, analytic, k=16, seed=0)
    assert summary["episodes"] == 320 and meta["episodes"] == 320 and np.isfinite(after)
    assert after < 0.9 * before, (before, after)


def test_resume_continues_exactly(tiny_suite, analytic, tmp_path):
    instances = load_suite(tiny_suite)
    straight = TrainSettings(algo="dreamshard", episodes=256, rollouts=16, seed=3)
    train_policy(instances, analytic, straight, tmp_path / "a.pt")
    half = TrainSettings(algo="dreamshard", episodes=128, rollouts=16, seed=3)
    train_policy(instances, analytic, half, tmp_path / "b.pt")
    assert load_checkpoint(tmp_path / "b.pt")["episodes"] == 128
    train_policy(instances, analytic, straight, tmp_path / "b.pt", resume=True)
    a, b = load_checkpoint(tmp_path / "a.pt"), load_checkpoint(tmp_path / "b.pt")
    assert b["episodes"] == 256 and b["updates"] == 16
    for k in a["model"]:
        assert np.array_equal(a["model"][k].numpy(), b["model"][k].numpy()), k


def test_cli_rl_train(tiny_suite, tmp_path):
    from typer.testing import CliRunner

    from shardopt.cli import app

    out = tmp_path / "ck.pt"
    args = ["rl", "train", "--algo", "autoshard", "--suite", str(tiny_suite), "--out", str(out), "--episodes", "32", "--rollouts", "8"]
    r = CliRunner().invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["episodes"] == 32 and doc["algo"] == "autoshard" and not doc["resumed"]
    assert out.is_file() and out.with_suffix(".npz").is_file()
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "--resume" in r.stderr
    r = CliRunner().invoke(app, args[:-4] + ["--episodes", "64", "--rollouts", "8", "--resume", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["episodes"] == 64 and json.loads(r.stdout)["resumed"]
    r = CliRunner().invoke(app, ["rl", "train", "--algo", "dreamshard", "--suite", str(tiny_suite), "--out", str(out), "--resume"])
    assert r.exit_code == 2 and "autoshard checkpoint" in r.stderr
    r = CliRunner().invoke(app, ["rl", "train", "--algo", "dreamshard", "--suite", str(tmp_path / "none"), "--out", str(tmp_path / "x.pt")])
    assert r.exit_code == 2
    r = CliRunner().invoke(app, ["rl", "train", "--algo", "dreamshard", "--suite", str(tiny_suite), "--out", str(tmp_path / "y.pt"), "--shape", "100x8"])
    assert r.exit_code == 2 and "no instances of shape 100x8" in r.stderr
    # the solver takes the trained checkpoint (the .pt itself or its .npz export)
    inst = load_instance(next(tiny_suite.glob("*.json")))
    for path in (out, out.with_suffix(".npz")):
        res = get_solver("autoshard", checkpoint=path, samples=2).solve(inst, get_cost_model("analytic"))
        assert res.status is SolveStatus.feasible and check_plan(inst, res.plan).ok


# ---------------------------------------------------------------------------------------------------------------
# the solvers with their shipped checkpoints


def test_registered_and_shipped():
    for algo in ALGOS:
        assert algo in solver_names()
        assert (CHECKPOINT_DIR / f"{algo}.npz").is_file() and (CHECKPOINT_DIR / f"{algo}.pt").is_file()
        _, meta = load_policy_file(CHECKPOINT_DIR / f"{algo}.npz")
        assert meta["algo"] == algo and meta["episodes"] > 0


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize(
    "path,samples",
    [
        (SUITES / "dreamshard-test" / "dreamshard-test-s1-0000.json", 16),  # 50 tables, 4 devices
        (SUITES / "autoshard-test" / "autoshard-test-s1-0000.json", 16),  # 80 tables, 8 devices
        (EXAMPLES / "tight.json", 16),  # 8 devices on 2 hosts, tight memory
        (EXAMPLES / "large.json", 0),  # 856 tables, 128 devices on 16 hosts
    ],
    ids=["4dev", "8dev", "tight", "128dev"],
)
def test_shipped_checkpoint_gives_valid_plans(algo, path, samples, analytic):
    inst = load_instance(path)
    res = get_solver(algo, samples=samples).solve(inst, analytic, seed=0)
    assert res.status is SolveStatus.feasible, res.reason
    assert check_plan(inst, res.plan).ok
    assert res.plan.solver == algo and res.plan.params["checkpoint"] == f"{algo}.npz"
    assert res.predicted_cost == pytest.approx(analytic.bind(inst).plan_costs(res.plan).max_cost)


@pytest.mark.parametrize("algo", ALGOS)
def test_same_seed_same_plan(algo, analytic):
    inst = load_instance(SUITES / "dreamshard-test" / "dreamshard-test-s1-0001.json")
    a = get_solver(algo, samples=8).solve(inst, analytic, seed=5)
    b = get_solver(algo, samples=8).solve(inst, analytic, seed=5)
    assert a.plan.shards == b.plan.shards and a.predicted_cost == b.predicted_cost
    greedy_only = get_solver(algo, samples=0).solve(inst, analytic, seed=0)
    assert a.predicted_cost <= greedy_only.predicted_cost + 1e-9  # the greedy rollout is always a candidate


def test_inference_on_100_tables_8_devices_gives_a_valid_plan(analytic):
    """The target shape of the papers. Its speed (the 1 s target) is measured by benchmarks/bench_rl.py and
    recorded in docs/rl-solvers.md, not asserted here: a test must not fail because the machine is slow."""
    inst = load_instance(SUITES / "dreamshard-test" / "dreamshard-test-s1-0003.json")
    assert (len(inst.tables), inst.topology.num_devices) == (100, 8)
    for algo in ALGOS:
        res = get_solver(algo).solve(inst, analytic, seed=0)
        assert res.status is SolveStatus.feasible and check_plan(inst, res.plan).ok, algo


@pytest.mark.parametrize("algo", ALGOS)
def test_infeasible_instance_gives_the_feasibility_reason(algo, analytic):
    inst = load_instance(EXAMPLES / "infeasible.json")
    res = get_solver(algo).solve(inst, analytic)
    assert res.status is SolveStatus.infeasible and res.plan is None
    assert res.reason == tiered_infeasibility_reason(inst)  # the proof of any plan: the tables exceed all memory


@pytest.mark.parametrize("algo", ALGOS)
def test_table_too_big_for_a_policy_is_no_solution_not_infeasible(algo, analytic):
    """A table larger than every device: the table-wise policies cannot place it, but row-wise splits can, so the
    instance is not infeasible (issue 17)."""
    doc = to_dict(load_instance(EXAMPLES / "small.json"))
    t = doc["tables"][0]
    t["rows"] = int(1.5 * doc["topology"]["memory_bytes"] / (t["dim"] * 4 + 4))
    inst = instance_from_dict(doc)
    res = get_solver(algo).solve(inst, analytic)
    assert res.status is SolveStatus.no_solution and "'t00'" in res.reason and "not proven infeasible" in res.reason
    assert "table-wise in HBM only" in res.reason


def test_policy_that_cannot_pack_gives_no_solution(analytic):
    """A policy that always prefers device 0, without the safe mask, on an instance it cannot pack that way."""
    from solvers.rl.dreamshard import DreamShardSolver

    class Device0(NumpyPolicy):
        def step(self, state, ob):
            logits = np.zeros(ob.dev.shape[:2])
            logits[:, 0] = 10.0
            return logits, None, None

    class Solver(DreamShardSolver):
        @property
        def policy(self):
            return Device0({}, {"algo": "dreamshard"})

        def params(self):
            return {}

    # 2 devices of 16,000 bytes, tables of 8,000, 6,400, 3 x 4,800 and 3,200 bytes: first fit fails (8,000 + 6,400
    # on device 0 leaves no room for the 3,200), while {8,000, 4,800, 3,200} + {6,400, 4,800, 4,800} fits exactly
    inst = instance_doc([(500, 4, 1.0), (400, 4, 1.0), (300, 4, 1.0), (300, 4, 1.0), (300, 4, 1.0), (200, 4, 1.0)], [16_000, 16_000])
    assert infeasibility_reason(inst) is None
    res = Solver(samples=0, safe_mask=False).solve(inst, analytic)
    assert res.status is SolveStatus.no_solution and res.plan is None
    assert "could not place table" in res.reason and "not proven infeasible" in res.reason
    ok = Solver(samples=0, safe_mask=True).solve(inst, analytic)  # the safe mask keeps a completion
    assert ok.status is SolveStatus.feasible and check_plan(inst, ok.plan).ok


def test_bad_checkpoint_is_a_clear_error(tmp_path, analytic):
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a policy")
    with pytest.raises(ValueError, match="not a shardopt RL policy"):
        get_solver("dreamshard", checkpoint=bad).solve(load_instance(EXAMPLES / "small.json"), analytic)
    with pytest.raises(ValueError, match="expected 'dreamshard'"):
        get_solver("dreamshard", checkpoint=CHECKPOINT_DIR / "autoshard.npz").solve(load_instance(EXAMPLES / "small.json"), analytic)


@pytest.mark.parametrize("algo", ALGOS)
def test_any_instance_gets_a_valid_plan_or_a_reason(algo, analytic):
    """Random instances (1 to 16 devices, several hosts, heterogeneous memory, any optimizer and dtype): a checked
    plan, or `infeasible` exactly when shardopt.core.feasibility proves it, or `no_solution` with a reason."""
    from conftest import instances
    from hypothesis import HealthCheck, given, settings

    solver = get_solver(algo, samples=2)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(instances(max_tables=10))
    def check(inst):
        res = solver.solve(inst, analytic, seed=1)
        proof = tiered_infeasibility_reason(inst)
        if proof is not None:
            assert res.status is SolveStatus.infeasible and res.reason == proof
        elif infeasibility_reason(inst) is not None:  # no table-wise plan, but row-wise / UVM ones may exist
            assert res.status is SolveStatus.no_solution and "not proven infeasible" in res.reason
        elif res.status is SolveStatus.no_solution:
            assert "not proven infeasible" in res.reason
        else:
            assert res.status is SolveStatus.feasible and check_plan(inst, res.plan).ok

    check()
