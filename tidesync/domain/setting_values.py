"""Setting values as their fields' types: TOML values, or the text of `TIDESYNC_*` variables."""

from __future__ import annotations

import collections.abc
import enum
import math
import types
import typing
from collections.abc import Mapping, Sequence


def coerce(value: object, target: object) -> object:
    """`value` (from TOML or an environment variable) as the setting's type `target`; raises
    ValueError saying what was expected."""
    if isinstance(target, types.UnionType):
        target = next(t for t in typing.get_args(target) if t is not type(None))
    if isinstance(target, type) and issubclass(target, enum.Enum):
        allowed = [member.value for member in target]
        if value not in allowed:
            raise ValueError(f"expected one of {allowed}, got {value!r}")
        return target(value)
    if target is bool:
        return _coerce_bool(value)
    if target is int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"expected an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"expected an integer, got {value!r}") from None
    if target is float:
        return _coerce_float(value)
    if target is str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return value
    origin = typing.get_origin(target)
    if origin is tuple:
        return _coerce_list(value)
    if origin in (Mapping, dict, collections.abc.Mapping):
        return _coerce_table(value)
    raise ValueError(f"unsupported setting type {target!r}")


def _coerce_float(value: object) -> float:
    """A number (TOML integer or float; in an environment variable, its text); never NaN or
    infinite."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    return number


def _coerce_list(value: object) -> tuple[str, ...]:
    """A TOML array of strings; in an environment variable, comma-separated text."""
    items: Sequence[object]
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        raise ValueError(f"expected an array of strings, got {value!r}")
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"expected an array of strings, got {value!r}")
    return tuple(text for item in items if (text := str(item).strip()))


def _coerce_table(value: object) -> dict[str, str]:
    """A TOML table of scalar values; in an environment variable, `key=value,key=value`."""
    if isinstance(value, str):
        pairs: list[tuple[str, object]] = []
        for item in filter(None, (part.strip() for part in value.split(","))):
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"{item!r} is not key=value")
            pairs.append((key.strip(), text.strip()))
    elif isinstance(value, dict):
        pairs = [(str(key), item) for key, item in value.items()]
    else:
        raise ValueError(f"expected a table, got {value!r}")
    out: dict[str, str] = {}
    for name, setting in pairs:
        if isinstance(setting, list) and all(isinstance(item, str) for item in setting):
            out[name] = ",".join(setting)  # an array of names, e.g. [apply.node_tables]
        elif isinstance(setting, bool):
            out[name] = "true" if setting else "false"
        elif isinstance(setting, str | int | float):
            out[name] = str(setting)
        else:
            raise ValueError(f"{name}: expected a string, number or boolean, got {setting!r}")
    return out


def _coerce_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")
