"""Typed solver options: each solver's options are one frozen dataclass whose fields carry a default, a one-line help
and the values they allow (`option(...)`), checked in one place (`build_options`).

Why one place: options arrive as text (`shardopt solve -O KEY=VALUE`, JSON-decoded) and as Python values (the
leaderboard, benchmarks, tests), and a solver's constructor that coerced them (`bool("maybe")` is True) turned a typo
into a different plan. Every solver therefore rejects the same mistakes with the same message - the option, the value
and what it allows - and `shardopt solvers --options NAME` prints the same facts the checks use.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from shardopt.core.errors import UserError

T = TypeVar("T")

OPTION_META = "shardopt_option"


@dataclass(frozen=True)
class OptionRule:
    """What a field allows beyond its type: an interval (`low` / `high`, each inclusive unless `*_open`), a set of
    `choices` (for text, and for each item of a tuple of text), and a named `check` (a predicate with its words)."""

    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], bool] | None = None
    check_text: str = ""

    def allowed(self) -> str:
        """The allowed values in words ('' when only the type restricts them)."""
        parts = []
        if self.low is not None and self.high is not None:
            parts.append(f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}")
        elif self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        elif self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        if self.choices is not None:
            parts.append("one of " + ", ".join(self.choices))
        if self.check_text:
            parts.append(self.check_text)
        return "; ".join(parts)

    def problem(self, value: Any) -> str | None:
        """Why `value` (of the right type, not None) is not allowed; None when it is."""
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                if math.isnan(item):
                    return "is not a number"
                if self.low is not None and (item < self.low or (self.low_open and item == self.low)):
                    return f"must be {self.allowed()}"
                if self.high is not None and (item > self.high or (self.high_open and item == self.high)):
                    return f"must be {self.allowed()}"
            if self.choices is not None and item not in self.choices:
                return f"must be {self.allowed()}"
        if self.check is not None and not self.check(value):
            return f"must be {self.allowed()}"
        return None


def option(default: Any, help: str, *, low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False, choices: tuple[str, ...] | None = None, check: Callable[[Any], bool] | None = None,
           check_text: str = "") -> Any:
    """A field of an options dataclass: its default, its help line and what it allows."""
    rule = OptionRule(help, low, high, low_open, high_open, choices, check, check_text)
    return dataclasses.field(default=default, metadata={OPTION_META: rule})


def power_of_two(v: int) -> bool:
    return v >= 1 and not v & (v - 1)


def existing_file(v: str | None) -> bool:
    return v is None or Path(v).is_file()


class OptionError(UserError, ValueError):
    """A solver option that does not exist, or a value it does not allow: bad input (exit 2)."""

    error_kind = "bad_option"


@dataclass(frozen=True)
class NoOptions:
    """The options of a solver that takes none."""


@dataclass(frozen=True)
class OptionSpec:
    """One option as `shardopt solvers --options` shows it."""

    name: str
    type_text: str
    default: Any
    help: str
    allowed: str


_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "text", type(None): "null"}
_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "text", type(None): "null"}


def _kinds(hint: Any) -> tuple[Any, ...]:
    """The alternatives of a field's annotation: (int, NoneType) for `int | None`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _is_tuple(kind: Any) -> bool:
    return typing.get_origin(kind) is tuple


def _item_kind(kind: Any) -> Any:
    return typing.get_args(kind)[0]


def _type_text(hint: Any) -> str:
    words = []
    for k in _kinds(hint):
        words.append(f"list of {_TYPE_NAMES.get(_item_kind(k), '?')}" if _is_tuple(k) else _TYPE_NAMES.get(k, getattr(k, "__name__", str(k))))
    return " | ".join(words)


def _type_words(hint: Any) -> str:
    words = []
    for k in _kinds(hint):
        words.append(f"a list of {_TYPE_NAMES.get(_item_kind(k), '?')}" if _is_tuple(k) else _TYPE_WORDS.get(k, str(k)))
    return " or ".join(words)


def _coerce_one(kind: Any, value: Any) -> tuple[bool, Any]:
    """(True, the value as `kind`) when `value` is one, else (False, None). Numbers stay numbers: 1 is not true."""
    if kind is bool:
        return (True, value) if isinstance(value, bool) else (False, None)
    if kind is int:
        return (True, value) if isinstance(value, int) and not isinstance(value, bool) else (False, None)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return (True, float(value)) if ok else (False, None)
    if kind is str:
        if isinstance(value, Path):
            return True, str(value)
        return (True, value) if isinstance(value, str) else (False, None)
    if kind is type(None):
        return (True, None) if value is None else (False, None)
    if _is_tuple(kind):
        item = _item_kind(kind)
        if isinstance(value, str) and item is str:  # "a,b" from the command line
            value = [x.strip() for x in value.split(",") if x.strip()]
        if isinstance(value, (list, tuple)):
            out = []
            for v in value:
                ok, got = _coerce_one(item, v)
                if not ok:
                    return False, None
                out.append(got)
            return True, tuple(out)
        return False, None
    return True, value  # (an annotation this module does not know: left to the solver)


@functools.cache
def _hints(options_type: type) -> dict[str, Any]:
    """The fields' annotations, resolved once per options type (solvers are built per solve, some inside others)."""
    return typing.get_type_hints(options_type)


def option_fields(options_type: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(options_type))


def option_specs(options_type: type, defaults: Any = None) -> list[OptionSpec]:
    """Every option of a solver's options dataclass, with its type, default (from `defaults` where given), help and
    allowed values."""
    hints = _hints(options_type)
    start = defaults if defaults is not None else options_type()
    out = []
    for f in option_fields(options_type):
        rule = f.metadata.get(OPTION_META)
        default = getattr(start, f.name)
        out.append(OptionSpec(f.name, _type_text(hints[f.name]), default, rule.help if rule else "", rule.allowed() if rule else ""))
    return out


def _checked(f: dataclasses.Field, hint: Any, value: Any, solver: str) -> Any:
    """`value` as field `f`'s type, within its rule; OptionError naming option, value and what is allowed."""
    for kind in _kinds(hint):
        ok, got = _coerce_one(kind, value)
        if ok:
            break
    else:
        raise OptionError(f"option {f.name}={value!r} for solver {solver!r}: expected {_type_words(hint)}")
    rule = f.metadata.get(OPTION_META)
    problem = rule.problem(got) if rule is not None and got is not None else None
    if problem is not None:
        raise OptionError(f"option {f.name}={value!r} for solver {solver!r}: {problem}")
    return got


def build_options(options_type: type[T], values: Mapping[str, Any], *, solver: str, base: T | None = None) -> T:
    """`base` (default: the dataclass's defaults) with `values` set; every field then checked against its type and rule.

    OptionError names the option, the value and what is allowed; an unknown name lists the solver's options."""
    if base is not None and not isinstance(base, options_type):
        raise OptionError(f"solver {solver!r} takes options of type {options_type.__name__}, not {type(base).__name__}")
    fields = {f.name: f for f in option_fields(options_type)}
    unknown = [k for k in values if k not in fields]
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        raise OptionError(f"solver {solver!r} has no option {unknown[0]!r} (its options: {known})")
    start = base if base is not None else options_type()
    merged = {name: values.get(name, getattr(start, name)) for name in fields}
    hints = _hints(options_type)
    checked = {name: _checked(f, hints[name], merged[name], solver) for name, f in fields.items()}
    return dataclasses.replace(start, **checked)  # type: ignore[type-var]


def options_as_dict(options: Any) -> dict[str, Any]:
    """The options as JSON-friendly values (tuples as lists): what a plan's params and a leaderboard key record."""
    return {f.name: (list(v) if isinstance(v, tuple) else v) for f in option_fields(type(options)) for v in [getattr(options, f.name)]}


def changed_options(options: Any, defaults: Any = None) -> dict[str, Any]:
    """The options that differ from the defaults (a leaderboard key names only those)."""
    base = options_as_dict(defaults if defaults is not None else type(options)())
    return {k: v for k, v in options_as_dict(options).items() if v != base[k]}


def parse_option_text(items: list[str]) -> dict[str, Any]:
    """KEY=VALUE strings (`-O`) as a dict, each value JSON-decoded where it is JSON (`true`, `3`, `[1, 2]`), else text."""
    import json

    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"--option: {item!r} is not KEY=VALUE")
        try:
            parsed[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            parsed[key.strip()] = raw
    return parsed
