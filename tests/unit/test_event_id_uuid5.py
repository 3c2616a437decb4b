"""The event id's UUIDv5 is the standard library's, whatever the name (ids recorded by ships and
shores before stay the ids derived now)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.change_event import EVENT_ID_NAMESPACE, uuid5, uuid_of_bytes


@given(st.text(), st.uuids())
def test_uuid5_equals_the_standard_librarys(name: str, namespace: uuid.UUID) -> None:
    for space in (namespace, EVENT_ID_NAMESPACE):
        try:
            expected = uuid.uuid5(space, name)
        except UnicodeEncodeError:
            with pytest.raises(UnicodeEncodeError):
                uuid5(space.bytes, name)
            continue
        found = uuid5(space.bytes, name)
        assert (found, found.version, found.variant) == (expected, 5, uuid.RFC_4122)


@given(st.binary(min_size=16, max_size=16))
def test_an_id_read_back_is_the_standard_librarys_uuid(data: bytes) -> None:
    found, expected = uuid_of_bytes(data), uuid.UUID(bytes=data)
    assert (found, hash(found), found.is_safe, str(found)) == (
        expected, hash(expected), expected.is_safe, str(expected))


@given(st.binary().filter(lambda data: len(data) != 16))
def test_an_id_of_other_than_16_bytes_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        uuid_of_bytes(data)
