"""The arguments of rule transforms: their schema, their checks and a frozen mapping of them.

Pure functions; a problem is a sentence naming the argument, never repeating its value.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

ArgValue: TypeAlias = str | int | bool
"""An argument as a rule writes it (a TOML string, integer or boolean)."""

BoundValue: TypeAlias = int | Decimal | ZoneInfo
"""An argument checked and converted for a transform to use."""

BoundArgs: TypeAlias = Mapping[str, BoundValue]

MAX_DECIMAL_ARG_TEXT = 64
MAX_DECIMAL_ARG_DIGITS = 30
MAX_DECIMAL_ARG_EXPONENT = 30
"""A decimal argument has at most 30 significant digits and its point sits at most 30 places
from them, so results stay within what a DECIMAL column can hold."""

MAX_ZONE_NAME = 64

_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?")
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+){0,3}")


class FrozenArgs(Mapping[str, ArgValue]):
    """A read-only, hashable mapping of arguments, kept in name order."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, ArgValue] | None = None) -> None:
        self._items: dict[str, ArgValue] = dict(sorted((items or {}).items()))

    def __getitem__(self, name: str) -> ArgValue:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        # Consistent with Mapping's equality, under which True == 1.
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"FrozenArgs({self._items!r})"


class ArgType(enum.Enum):
    """What an argument holds."""

    INT = "int"
    """An integer within the argument's bounds (a boolean is not one)."""
    DECIMAL = "decimal"
    """A decimal number written as a string ("0.001", "1E+3") or as an integer."""
    ZONE = "zone"
    """An IANA time zone name ("Asia/Shanghai")."""


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One argument a transform takes."""

    name: str
    type: ArgType
    required: bool = True
    default: int | None = None
    low: int | None = None
    high: int | None = None

    def describe(self) -> str:
        """The schema as a sentence: part of the transform's fingerprint."""
        text = f"{self.name}: {self.type.value}"
        if self.low is not None and self.high is not None:
            text += f" {self.low}..{self.high}"
        if not self.required:
            text += ", optional" if self.default is None else f", default {self.default}"
        return text


def arg_problems(schema: tuple[ArgSpec, ...], args: Mapping[str, ArgValue]) -> list[str]:
    """Missing, unknown and malformed arguments, one sentence each."""
    known = {spec.name for spec in schema}
    problems = [f"unknown argument {name}" for name in sorted(set(args) - known)]
    for spec in schema:
        if spec.name not in args:
            if spec.required:
                problems.append(f"argument {spec.name} is missing ({spec.describe()})")
        elif _convert(spec, args[spec.name]) is None:
            problems.append(f"argument {spec.name} is not valid ({spec.describe()})")
    return problems


def bind_args(schema: tuple[ArgSpec, ...], args: Mapping[str, ArgValue]) -> dict[str, BoundValue]:
    """The converted arguments with defaults filled in; only for arguments without problems."""
    bound: dict[str, BoundValue] = {}
    for spec in schema:
        if spec.name in args:
            value = _convert(spec, args[spec.name])
            if value is None:
                raise ValueError(f"argument {spec.name} is not valid")
            bound[spec.name] = value
        elif spec.default is not None:
            bound[spec.name] = spec.default
    return bound


def _convert(spec: ArgSpec, value: ArgValue) -> BoundValue | None:
    if spec.type is ArgType.INT:
        return _bounded_int(spec, value)
    if spec.type is ArgType.DECIMAL:
        return decimal_arg(value)
    return zone_arg(value)


def _bounded_int(spec: ArgSpec, value: ArgValue) -> int | None:
    if type(value) is not int:
        return None
    if (spec.low is not None and value < spec.low) or (spec.high is not None and value > spec.high):
        return None
    return value


def decimal_arg(value: ArgValue) -> Decimal | None:
    """A finite decimal of bounded size from a string or an integer, or None."""
    if type(value) is int:
        value = str(value)
    if not isinstance(value, str) or len(value) > MAX_DECIMAL_ARG_TEXT:
        return None
    if _DECIMAL_TEXT.fullmatch(value) is None:
        return None
    try:
        number = Decimal(value)
    except InvalidOperation:
        return None
    exponent = number.as_tuple().exponent
    if not isinstance(exponent, int) or abs(exponent) > MAX_DECIMAL_ARG_EXPONENT:
        return None
    return number if len(number.as_tuple().digits) <= MAX_DECIMAL_ARG_DIGITS else None


def zone_arg(value: ArgValue) -> ZoneInfo | None:
    """The IANA time zone of that name from the installed tz database, or None."""
    if not isinstance(value, str) or len(value) > MAX_ZONE_NAME:
        return None
    if _ZONE_NAME.fullmatch(value) is None:
        return None
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None
