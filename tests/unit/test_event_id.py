"""Stable event ids (§7.4): the same source coordinates always give the same id, in any
process; any differing coordinate, including the replay epoch, gives a different id."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
    tombstone_revision,
)
from tidesync.domain.values import BitString, JsonText, canonical_text, canonical_value

names = st.text(min_size=1, max_size=12)
key_values = st.one_of(
    st.integers(-(2**63), 2**64), st.text(max_size=10), st.binary(max_size=8),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
)
primary_keys = st.lists(st.tuples(names, key_values), min_size=1, max_size=3,
                        unique_by=lambda pair: pair[0])
coordinates = st.builds(
    SourceCoordinates, origin_node_id=names, replay_epoch=st.integers(0, 1000),
    topic=names, partition=st.integers(0, 64), offset=st.integers(0, 2**62),
)
record_keys = st.builds(RecordKey.of, database=names, table=names, primary_key=primary_keys)
operations = st.sampled_from(list(Operation))


def _mutations(source: SourceCoordinates, key: RecordKey, op: Operation) -> list[tuple]:
    """The same coordinates with exactly one part changed, for every part."""
    return [
        (SourceCoordinates(source.origin_node_id + "x", *_rest(source, 1)), key, op),
        (SourceCoordinates(source.origin_node_id, source.replay_epoch + 1, source.topic,
                           source.partition, source.offset), key, op),
        (SourceCoordinates(source.origin_node_id, source.replay_epoch, source.topic + "x",
                           source.partition, source.offset), key, op),
        (SourceCoordinates(source.origin_node_id, source.replay_epoch, source.topic,
                           source.partition + 1, source.offset), key, op),
        (SourceCoordinates(source.origin_node_id, source.replay_epoch, source.topic,
                           source.partition, source.offset + 1), key, op),
        (source, RecordKey(key.database + "x", key.table, key.primary_key), op),
        (source, RecordKey(key.database, key.table + "x", key.primary_key), op),
        (source, RecordKey(key.database, key.table, (*key.primary_key, ("zz_extra", 1))), op),
        (source, key, next(o for o in Operation if o is not op)),
    ]


def _rest(source: SourceCoordinates, skip: int) -> tuple:
    return (source.replay_epoch, source.topic, source.partition, source.offset)


@given(coordinates, record_keys, operations)
def test_event_id_is_a_pure_function_of_the_coordinates(source, key, op):
    assert event_id_for(source, key, op) == event_id_for(source, key, op)
    assert event_id_for(source, key, op).version == 5


@given(coordinates, record_keys, operations)
def test_any_differing_coordinate_gives_a_different_id(source, key, op):
    original = event_id_for(source, key, op)
    changed = [event_id_for(*mutation) for mutation in _mutations(source, key, op)]
    assert original not in changed
    assert len(set(changed)) == len(changed)


@given(coordinates, record_keys, operations, st.integers(1, 50))
def test_replay_epochs_never_collide(source, key, op, epochs):
    ids = {
        event_id_for(SourceCoordinates(source.origin_node_id, epoch, source.topic,
                                       source.partition, source.offset), key, op)
        for epoch in range(epochs)
    }
    assert len(ids) == epochs


def test_field_boundaries_cannot_be_shifted():
    # "ab" + "c" and "a" + "bc" must not produce the same id.
    key = RecordKey.of("db", "t", {"id": 1})
    a = event_id_for(SourceCoordinates("ab", 0, "c", 0, 0), key, Operation.INSERT)
    b = event_id_for(SourceCoordinates("a", 0, "bc", 0, 0), key, Operation.INSERT)
    assert a != b


def test_key_value_types_are_part_of_the_identity():
    source = SourceCoordinates("ship-1", 0, "sync.cdc.s.db.t", 0, 7)
    ids = {
        event_id_for(source, RecordKey.of("db", "t", {"id": value}), Operation.UPDATE)
        for value in (1, "1", True, Decimal("1"), Decimal("1.0"), b"1")
    }
    assert len(ids) == 6


GOLDEN_SOURCE = SourceCoordinates("ship-0001", 0, "sync.cdc.ship1.inventory.customers", 0, 42)
GOLDEN_KEY = RecordKey.of("inventory", "customers", {"id": 1004})
# Computed by hand from the documented name layout: "9:ship-0001;1:0;34:sync.cdc…;6:UPDATE;".
GOLDEN_ID = "a247c8c2-7a0e-53bc-8d31-65abb63551cb"


def test_golden_event_id_never_changes_between_versions():
    # Stored ids on the shore depend on this value; changing the formula breaks dedup.
    assert str(event_id_for(GOLDEN_SOURCE, GOLDEN_KEY, Operation.UPDATE)) == GOLDEN_ID


any_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=12),
    st.binary(max_size=8), st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=st.just(dt.UTC)), st.dates(), st.times(),
    st.builds(JsonText, st.text(max_size=8)),
    st.builds(lambda bits: BitString(len(bits), int(bits or "0", 2)),
              st.text(alphabet="01", min_size=1, max_size=9)),
)


@given(st.lists(st.tuples(st.text(max_size=8), any_values), max_size=4))
def test_canonical_text_is_the_json_of_the_tagged_values(pairs):
    # Record keys and event ids are stored; the text must stay the JSON it always was.
    expected = json.dumps([[name, canonical_value(value)] for name, value in pairs],
                          separators=(",", ":"), ensure_ascii=False)
    assert canonical_text(pairs) == expected


def test_golden_canonical_record_key_never_changes_between_versions():
    key = RecordKey.of("inventory", "customers", [("id", 1004), ("code", 'Ä"\\n')])
    assert key.canonical() == (
        '[["database",["str","inventory"]],["schema",["null"]],["table",["str","customers"]]]'
        '[["id",["int","1004"]],["code",["str","Ä\\"\\\\n"]]]')


def test_event_id_is_stable_across_processes():
    program = (
        "from tidesync.domain.change_event import *\n"
        "import json, sys\n"
        "out = []\n"
        "for offset in range(50):\n"
        "    s = SourceCoordinates('ship-0001', 3, 'topic', 2, offset)\n"
        "    k = RecordKey.of('db', 't', {'id': offset, 'code': 'x' * offset})\n"
        "    out.append(str(event_id_for(s, k, Operation.DELETE)))\n"
        "print(json.dumps(out))\n"
    )
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", program], capture_output=True,
                                  text=True, check=True, env={"PYTHONHASHSEED": seed}).stdout)
        for seed in ("1", "2")
    ]
    here = [
        str(event_id_for(SourceCoordinates("ship-0001", 3, "topic", 2, offset),
                         RecordKey.of("db", "t", {"id": offset, "code": "x" * offset}),
                         Operation.DELETE))
        for offset in range(50)
    ]
    assert runs[0] == runs[1] == here
    assert len(set(here)) == 50


def _event(**overrides) -> ChangeEvent:
    key = RecordKey.of("inventory", "customers", {"id": 1004})
    source = SourceCoordinates("ship-1", 0, "topic", 0, 10)
    fields = dict(
        event_id=event_id_for(source, key, Operation.UPDATE), origin_node_id="ship-1",
        source_connector_id="dbz", source_topic="topic", source_partition=0,
        source_position=10, record=key, operation=Operation.UPDATE,
        captured_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        before={"id": 1004, "email": "a@x", "amount": Decimal("1.00")},
        after={"id": 1004, "email": "b@x", "amount": Decimal("1.00")},
    )
    fields.update(overrides)
    return ChangeEvent(**fields)


def test_change_event_knows_its_changed_columns_and_expected_id():
    event = _event()
    assert event.changed_columns() == ("email",)
    assert event.expected_event_id() == event.event_id
    assert _event(after={"id": 1004, "email": "a@x", "amount": Decimal("1.0")}
                  ).changed_columns() == ("amount",)


def test_change_event_is_immutable_and_validated():
    event = _event()
    try:
        event.after["email"] = "c@x"  # type: ignore[index]
    except TypeError:
        pass
    else:
        raise AssertionError("after image must be read-only")
    for bad in (
        dict(operation=Operation.DELETE),  # DELETE with an after image
        dict(before=None),  # UPDATE without before
        dict(captured_at=dt.datetime(2026, 1, 1)),  # naive time
        dict(schema_version="one"),
    ):
        try:
            _event(**bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted invalid event {bad}")


def test_revisions_are_16_bytes_from_text_or_binary():
    text = "c56ab6d4-1b2b-58bf-a59c-bfb10e1ac67a"
    assert Revision.parse(text) == Revision.parse(uuid.UUID(text).bytes)
    assert Revision.parse(text).text == text
    for bad in ("not-a-uuid", b"short"):
        try:
            Revision.parse(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted revision {bad!r}")


@given(st.binary(min_size=16, max_size=16))
def test_revision_text_is_the_uuid_text(raw):
    assert Revision(raw).text == str(uuid.UUID(bytes=raw))


def test_tombstone_revision_is_deterministic_per_event():
    a, b = uuid.uuid4(), uuid.uuid4()
    assert tombstone_revision(a) == tombstone_revision(a)
    assert tombstone_revision(a) != tombstone_revision(b)
