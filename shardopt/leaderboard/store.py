"""The leaderboard's SQLite store: one row per (instance_hash, solver, seed, backend, cost_model, settings), committed
as soon as it is done, so a run killed at any moment loses at most the rows in flight and a re-run skips every finished
row - but only a row made under the same settings (time limit; for a measured judge its stopping rule): a re-run with
another `--time-limit` solves again, into rows of its own. Only the parent process writes (WAL mode, with a busy
timeout for concurrent runs)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from shardopt.core.errors import UserError

SUITE_MANIFEST = "suite.json"
FAILED_STATUSES = ("infeasible", "no_solution", "judge_error", "error")

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    instance_file TEXT NOT NULL,
    instance_name TEXT NOT NULL,
    instance_hash TEXT NOT NULL,
    solver TEXT NOT NULL,
    params TEXT NOT NULL,
    seed INTEGER NOT NULL,
    backend TEXT NOT NULL,
    cost_model TEXT NOT NULL,
    judge TEXT,
    time_limit REAL,
    columns TEXT,
    max_cost_ms REAL,
    critical_path_ms REAL,
    solve_time_s REAL,
    status TEXT NOT NULL,
    reason TEXT,
    lower_bound REAL,
    code_version TEXT NOT NULL,
    created_at TEXT NOT NULL,
    predicted_ms REAL,
    ci_low_ms REAL,
    ci_high_ms REAL,
    judge_rounds INTEGER,
    machine TEXT,
    stopped TEXT,
    settings TEXT NOT NULL,
    UNIQUE (instance_hash, solver, seed, backend, cost_model, settings)
)
"""
# columns added after the first release, with their types: a store written before them gets them on connect()
# (ALTER TABLE ... ADD COLUMN; old rows hold NULL). predicted_ms: the solver's own prediction of its plan's cost
# (its cost model); ci_low_ms / ci_high_ms: a measured judge's bootstrap 95 % CI of the plan cost; judge_rounds:
# the rounds it timed; machine: JSON of the machine it timed on. NULL for the simulated judge, except predicted_ms.
# stopped: why the solver's search stopped (solvers.base.StopReason: time_limit, converged, proven); status says what it found.
ADDED_COLUMNS = (("predicted_ms", "REAL"), ("ci_low_ms", "REAL"), ("ci_high_ms", "REAL"), ("judge_rounds", "INTEGER"),
                 ("machine", "TEXT"), ("stopped", "TEXT"))

BOUNDS_SCHEMA = """
CREATE TABLE IF NOT EXISTS bounds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suite TEXT NOT NULL,
    instance_file TEXT NOT NULL,
    instance_hash TEXT NOT NULL,
    cost_model TEXT NOT NULL,
    kind TEXT NOT NULL,
    value_ms REAL,
    status TEXT NOT NULL,
    reason TEXT,
    covers TEXT,
    time_limit REAL,
    time_s REAL,
    code_version TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (instance_hash, cost_model, kind)
)
"""
BOUND_KIND = "analytic"  # solvers.bound: every table- and column-wise plan, analytic model
BOUND_COLUMNS = ("suite", "instance_file", "instance_hash", "cost_model", "kind", "value_ms", "status", "reason", "covers",
                 "time_limit", "time_s", "code_version", "created_at")

COLUMNS = (
    "suite", "instance_file", "instance_name", "instance_hash", "solver", "params", "seed", "backend", "cost_model",
    "judge", "time_limit", "columns", "max_cost_ms", "critical_path_ms", "solve_time_s", "status", "reason",
    "lower_bound", "code_version", "created_at", "predicted_ms", "ci_low_ms", "ci_high_ms", "judge_rounds", "machine",
    "settings", "stopped",
)
# what a store written before the settings were part of the key holds for them where they cannot be recovered
UNRECORDED_SETTINGS = json.dumps({"unrecorded": True})


class LeaderboardError(UserError, ValueError):
    """Bad input to a leaderboard run or report (bad db path, empty suite, unknown solver, empty store)."""

    error_kind = "bad_leaderboard_request"


# ---------------------------------------------------------------------------------------------------------------
# the settings a row was made under


def settings_key(time_limit: float | None, judge: str | None = None, options: dict[str, dict[str, Any]] | None = None) -> str:
    """The run settings that change a row's result, as the store keys them: the per-solve time limit, for a measured
    judge its stopping rule (StopRule.key()), and the solver options that differ from their defaults (per solver; none:
    no entry, so rows solved with the defaults keep the key they always had). The seed, backend and cost model are key
    columns of their own."""
    doc: dict[str, Any] = {"time_limit": None if time_limit is None else float(time_limit)}
    if judge is not None:
        doc["judge"] = judge
    changed = {name: opts for name, opts in (options or {}).items() if opts}
    if changed:
        doc["options"] = changed
    return json.dumps(doc, sort_keys=True)


def settings_label(key: str | None) -> str:
    """The settings in words, for a report's caption: "time limit 5 s", "no time limit; judge 20 rounds"."""
    try:
        doc = json.loads(key or "")
    except ValueError:
        doc = {"unrecorded": True}
    if not isinstance(doc, dict) or doc.get("unrecorded"):
        return "settings not recorded (a store written before they were)"
    tl = doc.get("time_limit")
    words = [f"time limit {tl:g} s" if tl is not None else "no time limit"]
    rule = str(doc.get("judge") or "")  # (StopRule.key(): a round count, or auto:target:...)
    if rule.isdigit():
        words.append(f"judge {rule} rounds")
    elif rule.startswith("auto:"):
        words.append(f"judge auto (target {rule.split(':')[1]})")
    elif rule:
        words.append(f"judge {rule}")
    for solver, opts in sorted((doc.get("options") or {}).items()):
        words.append(f"{solver} " + " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(opts.items())))
    return "; ".join(words)


def check_time_limit(time_limit: float | None) -> None:
    """Refuse a time limit no solve can keep, before anything is solved or stored."""
    if time_limit is not None and not (time_limit > 0):
        raise LeaderboardError(f"--time-limit: {time_limit:g} must be > 0 seconds (or leave it out: no limit)")


# ---------------------------------------------------------------------------------------------------------------
# the store


def check_db_path(db: Path, must_exist: bool = False) -> None:
    db = Path(db)
    if must_exist:
        if not db.is_file():
            raise LeaderboardError(f"--db: {db} does not exist (run `shardopt leaderboard run` first)")
        return
    if db.is_dir():
        raise LeaderboardError(f"--db: {db} is a directory, not a database file")
    parent = db.parent if str(db.parent) else Path(".")
    if not parent.is_dir():
        raise LeaderboardError(f"--db: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (db.exists() and not os.access(db, os.W_OK)):
        raise LeaderboardError(f"--db: {db} is not writable")


def connect(db: Path) -> sqlite3.Connection:
    """Open the store (WAL, so runs can share it) and create its tables. Two runs starting on a new file race for
    the journal-mode switch, which SQLite answers "database is locked" without waiting: that is retried."""
    deadline = time.monotonic() + 60.0
    while True:
        con = None
        try:
            con = sqlite3.connect(str(db), timeout=60.0)
            con.execute("PRAGMA busy_timeout = 60000")
            con.execute("PRAGMA journal_mode = WAL")
            con.execute(SCHEMA)
            con.execute(BOUNDS_SCHEMA)
            con.commit()
            migrate(con)
            rekey_with_settings(con, "results", SCHEMA, COLUMNS, lambda row: settings_key(row.get("time_limit")), ADDED_COLUMNS)
            return con
        except sqlite3.OperationalError as exc:
            if con is not None:
                con.close()
            if "locked" in str(exc) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise LeaderboardError(f"--db: {db}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            if con is not None:
                con.close()
            raise LeaderboardError(f"--db: {db}: {exc}") from None


def migrate(con: sqlite3.Connection) -> list[str]:
    """Add the columns of ADDED_COLUMNS that an older store's results table lacks; the names added. Two runs may
    race to add the same column: the loser's "duplicate column name" is ignored."""
    have = {r[1] for r in con.execute("PRAGMA table_info(results)")}
    added = []
    for name, kind in ADDED_COLUMNS:
        if name in have:
            continue
        try:
            con.execute(f"ALTER TABLE results ADD COLUMN {name} {kind}")
        except sqlite3.OperationalError as exc:
            if "duplicate column name" not in str(exc):
                raise
        else:
            added.append(name)
    con.commit()
    return added


def rekey_with_settings(con: sqlite3.Connection, table: str, schema: str, columns: tuple[str, ...],
                        settings_of: Any, added: tuple[tuple[str, str], ...] = ()) -> bool:
    """Rebuild `table` of a store written before the settings were part of its key (SQLite cannot change a UNIQUE
    constraint in place): the rows are copied into the new schema (and its `added` columns) with `settings_of(row)`
    as their settings. True when it rebuilt. One transaction: a second run racing for it finds the work done."""
    def current() -> str:
        row = con.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
        return row[0] if row else ""

    if "settings" in current():
        return False
    con.execute("BEGIN IMMEDIATE")
    try:
        if "settings" in current():
            con.rollback()
            return False
        con.row_factory = sqlite3.Row
        rows = [dict(r) for r in con.execute(f"SELECT * FROM {table}")]
        con.row_factory = None
        con.execute(f"DROP TABLE {table}")
        con.execute(schema)
        have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
        for name, kind in added:  # (columns later releases added: `migrate`'s, where the schema lacks them)
            if name not in have:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        for row in rows:
            row["settings"] = settings_of(row)
            con.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                        [row.get(c) for c in columns])
        con.commit()
    except BaseException:
        con.row_factory = None
        con.rollback()
        raise
    return True


def finished_keys(con: sqlite3.Connection) -> set[tuple[str, str, int, str, str, str]]:
    rows = con.execute("SELECT instance_hash, solver, seed, backend, cost_model, settings FROM results").fetchall()
    return {tuple(r) for r in rows}  # type: ignore[misc]


def insert_row(con: sqlite3.Connection, row: dict[str, Any]) -> bool:
    """Insert one row and commit; False when an equal key was already there (another run finished it first)."""
    cur = con.execute(
        f"INSERT OR IGNORE INTO results ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})",
        [row.get(c) for c in COLUMNS],
    )
    con.commit()
    return cur.rowcount == 1


def load_rows(db: Path) -> list[dict[str, Any]]:
    check_db_path(db, must_exist=True)
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60.0)
        con.row_factory = sqlite3.Row
        rows = [dict(r) for r in con.execute("SELECT * FROM results ORDER BY suite, instance_file, solver, seed")]
        con.close()
    except sqlite3.DatabaseError as exc:
        raise LeaderboardError(f"--db: {db}: not a leaderboard database ({exc})") from None
    if not rows:
        raise LeaderboardError(f"--db: {db} holds no results")
    return rows


def load_bounds(db: Path) -> dict[tuple[str, str], float]:
    """{(instance_hash, cost_model): certified bound (ms)} from the store's bounds table (empty if it has none)."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60.0)
        got = con.execute("SELECT instance_hash, cost_model, value_ms FROM bounds WHERE kind = ? AND value_ms IS NOT NULL",
                          (BOUND_KIND,)).fetchall()
        con.close()
    except sqlite3.OperationalError:  # a store written before bounds existed
        return {}
    return {(h, cm): float(v) for h, cm, v in got}


_VERSION: str | None = None


def code_version() -> str:
    global _VERSION
    if _VERSION is None:
        from shardopt import __version__

        try:
            out = subprocess.run(
                ["git", "describe", "--always", "--dirty"], cwd=Path(__file__).resolve().parent,
                capture_output=True, text=True, timeout=10, check=False,
            )
            git = out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
        except (OSError, subprocess.SubprocessError):
            git = "unknown"
        _VERSION = f"{__version__}+{git}"
    return _VERSION
