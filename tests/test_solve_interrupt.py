"""`shardopt solve` on a terminal: a live line while the search runs, and Ctrl-C that keeps the best plan found so far
(saved with --out, marked interrupted, exit 130). Run in a pseudo-terminal, as a user runs it."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardopt.core.ir import load_instance, load_plan
from shardopt.core.plan_check import check_plan

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ROOT / "instances" / "suites" / "production" / "production-all-s0-0000.json"  # 856 tables x 128 devices


def _read_until(fd: int, proc: subprocess.Popen, needle: bytes, seconds: float) -> bytes:
    """What the terminal showed, until `needle` (a regular expression) matched, the process ended or `seconds`
    passed."""
    buf, end = b"", time.monotonic() + seconds
    while time.monotonic() < end and not re.search(needle, buf):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            buf += chunk
        elif proc.poll() is not None:
            break
    return buf


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pseudo-terminal")
def test_ctrl_c_keeps_the_best_plan_and_the_terminal_shows_a_live_line(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm", COLUMNS="160")
    proc = subprocess.Popen([sys.executable, "-m", "shardopt", "solve", str(PRODUCTION), "--solver", "neuroshard",
                             "--cost-model", "analytic", "--time-limit", "300", "--out", str(out)],
                            stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    try:
        # the live line, once the search has a plan to report (a busy machine only makes this slower)
        shown = _read_until(master, proc, rb"best \d+\.\d+ ms", 240)
        assert b"neuroshard solving" in shown and b"Ctrl-C stops with the best plan" in shown, shown[-2000:]
        assert proc.poll() is None, "the search ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        shown += _read_until(master, proc, rb"\x00", 240)  # everything until it exits
        rc = proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = shown.decode(errors="replace")
    assert rc == 130, text[-3000:]
    assert "interrupted by the user" in text and "plan written to" in text
    plan = load_plan(out)
    assert plan.stopped == "interrupted" and plan.status.value == "feasible"
    assert check_plan(load_instance(PRODUCTION), plan).ok
    assert plan.wall_time_s < 300  # it stopped when asked, not at the limit


def test_piped_or_json_solve_draws_no_live_line() -> None:
    small = ROOT / "instances" / "suites" / "cpu-test" / "cpu-test-s1-0008.json"
    r = subprocess.run([sys.executable, "-m", "shardopt", "solve", str(small), "--time-limit", "1", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "feasible" and doc["stopped"] in ("converged", "time_limit")
    assert "solving" not in r.stderr and "\x1b[" not in r.stderr
