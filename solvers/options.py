"""Type checks for solver options that arrive as text (`shardopt solve -O KEY=VALUE`, JSON-decoded).

The solvers' constructors coerce (`bool("maybe")` is True), so a mistyped option would silently become a different
plan. Options annotated with plain types (bool, int, float, str, or those or None) are checked against the value
before the solver is built - the constructor's parameters, and the fields of the config dataclass a solver names as
its `config_type` (neuroshard's `-O` overrides are NeuroShardConfig fields); richer options (configs, paths, lists)
are left to the solver.
"""

from __future__ import annotations

import types
import typing
from typing import Any

_SIMPLE = {bool: "true or false", int: "an integer", float: "a number", str: "text", type(None): "null"}


def _accepts(kind: type, value: Any) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    return value is None


def check_option_types(solver_cls: type, options: dict[str, Any]) -> None:
    """Raise ValueError naming the option, its value and the expected type when a simple-typed option is mistyped."""
    try:
        hints = typing.get_type_hints(solver_cls.__init__)
        config = getattr(solver_cls, "config_type", None)  # a solver whose options are a config dataclass's fields
        if config is not None:
            hints = {**typing.get_type_hints(config), **hints}
    except Exception:  # (an annotation that does not resolve: nothing to check against)
        return
    for key, value in options.items():
        hint = hints.get(key)
        if hint is None:
            continue
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        kinds = typing.get_args(hint) if union else (hint,)
        if not all(k in _SIMPLE for k in kinds):
            continue
        if not any(_accepts(k, value) for k in kinds):
            want = " or ".join(_SIMPLE[k] for k in kinds)
            raise ValueError(f"option {key}={value!r} for solver {getattr(solver_cls, 'name', solver_cls.__name__)!r}: expected {want}")
