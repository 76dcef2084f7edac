"""benchmarks/gpu_wheel.sh, which carries fbgemm-gpu's CUDA wheel to a GPU machine in parts: split here, joined and
checked there. A dry run on a stand-in file: the parts are each at most the part size, they join to the same bytes, and
a missing part is refused by the checksum, never installed."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_wheel.sh"


def _run(*args: str, part_mib: int = 1) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PART_MIB": str(part_mib)})


def test_split_then_assemble_gives_the_same_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "fbgemm_gpu-1.8.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(os.urandom(3 * 2**20 + 12345))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    parts_dir = tmp_path / "carried"
    r = _run("split", str(wheel), str(parts_dir))
    assert r.returncode == 0, r.stderr
    parts = sorted(parts_dir.glob("*.part*"))
    assert len(parts) == 4 and all(p.stat().st_size <= 2**20 for p in parts)
    r = _run("assemble", "--dry-run", str(parts_dir))
    assert r.returncode == 0, r.stderr
    assert "sha256 ok" in r.stdout and "not installed" in r.stdout
    assert hashlib.sha256((parts_dir / wheel.name).read_bytes()).hexdigest() == digest
    parts[2].unlink()  # (a call that did not carry its part)
    r = _run("assemble", "--dry-run", str(parts_dir))
    assert r.returncode == 3 and "sha256 mismatch" in r.stderr
    assert not (parts_dir / wheel.name).exists()


def test_bad_use_exits_2(tmp_path: Path) -> None:
    assert _run("split", str(tmp_path / "missing.whl")).returncode == 2
    assert _run("assemble", str(tmp_path)).returncode == 2
    assert _run("nonsense").returncode == 2
