"""Every command's --help reads cleanly: no value type shown beside an on/off flag, no default lost to markup (which
left a stray " ." behind), and one meaning per short option across all commands."""

from __future__ import annotations

import re
from typing import Any

import typer
from typer.testing import CliRunner

from shardopt.cli.main import app


def _commands() -> list[tuple[list[str], Any]]:
    """Every command and group, with the words that reach it (typer's own click: duck-typed)."""
    root = typer.main.get_command(app)
    out: list[tuple[list[str], Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        out.append((path, cmd))
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, path + [name])

    walk(root, [])
    assert len(out) > 20  # (the walk reached the sub-commands)
    return out


def test_every_help_page_reads_cleanly() -> None:
    runner = CliRunner()
    for path, _ in _commands():
        r = runner.invoke(app, path + ["--help"], env={"COLUMNS": "240"})
        assert r.exit_code == 0, (path, r.output)
        page = r.output
        assert "<bool>" not in page, f"shardopt {' '.join(path)} --help shows <bool> beside a flag"
        assert not re.search(r"[\w)'] \.(\s|$)", page), f"shardopt {' '.join(path)} --help has a stray ' .'"


def test_help_shows_the_defaults_written_in_option_texts() -> None:
    runner = CliRunner()
    page = runner.invoke(app, ["solve", "--help"], env={"COLUMNS": "240"}).output
    assert "[default: auto]" in page  # --cost-model: the text's own default, not eaten as markup
    assert "[default: the solver's own budget" in page  # --time-limit


def test_a_short_option_means_one_thing_in_every_command() -> None:
    meaning: dict[str, set[str]] = {}
    for _, cmd in _commands():
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option":
                continue
            longs = [o.rstrip("s") for o in p.opts if o.startswith("--")]  # (--solver and --solvers: one meaning)
            for short in (o for o in p.opts if re.fullmatch(r"-[A-Za-z]", o)):
                meaning.setdefault(short, set()).update(longs)
    clashes = {s: sorted(longs) for s, longs in meaning.items() if len(longs) > 1 and s != "-n"}
    assert not clashes, clashes
    # -n is "how many" wherever it stands (instances, samples, rollouts)
    assert meaning["-n"] <= {"--count", "--sample", "--episode"}
