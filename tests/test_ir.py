"""The IR: lossless JSON, errors that name the field and the value, the schema, the memory model, the plan checker."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
from conftest import instances
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardopt.core.ir import (
    Instance,
    IRError,
    Optimizer,
    Plan,
    Shard,
    dumps,
    instance_from_dict,
    json_schema,
    load_document,
    load_instance,
    load_plan,
    plan_from_dict,
    save,
    to_dict,
)
from shardopt.core.memory import device_memory_use, shard_bytes, slice_bytes, table_bytes
from shardopt.core.plan_check import PlanError, assert_valid_plan, check_plan

EXAMPLES = Path(__file__).resolve().parents[1] / "instances" / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.json"))


def base_doc(**workload) -> dict:
    return {
        "schema_version": 1,
        "kind": "instance",
        "name": "unit",
        "tables": [
            {"name": "t0", "rows": 100, "dim": 16, "pooling_factor": 2.0, "access": {"zipf": 1.0}},
            {"name": "t1", "rows": 100, "dim": 32, "pooling_factor": 0.5, "access": {"zipf": 0.8}},
            {"name": "t2", "rows": 1000, "dim": 64, "pooling_factor": 10.0, "access": {"histogram": [1.0] + [0.0] * 16}},
            {"name": "t3", "rows": 50, "dim": 8, "pooling_factor": 1.0, "access": {"zipf": 1.2}},
        ],
        "topology": {"num_devices": 3, "devices_per_host": 3, "memory_bytes": 10**7, "hardware": "v100"},
        "workload": {"batch_size": 1024, "optimizer": "sgd", "weight_dtype": "fp32", **workload},
        "metadata": {"suite": "unit"},
    }


def errors_of(doc: dict, kind: str = "instance") -> list[str]:
    with pytest.raises(IRError) as info:
        (instance_from_dict if kind == "instance" else plan_from_dict)(doc)
    return info.value.errors


def mutate(fn) -> dict:
    d = copy.deepcopy(base_doc())
    fn(d)
    return d


# ---------------------------------------------------------------------------------------------------------------
# JSON round trip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_instance_json_round_trip_is_lossless(inst: Instance) -> None:
    text = dumps(inst)
    back = instance_from_dict(json.loads(text))
    assert back == inst
    assert back.content_hash() == inst.content_hash()
    assert dumps(back) == text  # canonical: a second trip changes nothing


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    n = draw(st.integers(1, 8))
    shards = []
    for i in range(n):
        s = {"table": f"t{i}", "device": draw(st.integers(0, 127))}
        if draw(st.booleans()):
            s["col_offset"] = 4 * draw(st.integers(0, 8))
            s["cols"] = 4 * draw(st.integers(1, 8))
        if draw(st.booleans()):
            s["row_offset"] = draw(st.integers(0, 10**6))
            s["rows"] = draw(st.integers(1, 10**6))
        s["replicated"] = draw(st.booleans())
        if not s["replicated"]:
            kernel = draw(st.sampled_from(["fused", "fused_uvm_caching", "fused_uvm", None]))
            if kernel is not None:
                s["kernel"] = kernel
            if kernel == "fused_uvm_caching":
                s["cache_load_factor"] = draw(st.floats(0.01, 1.0))
        shards.append(s)
    doc = {
        "shards": shards,
        "solver": draw(st.sampled_from(["greedy", "cpsat", ""])),
        "params": {"beam": draw(st.integers(1, 8)), "caps": draw(st.lists(st.floats(0, 1e3), max_size=3))},
        "seed": draw(st.one_of(st.none(), st.integers(0, 2**31))),
        "wall_time_s": draw(st.floats(0, 1e4)),
        "status": draw(st.sampled_from(["optimal", "feasible", "timeout"])),
        "lower_bound": draw(st.one_of(st.none(), st.floats(0, 1e3))),
        "predicted_cost": draw(st.one_of(st.none(), st.floats(0, 1e3))),
    }
    return plan_from_dict(doc)


@settings(max_examples=40, deadline=None)
@given(plans())
def test_plan_json_round_trip_is_lossless(plan: Plan) -> None:
    back = plan_from_dict(json.loads(dumps(plan)))
    assert back == plan


def test_save_and_load_files(tmp_path: Path) -> None:
    inst = instance_from_dict(base_doc())
    plan = plan_from_dict({"instance": inst.content_hash(), "shards": [{"table": t.name, "device": 0} for t in inst.tables]})
    save(inst, tmp_path / "i.json")
    save(plan, tmp_path / "p.json")
    assert load_instance(tmp_path / "i.json") == inst
    assert load_plan(tmp_path / "p.json") == plan


def test_content_hash_ignores_name_and_metadata() -> None:
    a = instance_from_dict(base_doc())
    b = instance_from_dict({**base_doc(), "name": "other", "metadata": {"x": 1}})
    c = instance_from_dict(mutate(lambda d: d["tables"][0].update(rows=101)))
    assert a.content_hash() == b.content_hash() != c.content_hash()


# ---------------------------------------------------------------------------------------------------------------
# versions, kinds, documents


def test_schema_version_and_kind_are_checked() -> None:
    assert errors_of({**base_doc(), "schema_version": 2}) == [
        "schema_version: 2 is not supported (this shardopt reads 1)"
    ]
    assert errors_of({**base_doc(), "kind": "plan"}) == ["kind: 'plan' is not 'instance'"]
    assert errors_of({"kind": "instance", "shards": [{"table": "t0", "device": 0}]}, "plan") == [
        "kind: 'instance' is not 'plan'"
    ]
    assert errors_of([1, 2]) == ["(document): expected a JSON object, got list"]
    # absent schema_version / kind default to the current ones
    d = base_doc()
    del d["schema_version"], d["kind"]
    assert instance_from_dict(d).schema_version == 1


def test_load_document_tells_instance_from_plan(tmp_path: Path) -> None:
    inst_path, plan_path, bare_plan = tmp_path / "i.json", tmp_path / "p.json", tmp_path / "bare.json"
    inst_path.write_text(json.dumps(base_doc()))
    plan_path.write_text(json.dumps({"kind": "plan", "shards": [{"table": "t0", "device": 0}]}))
    bare_plan.write_text(json.dumps({"shards": [{"table": "t0", "device": 1}]}))  # no kind: told by its shards
    assert isinstance(load_document(inst_path), Instance)
    assert isinstance(load_document(plan_path), Plan)
    assert isinstance(load_document(bare_plan), Plan)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "plan", "shards": [{"table": "t0", "device": -1}]}))
    with pytest.raises(IRError, match=r"shards\[0\]\.device: -1"):
        load_document(bad)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(IRError, match="no such file") as info:
        load_instance(tmp_path / "missing.json")
    assert str(tmp_path / "missing.json") in str(info.value)
    (tmp_path / "broken.json").write_text('{"tables": [')
    with pytest.raises(IRError, match=r"broken\.json: not valid JSON \(line 1"):
        load_instance(tmp_path / "broken.json")
    with pytest.raises(IRError, match="is a directory"):
        load_instance(tmp_path)
    (tmp_path / "bad.json").write_text(json.dumps(mutate(lambda d: d["tables"][3].update(dim=30))))
    with pytest.raises(IRError) as info:
        load_instance(tmp_path / "bad.json")
    assert str(info.value) == f"{tmp_path / 'bad.json'}: tables[3].dim: 30 is not a multiple of 4"


# ---------------------------------------------------------------------------------------------------------------
# error messages: `field: value: what is wrong`


@pytest.mark.parametrize(
    "fn, expected",
    [
        (lambda d: d["tables"][3].update(dim=30), "tables[3].dim: 30 is not a multiple of 4"),
        (lambda d: d["tables"][1].update(rows=-5), "tables[1].rows: -5: input should be greater than or equal to 1"),
        (lambda d: d["tables"][1].update(rows=10**30), "tables[1].rows: 1000000000000000000000000000000: input should be less than or equal to 1099511627776"),
        (lambda d: d["topology"].update(memory_bytes=2**70), f"topology.memory_bytes: {2**70} is more than {2**62} bytes (2^62), the most the memory model holds"),
        (lambda d: d["topology"].update(num_devices=4, devices_per_host=3, memory_bytes=10**9),
         "topology.devices_per_host: 3 does not divide num_devices 4: hosts must have equal device counts (use 4 devices on one host, or a divisor of 4)"),
        (lambda d: d["topology"].update(num_devices=4, devices_per_host=8, memory_bytes=10**9),
         "topology.devices_per_host: 8 is more than num_devices 4: give the devices the job uses on each host (a job on 4 devices of one host has devices_per_host 4)"),
        (lambda d: d["workload"].update(batch_size=10**20), "workload.batch_size: 100000000000000000000: input should be less than or equal to 1099511627776"),
        (lambda d: d["tables"][0].update(pooling_factor=-1), "tables[0].pooling_factor: -1: input should be greater than or equal to 0"),
        (lambda d: d["tables"][0].update(dim="abc"), "tables[0].dim: 'abc' is not a number"),
        (lambda d: d["tables"][0].update(dtype="bf16"), "tables[0].dtype: \"bf16\": input should be 'fp32' or 'fp16'"),
        (lambda d: d["tables"][0].update(colour=1), "tables[0].colour: unknown field"),
        (lambda d: d["workload"].pop("batch_size"), "workload.batch_size: required field is missing"),
        (lambda d: d.pop("topology"), "topology: required field is missing"),
        (lambda d: d["workload"].update(optimizer="lamb"), "workload.optimizer: \"lamb\": input should be 'sgd', 'rowwise_adagrad' or 'adam'"),
        (lambda d: d["topology"].update(hardware="tpu9"), "topology.hardware: 'tpu9' is not a known hardware profile (known: a100, cpu, gb200, gh200, h100, h200, v100)"),
        (lambda d: d["topology"].update(memory_bytes=[1, 2]), "topology.memory_bytes: 2 values for 3 devices"),
        (lambda d: d["topology"].update(memory_bytes=[1, -1, 1]), "topology.memory_bytes[1]: -1 must be > 0"),
        (lambda d: d["topology"].update(memory_bytes=0), "topology.memory_bytes: 0 must be > 0"),
        (lambda d: d["tables"].append(dict(d["tables"][0])), "tables[4].name: 't0' repeats tables[0].name"),
        (lambda d: d["tables"][2]["access"].update(histogram=[0.1] * 16), "tables[2].access.histogram: has 16 bins, expected 17"),
        (lambda d: d["tables"][2]["access"].update(histogram=[0.1] * 17), "tables[2].access.histogram: shares sum to 1.7, expected 1"),
        (lambda d: d["tables"][2]["access"].update(histogram=[-0.5, 1.5] + [0.0] * 15), "tables[2].access.histogram: bin 0 is -0.5, expected a finite share >= 0"),
        (lambda d: d["tables"][0].update(access={}), "tables[0].access: give 'histogram' (17 shares) or 'zipf' (an exponent)"),
        (lambda d: d.update(tables=[]), "tables: []: list should have at least 1 item after validation, not 0"),
    ],
)
def test_error_messages_name_field_and_value(fn, expected: str) -> None:
    errs = errors_of(mutate(fn))
    assert any(e.startswith(expected) for e in errs), errs


def test_every_error_is_reported_and_nothing_half_valid() -> None:
    def breaks(d: dict) -> None:
        d["tables"][3]["dim"] = 30
        d["tables"][1]["rows"] = -5
        del d["workload"]["batch_size"]

    with pytest.raises(IRError) as info:
        instance_from_dict(mutate(breaks), "x.json")
    assert len(info.value.errors) == 3
    assert str(info.value).startswith("x.json: 3 errors:\n")
    assert "tables[3].dim: 30 is not a multiple of 4" in str(info.value)


def test_plan_field_errors() -> None:
    assert errors_of({"shards": [{"table": "t0", "device": -1}]}, "plan") == [
        "shards[0].device: -1: input should be greater than or equal to 0"
    ]
    assert errors_of({"shards": [{"table": "t0", "device": 0, "cols": 0}]}, "plan")[0].startswith("shards[0].cols: 0:")
    assert errors_of({"shards": [{"table": "t0", "device": 0}], "status": "great"}, "plan")[0].startswith('status: "great":')
    assert errors_of({"shards": []}, "plan")[0].startswith("shards: []:")


# ---------------------------------------------------------------------------------------------------------------
# JSON Schema


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_example_files_exist() -> None:
    names = {p.name for p in EXAMPLE_FILES}
    assert {"small.json", "tight.json", "large.json", "infeasible.json"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_schema_validates_example_files(validator: jsonschema.Draft202012Validator, path: Path) -> None:
    doc = json.loads(path.read_text())
    validator.validate(doc)
    inst = instance_from_dict(doc, str(path))  # and the IR agrees
    assert inst.metadata["generator"] == "instances/examples/make_examples.py"


def test_schema_validates_plans_and_rejects_bad_documents(validator: jsonschema.Draft202012Validator) -> None:
    plan = plan_from_dict({"solver": "greedy", "shards": [{"table": "t0", "device": 0, "col_offset": 0, "cols": 8}]})
    validator.validate(to_dict(plan))
    assert not validator.is_valid(mutate(lambda d: d["tables"][1].update(rows=-5)))
    assert not validator.is_valid(mutate(lambda d: d["workload"].pop("batch_size")))
    assert not validator.is_valid(mutate(lambda d: d["tables"][0].update(colour=1)))
    assert not validator.is_valid({"shards": [{"table": "t0", "device": -1}]})


# ---------------------------------------------------------------------------------------------------------------
# memory model: weights + optimizer state, by hand


def table_of(inst: Instance, name: str):
    return inst.tables[inst.table_index()[name]]


def test_memory_model_by_hand() -> None:
    # t2: 1000 rows x 64 cols
    sgd = instance_from_dict(base_doc(optimizer="sgd"))
    ada = instance_from_dict(base_doc(optimizer="rowwise_adagrad"))
    adam = instance_from_dict(base_doc(optimizer="adam"))
    half = instance_from_dict(base_doc(optimizer="rowwise_adagrad", weight_dtype="fp16"))
    assert table_bytes(sgd, table_of(sgd, "t2")) == 1000 * 64 * 4
    assert table_bytes(ada, table_of(ada, "t2")) == 1000 * 64 * 4 + 1000 * 4  # one fp32 accumulator per row
    assert table_bytes(adam, table_of(adam, "t2")) == 1000 * 64 * 4 + 2 * 1000 * 64 * 4  # two fp32 moments
    assert table_bytes(half, table_of(half, "t2")) == 1000 * 64 * 2 + 1000 * 4  # fp16 weights, fp32 state
    # a per-table dtype overrides the workload's
    mixed = instance_from_dict(mutate(lambda d: (d["tables"][2].update(dtype="fp16"), d["workload"].update(optimizer="adam"))))
    assert mixed.workload.optimizer is Optimizer.adam
    assert table_bytes(mixed, table_of(mixed, "t2")) == 1000 * 64 * 2 + 2 * 1000 * 64 * 4
    # column shards each keep their own row-wise accumulator; row shards keep their rows' share
    t2 = table_of(ada, "t2")
    assert shard_bytes(ada, t2, Shard(table="t2", device=0, col_offset=0, cols=32)) == 1000 * 32 * 4 + 1000 * 4
    assert shard_bytes(ada, t2, Shard(table="t2", device=0, row_offset=750)) == 250 * 64 * 4 + 250 * 4
    assert slice_bytes(adam, t2, 10, 8) == 10 * 8 * 4 * 3
    use = device_memory_use(ada, [Shard(table="t2", device=0, cols=32), Shard(table="t2", device=2, col_offset=32), Shard(table="t0", device=2)])
    assert use.tolist() == [1000 * 32 * 4 + 4000, 0, 1000 * 32 * 4 + 4000 + 100 * 16 * 4 + 400]


# ---------------------------------------------------------------------------------------------------------------
# plan checker


def whole(inst: Instance, device_of: dict[str, int] | None = None) -> list[Shard]:
    device_of = device_of or {}
    return [Shard(table=t.name, device=device_of.get(t.name, i % inst.topology.num_devices)) for i, t in enumerate(inst.tables)]


@pytest.fixture
def inst() -> Instance:
    return instance_from_dict(base_doc(optimizer="rowwise_adagrad"))


def kinds(instance: Instance, shards: list[Shard]) -> dict[str, list]:
    out: dict[str, list] = {}
    for v in check_plan(instance, shards).violations:
        out.setdefault(v.kind, []).append(v)
    return out


def test_valid_plans_pass(inst: Instance) -> None:
    table_wise = whole(inst)
    column_wise = [s for s in whole(inst) if s.table != "t2"] + [
        Shard(table="t2", device=0, col_offset=0, cols=16),
        Shard(table="t2", device=1, col_offset=16, cols=32),
        Shard(table="t2", device=2, col_offset=48),  # to the end
    ]
    row_wise = [s for s in whole(inst) if s.table != "t2"] + [
        Shard(table="t2", device=1, row_offset=0, rows=300),
        Shard(table="t2", device=2, row_offset=300),
    ]
    replicated = [s for s in whole(inst) if s.table != "t3"] + [Shard(table="t3", device=d, replicated=True) for d in range(3)]
    grid = [s for s in whole(inst) if s.table != "t2"] + [
        Shard(table="t2", device=d, col_offset=c, cols=32, row_offset=r, rows=500) for d, (c, r) in enumerate([(0, 0), (32, 0), (0, 500)])
    ] + [Shard(table="t2", device=0, col_offset=32, cols=32, row_offset=500, rows=500)]
    for shards in (table_wise, column_wise, row_wise, replicated, grid):
        result = assert_valid_plan(inst, shards)
        assert result.ok and result.memory_use.sum() > 0
    assert assert_valid_plan(inst, plan_from_dict({"shards": [s.model_dump() for s in column_wise]})).ok


def test_missing_coverage_names_the_table(inst: Instance) -> None:
    v = kinds(inst, [s for s in whole(inst) if s.table != "t1"])
    assert [x.table for x in v["coverage"]] == ["t1"]
    assert "table 't1' is not placed on any device" in v["coverage"][0].message
    partial = [s for s in whole(inst) if s.table != "t2"] + [Shard(table="t2", device=0, cols=32)]
    v = kinds(inst, partial)
    assert v["coverage"][0].table == "t2" and "cover 32,000 of its 64,000 cells" in v["coverage"][0].message


def test_overlap_names_table_and_devices(inst: Instance) -> None:
    shards = [s for s in whole(inst) if s.table != "t2"] + [
        Shard(table="t2", device=0, cols=48),
        Shard(table="t2", device=1, col_offset=32),
    ]
    (v,) = kinds(inst, shards)["overlap"]
    assert v.table == "t2" and v.device == 1
    assert "devices 0 and 1 both cover rows [0, 1000) x columns [32, 48)" in v.message


def test_misaligned_columns(inst: Instance) -> None:
    shards = [s for s in whole(inst) if s.table != "t2"] + [
        Shard(table="t2", device=0, cols=18),
        Shard(table="t2", device=1, col_offset=18),
    ]
    v = kinds(inst, shards)["alignment"]
    assert {(x.table, x.device) for x in v} == {("t2", 0), ("t2", 1)}
    assert "columns [0, 18) are not aligned to multiples of 4" in v[0].message


def test_memory_over_names_device_and_tables() -> None:
    tight = instance_from_dict(mutate(lambda d: d["topology"].update(memory_bytes=200_000)))
    shards = whole(tight, {"t0": 0, "t1": 0, "t2": 0, "t3": 1})
    (v,) = kinds(tight, shards)["memory"]
    assert v.device == 0 and v.table in {"t0", "t1", "t2"}
    used = 100 * 16 * 4 + 100 * 32 * 4 + 1000 * 64 * 4
    assert f"device 0: {used:,} bytes of shards ('t0', 't1', 't2') exceed its 200,000 bytes of HBM by {used - 200_000:,}" == v.message


def test_unknown_table_and_bad_device(inst: Instance) -> None:
    v = kinds(inst, whole(inst) + [Shard(table="nope", device=0)])
    assert v["unknown_table"][0].table == "nope" and "'nope' is not in the instance" in v["unknown_table"][0].message
    v = kinds(inst, whole(inst, {"t1": 5}))
    (bad,) = v["bad_device"]
    assert (bad.table, bad.device) == ("t1", 5)
    assert "shard on device 5, but the topology has devices 0..2" in bad.message


def test_out_of_bounds(inst: Instance) -> None:
    shards = [s for s in whole(inst) if s.table != "t0"] + [Shard(table="t0", device=0, cols=20)]
    v = kinds(inst, shards)
    assert "columns [0, 20) outside [0, 16)" in v["out_of_bounds"][0].message
    shards = [s for s in whole(inst) if s.table != "t0"] + [Shard(table="t0", device=0, row_offset=50, rows=80)]
    assert "rows [50, 130) outside [0, 100)" in kinds(inst, shards)["out_of_bounds"][0].message


def test_replication_violations(inst: Instance) -> None:
    base = [s for s in whole(inst) if s.table != "t3"]
    missing = base + [Shard(table="t3", device=0, replicated=True), Shard(table="t3", device=2, replicated=True)]
    (v,) = kinds(inst, missing)["replication"]
    assert (v.table, v.device) == ("t3", 1) and "has no replica on device(s) [1]" in v.message
    mixed = base + [Shard(table="t3", device=d, replicated=True) for d in range(3)] + [Shard(table="t3", device=0, cols=4)]
    assert any("mixes replicated and sharded" in x.message for x in kinds(inst, mixed)["replication"])
    partial = base + [Shard(table="t3", device=d, replicated=True, cols=4 if d == 1 else None) for d in range(3)]
    assert any("replica on device 1 is not the whole table" in x.message for x in kinds(inst, partial)["replication"])


def test_assert_valid_plan_lists_violations(inst: Instance) -> None:
    with pytest.raises(PlanError) as info:
        assert_valid_plan(inst, whole(inst, {"t1": 7}) + [Shard(table="ghost", device=0)])
    msg = str(info.value)
    assert msg.startswith("invalid plan: 2 violation(s):")  # the bad device and the unknown table
    assert "'ghost'" in msg and "device 7" in msg


@pytest.mark.parametrize("where, key, value, needle", [
    ("table", "rows", "100", "tables[0].rows: '100' is not a number"),
    ("table", "rows", True, "tables[0].rows: True is not a number"),
    ("table", "pooling_factor", float("nan"), "tables[0].pooling_factor: nan is not finite"),
    ("topology", "devices_per_host", "4", "topology.devices_per_host: '4' is not a number"),
])
def test_hand_written_mistakes_are_refused_naming_the_field(where: str, key: str, value: object, needle: str) -> None:
    """Issue 'trust': lax parsing read "rows": "100" as 100 and true as 1; NaN pooling was called too large; a host
    given as text was read as a number."""
    from shardopt.core.ir import instance_from_dict, load_instance, to_dict

    doc = to_dict(load_instance(Path(__file__).resolve().parents[1] / "instances" / "examples" / "small.json"))
    assert doc["topology"]["num_devices"] == 4
    (doc["tables"][0] if where == "table" else doc["topology"])[key] = value
    with pytest.raises(Exception, match=re.escape(needle)):
        instance_from_dict(doc)


@pytest.mark.parametrize("device", ["0", True])
def test_a_plan_device_given_as_text_or_truth_value_is_refused(device: object) -> None:
    from shardopt.core.ir import Shard

    with pytest.raises(Exception, match="is not a number"):
        Shard(table="t0", device=device)
