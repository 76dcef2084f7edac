"""`shardopt generate`, `make-pool`, `import-dlrm` and `inspect DIR`: results and exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shardopt.cli import app
from shardopt.data.pools import generate_pool, load_pool, save_pool


def run(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pool") / "p.json"
    save_pool(generate_pool(n=64, seed=1), path)
    return path


def test_generate_and_inspect_suite(tmp_path, small_pool):
    out = tmp_path / "suite"
    r = run("generate", "--family", "neuroshard", "--count", "3", "--seed", "5", "--pool-file", str(small_pool), "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert len(doc["instances"]) == 3 and (out / "suite.json").is_file()
    r = run("inspect", str(out), "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["instances"] == 3 and summary["devices"] == [4]
    assert all(0.4 < row["utilisation"] <= 1 for row in summary["rows"])
    r = run("inspect", str(out))
    assert r.exit_code == 0 and "neuroshard" in r.stdout


def test_generate_from_standard_test_pool(tmp_path):
    r = run("generate", "--family", "autoshard", "--count", "1", "--pool", "test", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    (inst,) = [p for p in tmp_path.glob("*.json") if p.name != "suite.json"]
    meta = json.loads(inst.read_text())["metadata"]
    assert (meta["family"], meta["pool"], meta["seed"]) == ("autoshard", "test", 0)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--family", "nope", "--count", "1"], "unknown family 'nope'"),
        (["--family", "neuroshard", "--count", "0"], "--count: 0"),
        (["--family", "neuroshard", "--count", "-3"], "--count: -3"),
        (["--family", "autoshard", "--count", "1", "--pool-file", "POOL"], "needs 80"),
        (["--family", "neuroshard", "--count", "1", "--pool-file", "CORRUPT"], "tables[0].rows"),
        (["--family", "neuroshard", "--count", "1", "--pool-file", "MISSING"], "no such file"),
        (["--family", "neuroshard", "--count", "1", "--pool", "validation"], "validation"),
        (["--family", "cpu", "--count", "1", "--memory-slack", "0.9"], "--memory-slack: 0.9 must be >= 1"),
        (["--family", "tiered", "--count", "1", "--memory-slack", "2"], "--memory-slack: family 'tiered' sizes its memory"),
    ],
)
def test_generate_bad_requests_exit_2(args, needle, tmp_path, small_pool):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(json.dumps({"kind": "pool", "name": "c", "batch_size": 8, "synthetic": True, "tables": [{"name": "a", "rows": 0, "pooling_factor": 1, "access": {"zipf": 1}}]}))
    subst = {"POOL": str(small_pool), "CORRUPT": str(corrupt), "MISSING": str(tmp_path / "missing.json")}
    r = run("generate", *[subst.get(a, a) for a in args], "--out", str(tmp_path / "out"))
    assert r.exit_code == 2, r.output
    assert needle in r.output


def test_memory_slack_gives_the_same_tables_more_room(tmp_path):
    """--memory-slack X: the same tables and workload, device memory X x their bytes / devices (what TorchRec's
    storage model, which adds each shard's input and output buffers, needs to place the cpu family)."""
    from shardopt.core.ir import load_instance

    for label, extra in (("tight", []), ("roomy", ["--memory-slack", "1.5"])):
        r = run("generate", "--family", "cpu", "--count", "2", "--seed", "9", "--pool", "test", "--out", str(tmp_path / label), *extra)
        assert r.exit_code == 0, r.output
    tight = sorted(p for p in (tmp_path / "tight").glob("*.json") if p.name != "suite.json")
    roomy = sorted(p for p in (tmp_path / "roomy").glob("*.json") if p.name != "suite.json")
    assert [p.name.replace(".json", "-m1.5.json") for p in tight] == [p.name for p in roomy]
    for a, b in zip(map(load_instance, tight), map(load_instance, roomy)):
        assert a.tables == b.tables and a.workload == b.workload
        used = b.metadata["memory_utilisation"]
        assert b.topology.memory_bytes > 1.3 * a.topology.memory_bytes and used <= 1 / 1.5 + 1e-3
        assert "1.5 x total" in b.metadata["memory_rule"]
    assert json.loads((tmp_path / "roomy" / "suite.json").read_text())["memory_slack"] == 1.5


def test_make_pool_writes_disjoint_halves(tmp_path):
    out = tmp_path / "mini.json"
    r = run("make-pool", "--out", str(out), "--tables", "12", "--seed", "2", "--json")
    assert r.exit_code == 0, r.output
    full, train, test = load_pool(out), load_pool(tmp_path / "mini-train.json"), load_pool(tmp_path / "mini-test.json")
    assert len(full.tables) == 12 and len(train.tables) == len(test.tables) == 6
    assert not {t.name for t in train.tables} & {t.name for t in test.tables}
    assert run("make-pool", "--out", str(out), "--tables", "1").exit_code == 2


def test_import_dlrm_cli(tmp_path):
    from test_pools import _write_dlrm

    src = tmp_path / "mini.pt"
    _write_dlrm(src, tables=3, batch=32, seed=1)
    out = tmp_path / "pool.json"
    r = run("import-dlrm", str(src), "--out", str(out), "--split-seed", "0", "--json")
    assert r.exit_code == 0, r.output
    pool = load_pool(out)
    assert len(pool.tables) == 3 and not pool.synthetic and (tmp_path / "pool-train.json").is_file()
    bad = tmp_path / "bad.pt"
    bad.write_text("nope")
    r = run("import-dlrm", str(bad), "--out", str(out))
    assert r.exit_code == 2 and "cannot be read" in r.output


def test_inspect_empty_directory_exits_2(tmp_path):
    r = run("inspect", str(tmp_path))
    assert r.exit_code == 2 and "no instance files" in r.output


def test_generate_refuses_a_file_or_an_old_suite_unless_overwrite(tmp_path, small_pool):
    """Issue 'trust': --out naming a file exited 1; a folder holding an older suite kept its instances beside the new
    suite.json."""
    base = ["generate", "--family", "neuroshard", "--pool-file", str(small_pool), "--out"]
    afile = tmp_path / "file.json"
    afile.write_text("{}")
    r = run(*base, str(afile), "--count", "1")
    assert r.exit_code == 2 and "is a file, not a folder" in r.output
    out = tmp_path / "suite"
    assert run(*base, str(out), "--count", "3", "--seed", "1").exit_code == 0
    r = run(*base, str(out), "--count", "1", "--seed", "2")
    assert r.exit_code == 2 and "already holds a suite" in r.output and "--overwrite" in r.output
    assert len(list(out.glob("*-s1-*.json"))) == 3  # nothing lost
    r = run(*base, str(out), "--count", "1", "--seed", "2", "--overwrite")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.glob("*.json")) == sorted(["suite.json", *json.loads((out / "suite.json").read_text())["instances"]])
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "x.json").write_text("{}")
    r = run(*base, str(stray), "--count", "1")
    assert r.exit_code == 2 and "instance files of no suite" in r.output


def test_production_xl_draws_each_pool_table_up_to_four_times(tmp_path, small_pool):
    """The scale family: 3,424 tables on 512 devices (8 per host) from the 856-table pool, each table drawn at most four
    times, its copies renamed NAME-cK; names unique. From a pool too small for that, exit 2 naming the copies."""
    from shardopt.core.ir import load_instance

    r = run("generate", "--family", "production-xl", "--count", "1", "--pool", "all", "--out", str(tmp_path / "xl"))
    assert r.exit_code == 0, r.output
    inst = load_instance(tmp_path / "xl" / "production-xl-all-s0-0000.json")
    names = [t.name for t in inst.tables]
    assert len(names) == 3424 == len(set(names)) and inst.topology.num_devices == 512 and inst.topology.devices_per_host == 8
    base = {n.rsplit("-c", 1)[0] if n.rsplit("-c", 1)[-1].isdigit() else n for n in names}
    assert len(base) <= 856 and max(sum(1 for n in names if n == b or n.startswith(b + "-c")) for b in base) <= 4
    assert any(n.endswith("-c3") for n in names)
    r = run("generate", "--family", "production-xl", "--count", "1", "--pool-file", str(small_pool), "--out", str(tmp_path / "no"))
    assert r.exit_code == 2 and "each at most 4 times" in r.output
