"""Downlink commands on real PostgreSQL: issuing (contiguous per-node sequences, idempotent,
concurrent issuers), and GET /sync/v1/commands + POST /sync/v1/command-acks over a real
server with signed requests: own commands only, stable cursor, idempotent acks, evidence."""

from __future__ import annotations

import datetime as dt
import secrets
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

import pytest

from tests.integration.sync_client import Answer, SyncClient
from tests.integration.test_ingress import (
    ACTOR,
    FakeClock,
    make_config,
    node_service,
)
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.bootstrap.ingress import build_ingress
from tidesync.config import Config
from tidesync.domain.change_event import Operation, RecordKey, Revision, tombstone_revision
from tidesync.domain.downlink_command import (
    CommandKind,
    DecisionPayload,
    NewCommand,
    RowChangePayload,
    command_id_for,
)
from tidesync.entrypoints.http import BackgroundServer, create_app
from tidesync.localservices import PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.shore.downlink import DownlinkService, open_downlink
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

PREFIX = "it-downlink-"
SHORE = "shore-hq"


@pytest.fixture(scope="module")
def database(pg_database: PostgresDatabase) -> Iterator[PostgresDatabase]:
    migrate_postgres(pg_database.dsn)
    yield pg_database
    with pg_database.connect() as conn:
        conn.execute("DELETE FROM request_nonce WHERE node_id LIKE %s", (PREFIX + "%",))


@pytest.fixture(scope="module")
def config(database: PostgresDatabase) -> Config:
    return make_config(database)


@pytest.fixture(scope="module")
def service(config: Config) -> Iterator[DownlinkService]:
    downlink = open_downlink(event_store_env(config.event_store),
                             postgres_conninfo(config.event_store), max_page_size=50)
    yield downlink
    downlink.close()


def node() -> str:
    return f"{PREFIX}{secrets.token_hex(4)}"


def revision() -> Revision:
    return Revision(uuid.uuid4().bytes)


def row_change(key: int, operation: Operation = Operation.UPDATE) -> RowChangePayload:
    event_id = uuid.uuid4()
    values = None if operation is Operation.DELETE else {
        "name": "pump", "qty": key, "price": Decimal("10.50")}
    result = tombstone_revision(event_id) if operation is Operation.DELETE else revision()
    return RowChangePayload(
        RecordKey.of("fleet", "parts", {"id": key}), operation, values,
        None if operation is Operation.INSERT else revision(), result, SHORE, event_id)


def new_row_command(node_id: str, payload: RowChangePayload) -> NewCommand:
    return NewCommand(node_id, CommandKind.ROW_CHANGE, payload.origin_event_id, payload,
                      reason="shore change")


def decision(key: int, tombstone: bool = False) -> DecisionPayload:
    decision_id = uuid.uuid4()
    return DecisionPayload(
        decision_id, uuid.uuid4(), "table:fleet.parts", 3, RecordKey.of("fleet", "parts",
                                                                        {"id": key}),
        revision(), None if tombstone else {"name": "decided", "qty": 7},
        tombstone_revision(decision_id) if tombstone else revision(), "operator chose")


# ----------------------------------------------------------------------------- issue


def test_issue_numbers_each_node_from_one_and_is_idempotent(service: DownlinkService) -> None:
    a, b = node(), node()
    payloads = [row_change(n) for n in range(3)]
    commands = [new_row_command(n, p) for p in payloads for n in (a, b)]
    issued = service.issue(commands)
    assert [(c.node_id, c.sequence) for c in issued] == [
        (a, 1), (b, 1), (a, 2), (b, 2), (a, 3), (b, 3)]
    assert all(c.command_id == command_id_for(c.node_id, CommandKind.ROW_CHANGE,
                                              p.origin_event_id)
               for c, p in zip(issued, [p for p in payloads for _ in (a, b)], strict=True))
    assert len({c.position for c in issued}) == 6
    # Issued again (a re-consumed shore event): the same commands, nothing new.
    assert service.issue(commands[:2]) == issued[:2]
    assert [c.sequence for c in service.commands_for(a)] == [1, 2, 3]
    decided = decision(9)
    (fourth,) = service.issue([NewCommand(a, CommandKind.CONFLICT_DECISION, decided.decision_id,
                                          decided, decided.conflict_id, "operator", "decided")])
    assert fourth.sequence == 4
    stored = service.commands_for(a)
    assert [c.payload for c in stored] == [*payloads, decided]


def test_concurrent_issuers_keep_sequences_contiguous(service: DownlinkService) -> None:
    target = node()
    payloads = [row_change(n) for n in range(40)]
    barrier = threading.Barrier(4)
    failures: list[BaseException] = []

    def issue(part: list[RowChangePayload]) -> None:
        barrier.wait()
        try:
            for payload in part:  # Overlapping parts: each command is issued twice.
                service.issue([new_row_command(target, payload)])
        except BaseException as error:  # reported by the assertion below
            failures.append(error)

    parts = [payloads[0:20], payloads[10:30], payloads[20:40], payloads[0:40:3]]
    threads = [threading.Thread(target=issue, args=(part,)) for part in parts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    stored = service.commands_for(target)
    assert [c.sequence for c in stored] == list(range(1, 41))
    assert {c.source_id for c in stored} == {p.origin_event_id for p in payloads}


# ----------------------------------------------------------------------------- HTTP


@contextmanager
def server(config: Config, clock: FakeClock) -> Iterator[str]:
    ingress = build_ingress(config, clock=clock, monotonic=clock.monotonic)
    with BackgroundServer(create_app(config, ingress=ingress)) as running:
        yield running.url


def client_for(config: Config, url: str, clock: FakeClock) -> SyncClient:
    node_id = node()
    with node_service(config) as nodes:
        issued = nodes.register(node_id, ACTOR, clock())
    return SyncClient(url, node_id, issued.secret, clock)


def get_commands(client: SyncClient, cursor: str = "", limit: int | None = None) -> Answer:
    query = {"cursor": cursor} if cursor else {}
    if limit is not None:
        query["limit"] = str(limit)
    target = "/sync/v1/commands" + ("?" + urllib.parse.urlencode(query) if query else "")
    return client.request("GET", target,
                          headers={codec.PROTOCOL_VERSION_HEADER: codec.PROTOCOL_VERSION})


def post_acks(client: SyncClient, acks: list[pb.CommandAck], strings: list[str] = (),
              node_id: str | None = None) -> Answer:
    message = pb.CommandAcks(protocol_version=codec.PROTOCOL_VERSION,
                             node_id=node_id or client.node_id, acks=acks, strings=strings)
    return client.request("POST", "/sync/v1/command-acks", codec.compress(message))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_node_pages_its_own_commands_with_a_stable_cursor(
        config: Config, service: DownlinkService, clock: FakeClock) -> None:
    with server(config, clock) as url:
        ship, other = client_for(config, url, clock), client_for(config, url, clock)
        changes = [row_change(1, Operation.INSERT), row_change(2), row_change(3, Operation.DELETE)]
        decided = decision(4, tombstone=True)
        service.issue([new_row_command(ship.node_id, p) for p in changes]
                      + [new_row_command(other.node_id, row_change(5))]
                      + [NewCommand(ship.node_id, CommandKind.CONFLICT_DECISION,
                                    decided.decision_id, decided, decided.conflict_id)])

        first = get_commands(ship, limit=2)
        assert first.status == 200, first.error()
        page = first.message(pb.CommandsPage)
        assert [c.sequence for c in page.commands] == [1, 2]
        assert page.has_more and page.next_cursor == "2"
        names = codec.NameTable(page.strings)
        insert = page.commands[0].row_change
        assert insert.operation == pb.INSERT and insert.expected_local_revision == b""
        assert insert.result_revision == changes[0].result_revision.value  # type: ignore[union-attr]
        assert codec.record_key_from_wire(insert.record, names) == changes[0].record
        assert dict(codec.columns_from_wire(insert.values, names)) == changes[0].values
        assert names.name(insert.origin_node_ref) == SHORE
        assert insert.origin_event_id == changes[0].origin_event_id.bytes
        update = page.commands[1].row_change
        assert update.expected_local_revision == changes[1].expected_local_revision.value  # type: ignore[union-attr]

        rest = get_commands(ship, page.next_cursor).message(pb.CommandsPage)
        assert [c.sequence for c in rest.commands] == [3, 4] and not rest.has_more
        delete = rest.commands[0].row_change
        assert delete.operation == pb.DELETE and len(delete.values) == 0
        assert delete.result_revision == tombstone_revision(changes[2].origin_event_id).value
        conflict = rest.commands[1].conflict_decision
        assert conflict.tombstone and conflict.decision_id == decided.decision_id.bytes
        assert conflict.rule_version == 3
        assert codec.NameTable(rest.strings).name(conflict.rule_id_ref) == "table:fleet.parts"
        assert rest.next_cursor == "4"
        # The same cursor gives the same page; past the end an empty page keeps the cursor.
        again = get_commands(ship, "2").message(pb.CommandsPage)
        assert again == rest
        end = get_commands(ship, "4").message(pb.CommandsPage)
        assert len(end.commands) == 0 and end.next_cursor == "4" and not end.has_more
        # The other node sees only its one command.
        theirs = get_commands(other).message(pb.CommandsPage)
        assert [c.sequence for c in theirs.commands] == [1]

        bad = get_commands(ship, "abc")
        assert bad.status == 400 and bad.error().reason_code == "BAD_CURSOR"
        newer = ship.request("GET", "/sync/v1/commands",
                             headers={codec.PROTOCOL_VERSION_HEADER: "3.0"})
        assert newer.status == 426 and newer.error().reason_code == "UNSUPPORTED_PROTOCOL"
        missing = ship.request("GET", "/sync/v1/commands")
        assert missing.status == 400
        assert missing.error().reason_code == "MALFORMED_PROTOCOL_VERSION"


def test_a_page_is_capped_by_the_configured_size(
        config: Config, service: DownlinkService) -> None:
    target = node()
    service.issue([new_row_command(target, row_change(n)) for n in range(60)])
    page = service.page(target, "", 1000)
    assert [c.sequence for c in page.commands] == list(range(1, 51)) and page.has_more
    rest = service.page(target, page.next_cursor, 0)
    assert [c.sequence for c in rest.commands] == list(range(51, 61)) and not rest.has_more


def test_acks_are_idempotent_own_only_and_expose_conflict_evidence(
        config: Config, service: DownlinkService, clock: FakeClock) -> None:
    with server(config, clock) as url:
        ship, other = client_for(config, url, clock), client_for(config, url, clock)
        applied, conflicted = row_change(1), row_change(2)
        decided = decision(3)
        mine = service.issue([new_row_command(ship.node_id, applied),
                              new_row_command(ship.node_id, conflicted),
                              NewCommand(ship.node_id, CommandKind.CONFLICT_DECISION,
                                         decided.decision_id, decided, decided.conflict_id)])
        (theirs,) = service.issue([new_row_command(other.node_id, row_change(4))])
        local = revision()
        names = codec.NameTable()
        evidence = pb.CommandAck(
            command_id=mine[1].command_id.bytes, sequence=2,
            result=pb.COMMAND_CONFLICT_REPORTED, reason_code="REVISION_MISMATCH",
            local_revision=local.value, row_exists=True, processed_at_micros=1_700_000_000)
        codec.columns_to_wire([("name", "ship side"), ("qty", 11)], names, evidence.current_row)
        acks = [
            pb.CommandAck(command_id=mine[0].command_id.bytes, sequence=1,
                          result=pb.COMMAND_APPLIED, local_revision=applied.result_revision.value),  # type: ignore[union-attr]
            evidence,
            pb.CommandAck(command_id=theirs.command_id.bytes, result=pb.COMMAND_APPLIED),
            pb.CommandAck(command_id=uuid.uuid4().bytes, result=pb.COMMAND_APPLIED),
        ]
        answer = post_acks(ship, acks, names.names)
        assert answer.status == 200, answer.error()
        response = answer.message(pb.CommandAcksResponse)
        assert list(response.accepted_command_ids) == [mine[0].command_id.bytes,
                                                       mine[1].command_id.bytes]
        assert list(response.rejected_command_ids) == [theirs.command_id.bytes,
                                                       acks[3].command_id]
        # Repeated (a lost response): accepted again, nothing changes.
        changed = pb.CommandAck(command_id=mine[0].command_id.bytes, sequence=1,
                                result=pb.COMMAND_REJECTED, reason_code="UNKNOWN_TABLE")
        repeat = post_acks(ship, [changed]).message(pb.CommandAcksResponse)
        assert list(repeat.accepted_command_ids) == [mine[0].command_id.bytes]
        results = {c.command_id: c.ack_result for c in service.commands_for(ship.node_id)}
        assert results[mine[0].command_id] == "COMMAND_APPLIED"
        stream = service.app.get_command(mine[0].command_id)
        assert stream.version == 2 and stream.ack is not None
        # The other node's command stays unacknowledged.
        assert service.commands_for(other.node_id)[0].ack_result is None

        # The decision's ack needs a follow-up too (the conflict moves on).
        post_acks(ship, [pb.CommandAck(command_id=mine[2].command_id.bytes, sequence=3,
                                       result=pb.COMMAND_APPLIED,
                                       local_revision=decided.decided_revision.value)])
        pending = [p for p in service.pending_follow_ups(1000) if p.node_id == ship.node_id]
        assert [p.command_id for p in pending] == [mine[1].command_id, mine[2].command_id]
        report = pending[0]
        assert report.result == "COMMAND_CONFLICT_REPORTED"
        assert report.reason_code == "REVISION_MISMATCH"
        assert report.local_revision == local and report.row_exists
        assert report.current_row == {"name": "ship side", "qty": 11}
        assert report.payload == conflicted and report.kind is CommandKind.ROW_CHANGE
        assert pending[1].payload == decided and pending[1].conflict_id == decided.conflict_id
        service.mark_followed_up([report.command_id])
        left = [p.command_id for p in service.pending_follow_ups(1000)
                if p.node_id == ship.node_id]
        assert left == [mine[2].command_id]
        # Leave nothing for other tests' arbiters sharing the database.
        service.mark_followed_up(left)
        assert not [p for p in service.pending_follow_ups(1000) if p.node_id == ship.node_id]


def test_acks_naming_another_node_and_too_many_acks_are_refused(
        config: Config, service: DownlinkService, clock: FakeClock) -> None:
    with server(config, clock) as url:
        ship = client_for(config, url, clock)
        forged = post_acks(ship, [], node_id=PREFIX + "someone-else")
        assert forged.status == 403 and forged.error().reason_code == "NODE_MISMATCH"
        many = [pb.CommandAck(command_id=uuid.uuid4().bytes, result=pb.COMMAND_APPLIED)
                for _ in range(1001)]
        answer = post_acks(ship, many)
        assert answer.status == 413 and answer.error().reason_code == "TOO_MANY_ACKS"
        bad = post_acks(ship, [pb.CommandAck(command_id=b"short", result=pb.COMMAND_APPLIED)])
        assert bad.status == 400 and bad.error().reason_code == "MALFORMED_PAYLOAD"


def test_processed_at_and_unspecified_results(service: DownlinkService) -> None:
    target = node()
    (issued,) = service.issue([new_row_command(target, row_change(1))])
    ack = pb.CommandAck(command_id=issued.command_id.bytes,
                        result=pb.COMMAND_RESULT_UNSPECIFIED)
    with pytest.raises(codec.MalformedPayload):
        service.acknowledge(target, pb.CommandAcks(node_id=target, acks=[ack]))
    ack.result = pb.COMMAND_ALREADY_APPLIED
    ack.processed_at_micros = 1_000_000
    response = service.acknowledge(target, pb.CommandAcks(node_id=target, acks=[ack]))
    assert list(response.accepted_command_ids) == [issued.command_id.bytes]
    stored = service.app.get_command(issued.command_id)
    assert stored.ack is not None
    assert stored.ack.processed_at == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)
    # An already-applied row change needs no follow-up.
    assert issued.command_id not in {p.command_id for p in service.pending_follow_ups(1000)}
