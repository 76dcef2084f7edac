"""TorchRec as an optional extra: its pins (installed with --no-deps beside the CPU fbgemm build, as the Makefile does) and the
one import of it (`require_torchrec`), whose error holds the exact pip commands."""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any

TORCHREC_VERSION = "1.8.0"


# torchrec's runtime dependencies (and theirs), pinned to versions that import with torch 2.13.0 and fbgemm-gpu-cpu
# 1.8.0; all installed with --no-deps so that pip never chooses torch or fbgemm-gpu.
TORCHREC_RUNTIME_PINS: tuple[str, ...] = (
    "tensordict==0.15.3",
    "pyvers==0.2.3",
    "torchmetrics==1.0.3",
    "lightning-utilities==0.15.3",
    "tqdm==4.70.1",
    "pyre-extensions==0.0.32",
    "typing-inspect==0.9.0",
    "mypy-extensions==1.2.0",
)


def install_commands(python: str | None = None) -> list[str]:
    """The exact commands that install the TorchRec stack into the environment of `python` (this interpreter)."""
    py = python or sys.executable or "python"
    return [
        f"{py} -m pip install --no-deps torchrec=={TORCHREC_VERSION}",
        f"{py} -m pip install --no-deps " + " ".join(TORCHREC_RUNTIME_PINS),
    ]


def install_hint(python: str | None = None) -> str:
    cmds = "\n".join("  " + c for c in install_commands(python))
    return (
        "TorchRec is not installed (the optional extra [torchrec]). `make install` sets it up; by hand, with torch "
        "2.13.0 (CPU) and fbgemm-gpu-cpu 1.8.0 already installed:\n"
        f"{cmds}\n"
        "Always with --no-deps: torchrec's own metadata pulls the CUDA fbgemm-gpu (2.7 GB) over fbgemm-gpu-cpu."
    )


class TorchRecUnavailableError(ImportError):
    """TorchRec cannot be imported; the message says how to install it."""

    def __init__(self, cause: BaseException | None = None):
        why = f" ({type(cause).__name__}: {str(cause).splitlines()[0][:200]})" if cause is not None and str(cause) else ""
        super().__init__(install_hint() + (f"\nImport failed{why}." if why else ""))
        self.cause = cause


def require_torchrec() -> Any:
    """The `torchrec` module (with its planner and sharding types importable); TorchRecUnavailableError otherwise."""
    if "torchrec.distributed.types" in sys.modules and sys.modules.get("torchrec") is not None:
        return sys.modules["torchrec"]
    # importing TorchRec logs through the root logger, which installs a stderr handler on a root without one
    # (logging.basicConfig): a placeholder handler during the import keeps the user's logging configuration as it was
    root = logging.getLogger()
    placeholder = logging.NullHandler() if not root.handlers else None
    if placeholder is not None:
        root.addHandler(placeholder)
    try:
        with warnings.catch_warnings():  # fbgemm's import-time deprecation banners are not the user's concern
            warnings.simplefilter("ignore", DeprecationWarning)
            import torchrec
            import torchrec.distributed.planner  # noqa: F401
            import torchrec.distributed.sharding_plan  # noqa: F401
            import torchrec.distributed.types  # noqa: F401
    except (ImportError, OSError, RuntimeError) as exc:  # OSError / RuntimeError: a broken fbgemm shared library
        raise TorchRecUnavailableError(exc) from None
    finally:
        if placeholder is not None:
            root.removeHandler(placeholder)
    return torchrec


def torchrec_installed() -> TorchRecUnavailableError | None:
    """Whether TorchRec is there to import, without importing it (an import costs seconds: the solver's time limit
    counts it, so it happens where the planning does): None, or the error a failed import would raise. A broken
    native library only shows when the import runs."""
    import importlib.util

    if "torchrec" in sys.modules:
        return TorchRecUnavailableError(ImportError("import of torchrec halted")) if sys.modules["torchrec"] is None else None
    try:
        found = importlib.util.find_spec("torchrec")
    except (ImportError, ValueError) as exc:
        return TorchRecUnavailableError(exc)
    return None if found is not None else TorchRecUnavailableError(ImportError("No module named 'torchrec'"))


def torchrec_available() -> bool:
    try:
        require_torchrec()
    except TorchRecUnavailableError:
        return False
    return True
