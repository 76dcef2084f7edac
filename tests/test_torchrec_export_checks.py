"""What a TorchRec user hit with the export (issue 'planner', item 3), each as a regression test: the placements'
device (auto at export, an override at load), a plan for another world size refused at load naming both sizes, a
module path the model lacks refused naming the collections it has, the warning on uneven column widths, the
optimizer that travels with the export (and `fused_params_for`), and feature names kept by `import-torchrec`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torchrec")

from test_torchrec_dmp import instance_doc, plan_docs  # noqa: E402  (2 hosts x 2 ranks, every placement kind)


def _export(tmp_path: Path, label: str, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from typer.testing import CliRunner

    from shardopt.cli import app
    from shardopt.core.ir import Plan, instance_from_dict

    inst = instance_from_dict(instance_doc())
    inst_path, plan_path, out = tmp_path / "instance.json", tmp_path / f"{label}.plan.json", tmp_path / f"{label}.torchrec.json"
    inst_path.write_text(json.dumps(inst.model_dump(mode="json")))
    plan_path.write_text(json.dumps(Plan.model_validate(plan_docs()[label]).model_dump(mode="json")))
    r = CliRunner().invoke(app, ["export", str(plan_path), "--format", "torchrec", "--instance", str(inst_path), "--out", str(out), "--json", *extra])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), json.loads(out.read_text())


def test_the_device_is_this_machines_at_export_and_can_be_overridden_at_load(tmp_path: Path) -> None:
    import torch

    from shardopt.data.torchrec_io import load_torchrec_plan

    summary, doc = _export(tmp_path, "every_kind")
    here = "cuda" if torch.cuda.is_available() else "cpu"
    assert summary["compute_device"] == here and doc["compute_device"] == here
    placements = [s["placement"] for tables in doc["plan"].values() for e in tables.values() for s in e["shards"] or []]
    assert placements and all(p.endswith(f"/{here}") or f"/{here}:" in p for p in placements)
    cuda = load_torchrec_plan(doc, compute_device="cuda", world_size=4)
    got = [str(m.placement) for ps in cuda.plan[""].values() if ps.sharding_spec is not None for m in ps.sharding_spec.shards]
    assert got and all(p.startswith("rank:") and "/cuda:" in p for p in got)
    assert all(int(p.split(":")[-1]) == int(p.split("/")[0].split(":")[1]) % 2 for p in got)  # M = N % devices per host
    cpu = load_torchrec_plan(doc, compute_device="cpu", world_size=4)
    assert all(str(m.placement).endswith("/cpu") for ps in cpu.plan[""].values() if ps.sharding_spec is not None for m in ps.sharding_spec.shards)


def test_a_plan_for_another_world_or_a_missing_module_path_is_refused_naming_both(tmp_path: Path) -> None:
    from torchrec import EmbeddingBagCollection

    from shardopt.core.ir import instance_from_dict
    from shardopt.data.torchrec_io import TorchRecPlanError, embedding_bag_configs, load_torchrec_plan

    _, doc = _export(tmp_path, "every_kind")
    with pytest.raises(TorchRecPlanError, match="a world of 4 ranks, this one has 2"):
        load_torchrec_plan(doc, world_size=2)
    import torch

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sparse = EmbeddingBagCollection(tables=embedding_bag_configs(instance_from_dict(instance_doc())), device=torch.device("meta"))

    with pytest.raises(TorchRecPlanError, match=r"module path '' is no embedding collection of the model \(its collections: 'sparse'\)"):
        load_torchrec_plan(doc, world_size=4, model=Model())
    assert set(load_torchrec_plan(doc, world_size=4, model=Model().sparse).plan) == {""}


def test_uneven_column_widths_warn_and_the_optimizer_travels(tmp_path: Path) -> None:
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    from shardopt.core.ir import instance_from_dict
    from shardopt.data.torchrec_io import TorchRecPlanError, fused_params_for

    summary, doc = _export(tmp_path, "every_kind")  # cw: 4 + 8 + 16 columns
    assert any("unequal widths" in w and "'cw'" in w and "torch.distributed.checkpoint" in w for w in summary["warnings"])
    assert doc["optimizer"]["instance"] == "sgd" and doc["optimizer"]["fused_params"]["optimizer"] == "EXACT_SGD"
    assert doc["optimizer"]["data_parallel_tables"]["tables"] == ["dp"]
    inst = instance_from_dict({**instance_doc(), "workload": {"batch_size": 20, "optimizer": "rowwise_adagrad"}})
    assert fused_params_for(inst, 0.05) == {"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.05}
    with pytest.raises(TorchRecPlanError, match="learning_rate"):
        fused_params_for(inst, 0.0)


def test_import_torchrec_keeps_feature_names(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from shardopt.cli import app
    from shardopt.core.ir import load_instance
    from shardopt.data.torchrec_io import embedding_bag_configs

    configs = tmp_path / "configs.json"
    configs.write_text(json.dumps([{"name": "user", "num_embeddings": 100, "embedding_dim": 8, "feature_names": ["user_id", "friend_id"]},
                                   {"name": "item", "num_embeddings": 50, "embedding_dim": 16}]))
    out = tmp_path / "inst.json"
    r = CliRunner().invoke(app, ["import-torchrec", str(configs), "--out", str(out), "--devices", "2", "--batch-size", "64"])
    assert r.exit_code == 0, r.stderr
    back = {c.name: c.feature_names for c in embedding_bag_configs(load_instance(out))}
    assert back == {"user": ["user_id", "friend_id"], "item": ["item"]}
