"""Slot builders make what a dataclass's constructor makes of the same values, and refuse a
class whose slots they would leave unset."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.slots import slot_builder, slot_copier


@dataclasses.dataclass(frozen=True, slots=True)
class _Point:
    x: int
    y: str
    z: bytes | None = None


_NAMES = [field.name for field in dataclasses.fields(_Point)]
_values = st.tuples(st.integers(), st.text(), st.none() | st.binary())


@given(_values)
def test_a_builder_makes_what_the_constructor_makes(values: tuple[int, str, bytes | None]
                                                   ) -> None:
    built = slot_builder(_Point, _NAMES)(*values)
    assert built == _Point(*values)
    assert hash(built) == hash(_Point(*values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.x = 1  # type: ignore[misc]


@given(_values, st.text())
def test_a_copier_replaces_one_slot_and_keeps_the_others(
        values: tuple[int, str, bytes | None], text: str) -> None:
    point = _Point(*values)
    copied = slot_copier(_Point, _NAMES, "y")(point, text)
    assert copied == dataclasses.replace(point, y=text)
    assert point == _Point(*values)


def test_a_builder_names_every_slot_once() -> None:
    with pytest.raises(ValueError, match="each of its slots once"):
        slot_builder(_Point, ["x", "y"])
    with pytest.raises(ValueError, match="each of its slots once"):
        slot_builder(_Point, ["x", "y", "z", "z"])
    with pytest.raises(ValueError, match="not among"):
        slot_copier(_Point, _NAMES, "w")
