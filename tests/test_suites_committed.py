"""The committed standard suites are reproduced byte for byte by the command recorded in their manifests."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shardopt.cli import app

SUITES = Path(__file__).resolve().parents[1] / "instances" / "suites"
SUITE_DIRS = sorted(p for p in SUITES.iterdir() if (p / "suite.json").is_file())


def test_standard_suites_exist():
    names = {p.name for p in SUITE_DIRS}
    for family in ("dreamshard", "neuroshard", "autoshard", "cpu", "huge", "tiered", "nvl72", "mixed", "skewed", "two-d"):
        assert {f"{family}-train", f"{family}-test"} <= names
    assert "production" in names


@pytest.mark.parametrize("suite", SUITE_DIRS, ids=lambda p: p.name)
def test_recorded_command_reproduces_suite(suite: Path, tmp_path: Path):
    manifest = json.loads((suite / "suite.json").read_text())
    argv = shlex.split(manifest["command"])
    assert argv[:2] == ["shardopt", "generate"]
    args = argv[1:]
    i = args.index("--out")
    args[i + 1] = str(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    regenerated = json.loads((tmp_path / "suite.json").read_text())
    assert regenerated["instances"] == manifest["instances"]
    for name in manifest["instances"]:
        assert (tmp_path / name).read_bytes() == (suite / name).read_bytes()
