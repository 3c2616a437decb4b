"""Building instances of slotted dataclasses slot by slot, for the few made once per event.

A frozen dataclass's `__init__` sets each field through `object.__setattr__`; a builder sets
each slot through its own descriptor in straight-line code, as `dataclasses` writes `__init__`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

_T = TypeVar("_T")


def slot_builder(cls: type[_T], names: Sequence[str]) -> Callable[..., _T]:
    """A function taking one value per name, in order, that returns a new `cls` with those
    slots set and no other code run (no `__init__`, no `__post_init__`): the caller makes
    sure of what those would check. Every slot must be named, or it stays unset."""
    if set(names) != set(vars(cls).get("__slots__", ())) or len(set(names)) != len(names):
        raise ValueError(f"a builder of {cls.__name__} names each of its slots once")
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = [f"def build({', '.join(f'v{i}' for i in range(len(names)))}):",
             "    made = _new(_cls)"]
    for i, name in enumerate(names):
        namespace[f"_set{i}"] = vars(cls)[name].__set__
        lines.append(f"    _set{i}(made, v{i})")
    lines.append("    return made")
    exec("\n".join(lines), namespace)  # noqa: S102 - code made here from slot names only
    built: Callable[..., _T] = namespace["build"]
    return built


def slot_copier(cls: type[_T], names: Sequence[str], replaced: str) -> Callable[[_T, Any], _T]:
    """A function (instance, value) → a copy of the instance with slot `replaced` set to the
    value, the other slots shared (no `__init__` runs)."""
    if replaced not in names:
        raise ValueError(f"{replaced!r} is not among the slots named")
    slot_builder(cls, names)  # the same checks
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = ["def copy(source, value):", "    made = _new(_cls)"]
    for i, name in enumerate(names):
        namespace[f"_set{i}"] = vars(cls)[name].__set__
        lines.append(f"    _set{i}(made, {'value' if name == replaced else f'source.{name}'})")
    lines.append("    return made")
    exec("\n".join(lines), namespace)  # noqa: S102 - code made here from slot names only
    copied: Callable[[_T, Any], _T] = namespace["copy"]
    return copied
