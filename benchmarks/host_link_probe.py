"""The device-host link of the GPU this runs on, measured: what a UVM placement's misses cross (issue 17).

The analytic model costs a `fused_uvm` / `fused_uvm_caching` shard's misses at the profile's `host_link_bandwidth`, a
data-sheet figure (PCIe Gen5 x16 for the H100 / H200). This probe measures what that link gives:

- bulk copies of pinned host memory to and from the GPU (`copy_h2d`, `copy_d2h`), the ceiling;
- a kernel on the GPU gathering random embedding rows straight out of pinned (mapped) host memory (`gather_zero_copy`),
  the access pattern of a UVM miss (fbgemm's UVM tables are host memory the kernel reads row by row), at several row
  widths: small rows use the link far worse than bulk copies, which is what the model's one bandwidth does not say.

    python3 benchmarks/host_link_probe.py --out host-link.json

Needs CUDA (exit 2 without). Each figure is the median of `--repeats` timed passes (CUDA events) after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def _time(fn: Callable[[], Any], repeats: int) -> list[float]:
    import torch

    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return out


def _summary(seconds: list[float], nbytes: int) -> dict[str, Any]:
    med = statistics.median(seconds)
    return {"bytes": nbytes, "median_s": med, "min_s": min(seconds), "max_s": max(seconds),
            "gb_per_s": nbytes / med / 1e9, "repeats": len(seconds)}


def _device_view(host: Any) -> Any:
    """A CUDA tensor reading `host` (pinned) in place over the link, or None where this torch / CuPy cannot make one."""
    import torch

    class _Iface:  # __cuda_array_interface__ of the pinned buffer: under unified addressing its pointer is valid on the GPU
        def __init__(self, t: Any) -> None:
            self.__cuda_array_interface__ = {"shape": tuple(t.shape), "typestr": "<f4", "data": (t.data_ptr(), False),
                                              "version": 3, "strides": None}

    try:
        view = torch.as_tensor(_Iface(host), device="cuda")
        if view.data_ptr() == host.data_ptr():
            return view
    except Exception:  # noqa: BLE001 - torch refuses host pointers in some versions: try CuPy
        pass
    try:
        import cupy

        mem = cupy.cuda.UnownedMemory(host.data_ptr(), host.numel() * 4, host)
        arr = cupy.ndarray(tuple(host.shape), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(mem, 0))
        return torch.as_tensor(arr, device="cuda")
    except Exception:  # noqa: BLE001
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", default="host-link.json")
    ap.add_argument("--copy-mib", type=int, default=1024, help="bulk copy size")
    ap.add_argument("--table-gib", type=float, default=4.0, help="pinned host table the gathers read")
    ap.add_argument("--lookups", type=int, default=1 << 20, help="rows gathered per timed pass")
    ap.add_argument("--dims", default="16,32,64,128,256", help="row widths (fp32 elements)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("host_link_probe: needs a CUDA device", file=sys.stderr)
        return 2
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    doc: dict[str, Any] = {
        "command": "python3 benchmarks/host_link_probe.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "judge": "cuda (measured, CUDA events)",
    }
    n = args.copy_mib << 20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    doc["copy_h2d"] = _summary(_time(lambda dev=dev, host=host: dev.copy_(host, non_blocking=True), args.repeats), n)
    doc["copy_d2h"] = _summary(_time(lambda dev=dev, host=host: host.copy_(dev, non_blocking=True), args.repeats), n)
    del host, dev

    gathers: dict[str, Any] = {}
    dims = [int(d) for d in args.dims.split(",")]
    table_bytes = int(args.table_gib * 2**30)
    table = torch.empty(table_bytes // 4, dtype=torch.float32, pin_memory=True)
    table.fill_(1.0)
    for d in dims:
        rows = table_bytes // (4 * d)
        host_rows = table[: rows * d].view(rows, d)
        view = _device_view(host_rows)
        if view is None:
            doc["gather_zero_copy"] = "no CUDA view of pinned host memory in this torch / CuPy"
            break
        idx = torch.randint(0, rows, (args.lookups,), device="cuda", generator=gen)
        hbm = torch.empty(min(rows, (2 << 30) // (4 * d)), d, device="cuda")
        idx_hbm = idx % hbm.shape[0]
        z = _summary(_time(lambda view=view, idx=idx: view.index_select(0, idx), args.repeats), args.lookups * d * 4)
        h = _summary(_time(lambda hbm=hbm, idx_hbm=idx_hbm: hbm.index_select(0, idx_hbm), args.repeats), args.lookups * d * 4)
        z["row_bytes"] = h["row_bytes"] = d * 4
        gathers[str(d)] = {"host_zero_copy": z, "hbm": h, "hbm_over_host": z["median_s"] / h["median_s"]}
        del hbm
    else:
        doc["gather_zero_copy"] = gathers
    doc["settings"] = {"copy_mib": args.copy_mib, "table_gib": args.table_gib, "lookups": args.lookups,
                       "dims": dims, "repeats": args.repeats, "seed": args.seed}
    text = json.dumps(doc, indent=1)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
