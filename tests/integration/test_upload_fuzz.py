"""A bounded property run against the upload path (issue 13, item 11): validly signed uploads
built from the real Debezium fixture records, normalized and encoded as a ship does, then
mutated (fields, values, names, or the serialized bytes), go through the real ingress and a real
apply processor on PostgreSQL and MariaDB. Never a 5xx, never a worker crash; every event ends
in a stable state with a reason code, and a clean event of another key still applies."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import itertools
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.clocks import ManualClock
from tests.integration.shore_support import migrated_pool, pg_rows, shore_apps
from tests.integration.sync_client import SyncClient
from tests.integration.test_apply_processor import SHORE_NODE, drain, make_applier
from tests.integration.test_ingress import ACTOR, make_config, node_service, running
from tests.unit.debezium_records import fixtures_dir
from tidesync.cdc.column_types import InMemoryColumnTypes
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.outcomes import Normalized
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    tombstone_revision,
)
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

pytestmark = pytest.mark.services

MAX_EXAMPLES = 300
"""Each example is two uploads (a mutated batch of up to 7 events and a clean one) and a drain
of the worker: about 20 s here, bounded by this count, not by time."""

FUZZ_SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))

TOPIC = "fuzz-ship.inventory.customers"
CUSTOMERS_DDL = (
    "CREATE TABLE customers (id INT PRIMARY KEY, first_name VARCHAR(255) NOT NULL,"
    " middle_name VARCHAR(255), last_name VARCHAR(255) NOT NULL,"
    " email VARCHAR(255) NOT NULL UNIQUE)"
)
CUSTOMERS_TYPES = InMemoryColumnTypes.from_json({"inventory.customers": {
    "id": "int", "first_name": "varchar(255)", "middle_name": "varchar(255)",
    "last_name": "varchar(255)", "email": "varchar(255)",
}})
KEY_1004 = b'{"id":1004}'
FIXTURES = (  # the fixture records that normalize to a row change of inventory.customers
    "mysql_create_value_with_schema__core_test.json",
    "mysql_create_value_with_schema__docs_modern.json",
    "mysql_update_payload__docs.json",
    "mysql_update_value_no_schema__core_test.json",
    "mysql_delete_payload__docs.json",
)
STABLE_RESULTS = {"APPLIED", "CONFLICT_RECORDED", "REJECTED"}


def fixture_events(node_id: str) -> list[ChangeEvent]:
    """The real fixture records through the ship's normalizer, as this node captured them."""
    normalizer = DebeziumNormalizer(NormalizerSettings(
        origin_node_id=node_id, source_connector_id="fuzz-connector",
        column_types=CUSTOMERS_TYPES))
    events = []
    for offset, name in enumerate(FIXTURES):
        value = (fixtures_dir() / name).read_bytes()
        outcome = normalizer.normalize(KafkaRecord(TOPIC, 0, offset, KEY_1004, value, ()))
        assert isinstance(outcome, Normalized), (name, outcome)
        events.append(outcome.event)
    return events


def _revision(seed: str) -> Revision:
    return Revision(hashlib.sha256(seed.encode()).digest()[:16])


def with_identity(event: ChangeEvent) -> ChangeEvent:
    """The event id the ingress expects of the event's coordinates, key and operation."""
    event = dataclasses.replace(event, event_id=event.expected_event_id())
    if event.operation is Operation.DELETE:
        event = dataclasses.replace(event, result_revision=tombstone_revision(event.event_id))
    return event


@dataclasses.dataclass
class ShipSide:
    """Turns fixture events into one ship's stream: a fresh key and partition per batch,
    positions, contiguous sequences and revisions chained per row, as the ship's state does."""

    templates: list[ChangeEvent]
    keys: Iterator[int] = dataclasses.field(default_factory=lambda: itertools.count(1))
    partitions: Iterator[int] = dataclasses.field(default_factory=lambda: itertools.count(1))

    def batch(self, picks: list[int]) -> list[ChangeEvent]:
        partition, events, base = next(self.partitions), [], None
        key = next(self.keys)
        for sequence, pick in enumerate(picks, start=1):
            template = self.templates[pick]
            result = _revision(f"{partition}/{sequence}")
            event = dataclasses.replace(
                template, source_partition=partition, source_position=sequence,
                source_sequence=sequence,
                record=RecordKey.of("inventory", "customers", {"id": key}),
                before=_rekeyed(template.before, key), after=_rekeyed(template.after, key),
                base_revision=None if template.operation is Operation.INSERT else base,
                result_revision=result)
            events.append(with_identity(event))
            base = result
        return events

    def clean(self) -> ChangeEvent:
        """An INSERT of a key no other event touches: it must apply whatever came before."""
        return self.batch([0])[0]


def _rekeyed(row: Any, key: int) -> dict[str, Any] | None:
    if row is None:
        return None
    return {**row, "id": key, "email": f"{key}@{row['email'].split('@')[-1]}"}


# ----------------------------------------------------------------------------- mutations

values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=300),
    st.binary(max_size=64), st.decimals(allow_nan=False, allow_infinity=False, places=4),
    st.datetimes(timezones=st.just(dt.UTC)), st.dates(), st.times(),
)
names = st.one_of(st.sampled_from(["id", "email", "first_name", "missing", ""]),
                  st.text(min_size=1, max_size=80))


@st.composite
def mutate_event(draw: st.DrawFn, event: ChangeEvent) -> ChangeEvent:
    """One event with one field changed, re-identified so it passes the door's id check."""
    kind = draw(st.sampled_from(["value", "column", "key", "table", "operation",
                                 "revision", "sequence", "captured_at", "drop_column"]))
    if kind in ("value", "column", "drop_column"):
        image = "after" if event.after is not None else "before"
        row = dict(getattr(event, image))
        column = draw(st.sampled_from(sorted(row)))
        if kind == "value":
            row[column] = draw(values)
        elif kind == "column":
            row[draw(names)] = row.pop(column)
        else:
            row.pop(column)
        event = dataclasses.replace(event, **{image: row})
    elif kind == "key":
        event = dataclasses.replace(event, record=RecordKey.of(
            "inventory", "customers", {draw(names): draw(values)}))
    elif kind == "table":
        event = dataclasses.replace(event, record=RecordKey.of(
            draw(names), draw(names), dict(event.record.primary_key)))
    elif kind == "operation":
        operation = draw(st.sampled_from(list(Operation)))
        row = event.after if event.after is not None else event.before
        images = {"before": row if operation in (Operation.UPDATE, Operation.DELETE) else None,
                  "after": None if operation is Operation.DELETE else row}
        try:
            event = dataclasses.replace(event, operation=operation, **images)
        except ValueError:
            return event
    elif kind == "revision":
        revision = draw(st.one_of(st.none(), st.binary(min_size=16, max_size=16).map(Revision)))
        event = dataclasses.replace(event, **{draw(st.sampled_from(
            ["base_revision", "result_revision"])): revision})
    elif kind == "sequence":
        event = dataclasses.replace(event, source_sequence=draw(st.one_of(
            st.none(), st.integers(min_value=-5, max_value=2**62))))
    else:
        event = dataclasses.replace(event, captured_at=draw(
            st.datetimes(timezones=st.just(dt.UTC))))
    return with_identity(event)


@st.composite
def mutated_body(draw: st.DrawFn, ship: ShipSide, node_id: str, created_at: dt.datetime,
                 ) -> tuple[bytes, list[ChangeEvent]]:
    """A signed-upload body: a real batch with some events mutated, or its bytes mutated."""
    picks = draw(st.lists(st.integers(0, len(ship.templates) - 1), min_size=1, max_size=6))
    events = ship.batch([0, *picks])
    for index in draw(st.lists(st.integers(0, len(events) - 1), max_size=3)):
        with contextlib.suppress(ValueError, TypeError, OverflowError):  # no ship makes these
            events[index] = draw(mutate_event(events[index]))
    try:
        batch = codec.build_batch(events, node_id=node_id, batch_id=uuid.uuid4(),
                                  created_at=created_at)
        raw = batch.SerializeToString()
    except (ValueError, TypeError, OverflowError):
        events = ship.batch(picks)
        raw = codec.build_batch(events, node_id=node_id, batch_id=uuid.uuid4(),
                                created_at=created_at).SerializeToString()
    if draw(st.booleans()):
        raw = draw(mutate_bytes(raw))
    # The trailer is recomputed: the mutation reaches the decoder, not just the checksum.
    trailer = pb.UploadBatch(uncompressed_bytes=len(raw),
                             checksum=hashlib.sha256(raw).digest()).SerializeToString()
    return codec.compress_bytes(raw + trailer), events


@st.composite
def mutate_bytes(draw: st.DrawFn, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        # Positions are drawn independently of the length (keys and ids vary run to run).
        position = draw(st.integers(0, 2**16)) % max(len(data), 1)
        action = draw(st.sampled_from(["flip", "insert", "delete"]))
        if action == "flip" and data:
            data[position] ^= 1 << draw(st.integers(0, 7))
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[position:position + draw(st.integers(1, 8))]
    return bytes(data)


# ----------------------------------------------------------------------------- checks


def unstable_events(pool: Any, node_id: str) -> list[tuple[Any, ...]]:
    """Inbox events of the node in no stable state: stable is TERMINAL with a result (and a
    reason code unless APPLIED), DEAD with a reason code, or PENDING behind a recorded gap or
    behind a DEAD event of its partition (both wait for an operator or a retransmission)."""
    return pg_rows(pool, """
        SELECT i.event_id, i.state, i.result, i.reason_code FROM inbox_event i
          LEFT JOIN apply_partition p USING (origin_node_id, source_topic, source_partition,
                                            replay_epoch)
         WHERE i.origin_node_id = %s AND NOT (
               (i.state = 'TERMINAL' AND i.result = ANY(%s)
                AND (i.result = 'APPLIED' OR coalesce(i.reason_code, '') <> ''))
            OR (i.state = 'DEAD' AND coalesce(i.reason_code, '') <> '')
            OR (i.state = 'PENDING' AND p.gap_at_sequence IS NOT NULL)
            OR (i.state = 'PENDING' AND EXISTS (
                SELECT 1 FROM inbox_event d WHERE d.origin_node_id = i.origin_node_id
                   AND d.source_topic = i.source_topic
                   AND d.source_partition = i.source_partition
                   AND d.replay_epoch = i.replay_epoch AND d.state = 'DEAD'
                   AND d.source_position < i.source_position)))""",
                   (node_id, sorted(STABLE_RESULTS)))


def settle(processor: ApplyProcessor, clock: ManualClock, pool: Any, node_id: str) -> None:
    """Run the worker, moving time past each backoff, until every event is stable or the
    retries are used up."""
    backoff = processor.settings.backoff
    for _ in range(backoff.max_attempts + 2):
        drain(processor)
        if not unstable_events(pool, node_id):
            return
        clock.advance(backoff.cap_seconds + 1)


def answer_is_coded(answer: Any) -> None:
    assert answer.status < 500, answer.status
    if answer.status != 200:
        assert answer.error().reason_code, answer.status
        return
    for status in answer.message(pb.UploadBatchResponse).statuses:
        assert status.status != pb.RETRYABLE_FAILURE, status.reason_code
        assert status.status == pb.RECEIVED or status.reason_code, status


@dataclasses.dataclass
class Shore:
    """A registered ship's client against the real ingress, and one apply worker."""

    client: SyncClient
    processor: ApplyProcessor
    pool: Any
    clock: ManualClock
    ship: ShipSide
    applied: Callable[[], set[int]]

    def upload(self, events: list[ChangeEvent]) -> Any:
        return self.client.upload(codec.encode_batch(
            events, node_id=self.client.node_id, batch_id=uuid.uuid4(), created_at=self.clock()))

    def settle(self) -> None:
        settle(self.processor, self.clock, self.pool, self.client.node_id)

    def states(self, events: list[ChangeEvent]) -> list[tuple[str, str | None, str | None]]:
        rows = dict((row[0], row[1:]) for row in pg_rows(
            self.pool, "SELECT event_id, state, result, reason_code FROM inbox_event"
                       " WHERE event_id = ANY(%s)", ([e.event_id for e in events],)))
        return [rows[e.event_id] for e in events]


@pytest.fixture
def shore(pg_database, shore_mariadb, make_mariadb_database) -> Iterator[Shore]:
    target = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=target, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(CUSTOMERS_DDL)
    enable_mysql_table(conn, target, "customers", SHORE_NODE)
    clock = ManualClock()
    config = make_config(pg_database)
    node_id = f"it-fuzz-{uuid.uuid4().hex[:8]}"
    with node_service(config) as service:
        secret = service.register(node_id, ACTOR, clock()).secret
    with ExitStack() as stack:
        stack.callback(conn.close)
        url = stack.enter_context(running(config, clock))
        pool = stack.enter_context(migrated_pool(pg_database))
        apps = stack.enter_context(shore_apps(pg_database))
        processor = ApplyProcessor(
            apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool),
            make_applier(shore_mariadb, target), clock,
            ProcessorSettings(worker_id="fuzz"), draw=lambda: 0.5)
        yield Shore(SyncClient(url, node_id, secret, clock), processor, pool, clock,
                    ShipSide(fixture_events(node_id)), customer_ids(conn))


def test_mutated_signed_uploads_end_stable_and_other_keys_keep_applying(shore: Shore) -> None:
    @FUZZ_SETTINGS
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        body, _ = data.draw(mutated_body(shore.ship, shore.client.node_id, shore.clock()))
        answer_is_coded(shore.client.upload(body))
        clean = shore.ship.clean()
        answer_is_coded(shore.upload([clean]))
        shore.settle()
        assert unstable_events(shore.pool, shore.client.node_id) == []
        assert clean.primary_key["id"] in shore.applied()

    run()
    # The mutations reached the worker, not only the door.
    results = {row[0] for row in pg_rows(
        shore.pool, "SELECT DISTINCT result FROM inbox_event WHERE origin_node_id = %s",
        (shore.client.node_id,))}
    assert {"APPLIED", "REJECTED"} <= results


def test_a_table_name_mysql_cannot_hold_rejects_that_event_only(shore: Shore) -> None:
    """Found by the fuzz run: a table name outside the Basic Multilingual Plane made the
    target's table inspection fail, so the whole chunk was retried until DEAD."""
    odd, after = shore.ship.batch([0, 0])
    odd = with_identity(dataclasses.replace(
        odd, record=RecordKey.of("inventory", "customers\U0001f6a2",
                                 dict(odd.record.primary_key))))
    after = with_identity(dataclasses.replace(
        after, record=RecordKey.of("inventory", "customers", {"id": 10_000}),
        after={**after.after, "id": 10_000, "email": "10000@noanswer.org"}))  # type: ignore[dict-item]
    answer_is_coded(shore.upload([odd, after]))
    shore.settle()
    assert shore.states([odd, after]) == [("TERMINAL", "REJECTED", "INVALID_NAME"),
                                          ("TERMINAL", "APPLIED", None)]
    assert 10_000 in shore.applied()


def customer_ids(conn: Any) -> Callable[[], set[int]]:
    def ids() -> set[int]:
        with conn.cursor() as cursor:
            cursor.execute("SELECT id FROM customers")
            return {row[0] for row in cursor.fetchall()}
    return ids

