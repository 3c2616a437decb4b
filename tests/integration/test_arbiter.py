"""The conflict arbiter on real PostgreSQL (case and command streams) and MariaDB (the shore
target): policies decide or hand over to a person, decisions are applied on the shore with a
compare-and-set and dispatched as commands, the ships' answers acknowledge or expire the case,
and ship reports of a shore change meeting another revision open the same case."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from decimal import Decimal

import pytest

from tests.integration import test_apply_processor as processor_tests
from tests.integration.shore_support import (
    ShipLog,
    ledger_ids,
    pg_rows,
    receive,
    use_event_store,
)
from tests.integration.test_apply_processor import (
    SHORE_NODE,
    Clock,
    drain,
    items,
    make_applier,
    make_processor,
    node,
)
from tidesync.apps.conflicts import CaseChanged, ConflictService, Decision
from tidesync.domain.arbitration import Policy, PolicyName
from tidesync.domain.change_event import Operation, RecordKey, Revision
from tidesync.domain.conflict_case import ConflictState, DecisionSide
from tidesync.domain.downlink_command import (
    CommandKind,
    DecisionPayload,
    NewCommand,
    RowChangePayload,
)
from tidesync.entrypoints.cli import main
from tidesync.shore.arbiter import Arbiter, ArbiterSettings
from tidesync.shore.conflicts import PostgresRecordKeys, TargetRevisionReader
from tidesync.shore.downlink import DownlinkService, open_downlink
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import NameTable, columns_to_wire

pytestmark = pytest.mark.services

OTHER_SHIP = "ship-quiet"


# The shore's PostgreSQL and target database, as the apply processor's tests set them up.
shore = processor_tests.shore
target_db = processor_tests.target_db


@pytest.fixture
def downlink(pg_database):
    service = open_downlink(pg_database.eventsourcing_env(), pg_database.dsn)
    yield service
    service.close()


@dataclasses.dataclass
class Setup:
    ship: ShipLog
    processor: object
    arbiter: Arbiter
    service: ConflictService
    conn: object
    pool: object
    apps: object


def make_setup(shore, target_db, shore_mariadb, downlink, clock, policy: Policy) -> Setup:
    pool, apps = shore
    database, conn = target_db
    ship = ShipLog(node(), f"shipdb_{uuid.uuid4().hex[:8]}")  # keys unique to this test
    processor = make_processor(shore, make_applier(shore_mariadb, database), clock)
    keys = PostgresRecordKeys(pool)
    reader = TargetRevisionReader(lambda: make_applier(shore_mariadb, database), keys)

    def decision_applier():
        applier = make_applier(shore_mariadb, database)
        applier.node_id = f"{SHORE_NODE}.arbiter"
        return applier

    arbiter = Arbiter(apps.conflicts, downlink, pool, PostgresWorkQueue(pool), reader, keys,
                      decision_applier, lambda: [ship.node_id, OTHER_SHIP],
                      ArbiterSettings(shore_node_id=SHORE_NODE,
                                      policy_for=lambda db, table: policy, worker_id="arb-1"),
                      clock)
    return Setup(ship, processor, arbiter, ConflictService(apps.conflicts, reader), conn, pool,
                 apps)


def concurrent_update(setup: Setup) -> uuid.UUID:
    """Item 1 reaches the shore, is edited there and on the ship from the same revision; the
    ship's edit meets the shore's and opens a conflict."""
    ship = setup.ship
    receive(setup.pool, ship.node_id, [ship.insert(1, "anchor", 3, "10.50")])
    drain(setup.processor)
    with setup.conn.cursor() as cursor:
        cursor.execute("UPDATE items SET qty = 30 WHERE id = 1")  # a shore business edit
    receive(setup.pool, ship.node_id, [ship.update(1, qty=4)])
    drain(setup.processor)
    (conflict_id,) = [row[0] for row in pg_rows(setup.pool,
                                                "SELECT conflict_id FROM active_conflict")
                      if setup.apps.conflicts.get_case(row[0]).evidence[0]["origin_node_id"]
                      == ship.node_id]
    return conflict_id


def decision_commands(downlink: DownlinkService, node_id: str):
    return [row for row in downlink.commands_for(node_id)
            if row.kind is CommandKind.CONFLICT_DECISION]


def ack(downlink: DownlinkService, node_id: str, command_id: uuid.UUID, result: int, *,
        reason: str = "", local: Revision | None = None, row: dict | None = None) -> None:
    names = NameTable()
    message = pb.CommandAcks(protocol_version="1.0", node_id=node_id)
    item = message.acks.add(command_id=command_id.bytes, result=result, reason_code=reason,
                            local_revision=local.value if local else b"",
                            row_exists=row is not None)
    if row is not None:
        columns_to_wire(row.items(), names, item.current_row)
    message.strings.extend(names.names)
    response = downlink.acknowledge(node_id, message)
    assert command_id.bytes in response.accepted_command_ids


def applied_and_released(setup: Setup, downlink: DownlinkService, conflict_id: uuid.UUID,
                         command_id: uuid.UUID) -> None:
    """The ship applies the decision: the case is ACKNOWLEDGED and its active key released."""
    ack(downlink, setup.ship.node_id, command_id, pb.COMMAND_APPLIED)
    setup.arbiter.run_once()
    case = setup.apps.conflicts.get_case(conflict_id)
    assert case.state is ConflictState.ACKNOWLEDGED
    assert pg_rows(setup.pool, "SELECT 1 FROM active_conflict WHERE conflict_id = %s",
                   (conflict_id,)) == []


def ship_reports_shore_change(setup: Setup, downlink: DownlinkService) -> None:
    """The shore's row of item 1 goes to the ship as a ROW_CHANGE; the ship, holding its own
    edit, answers COMMAND_CONFLICT_REPORTED with its row; the arbiter follows that up."""
    shore_row = items(setup.conn)[1]
    ship_row, ship_revision = setup.ship.rows[1]
    record = RecordKey.of(setup.ship.database, "items", {"id": 1})
    shore_event = uuid.uuid4()
    (issued,) = downlink.issue([NewCommand(
        node_id=setup.ship.node_id, kind=CommandKind.ROW_CHANGE, source_id=shore_event,
        payload=RowChangePayload(record, Operation.UPDATE,
                                 {"name": "anchor", "qty": 30, "price": Decimal("10.50")},
                                 ship_revision, Revision.parse(shore_row[3]),
                                 SHORE_NODE, shore_event))])
    ack(downlink, setup.ship.node_id, issued.command_id, pb.COMMAND_CONFLICT_REPORTED,
        reason="REVISION_MISMATCH", local=ship_revision,
        row={k: v for k, v in ship_row.items() if k != "id"})
    setup.arbiter.follow_up_acks()


def test_shore_wins_keeps_the_shore_row_and_sends_it_to_the_conflicting_ship_only(
        shore, target_db, shore_mariadb, downlink):
    setup = make_setup(shore, target_db, shore_mariadb, downlink, Clock(),
                       Policy(PolicyName.SHORE_WINS))
    conflict_id = concurrent_update(setup)
    shore_row = items(setup.conn)[1]

    assert setup.arbiter.run_once() >= 1

    case = setup.apps.conflicts.get_case(conflict_id)
    assert case.state is ConflictState.DISPATCHED
    assert case.decision["side"] == "SHORE" and case.decision["actor"] == "policy:SHORE_WINS"
    assert items(setup.conn)[1] == shore_row  # nothing to apply on the shore
    (command,) = decision_commands(downlink, setup.ship.node_id)
    payload = command.payload
    assert isinstance(payload, DecisionPayload)
    assert payload.expected_local_revision == setup.ship.rows[1][1]
    assert payload.decided_revision.text == shore_row[3]
    assert dict(payload.decided_value) == {"name": "anchor", "qty": 30,
                                           "price": Decimal("10.50")}
    assert decision_commands(downlink, OTHER_SHIP) == []  # it already has the shore's row

    applied_and_released(setup, downlink, conflict_id, command.command_id)
    assert setup.arbiter.run_once() == 0  # nothing left to do, nothing done twice


def test_a_manual_ship_decision_is_applied_on_the_shore_and_sent_to_every_ship(
        shore, target_db, shore_mariadb, downlink):
    database, _ = target_db
    setup = make_setup(shore, target_db, shore_mariadb, downlink, Clock(),
                       Policy(PolicyName.MANUAL))
    conflict_id = concurrent_update(setup)
    shore_revision = items(setup.conn)[1][3]

    setup.arbiter.run_once()
    case = setup.apps.conflicts.get_case(conflict_id)
    assert case.state is ConflictState.PENDING_MANUAL
    assert case.manual["reason_code"] == "POLICY_MANUAL"
    assert setup.arbiter.run_once() == 0  # waits for a person

    outcome = setup.service.decide(Decision(conflict_id, DecisionSide.SHIP, "ship count is right",
                                            "user:alice"))
    setup.arbiter.run_once()

    row = items(setup.conn)[1]
    _, ship_revision = setup.ship.rows[1]
    case = setup.apps.conflicts.get_case(conflict_id)
    # The ship's UPDATE carried the one column it changed, laid over the shore's row: a
    # whole row, under a revision of its own.
    decided = Revision.parse(str(case.decision["decided_revision"]))
    assert decided != ship_revision
    assert row[:4] == ("anchor", 4, Decimal("10.50"), decided.text)
    assert row[5] == outcome.decision_id  # a platform write: the shore CDC will not echo it
    assert outcome.decision_id in ledger_ids(setup.conn, database)
    case = setup.apps.conflicts.get_case(conflict_id)
    assert case.state is ConflictState.DISPATCHED and case.dispatch_info["shore_applied"]
    (mine,) = decision_commands(downlink, setup.ship.node_id)
    (other,) = decision_commands(downlink, OTHER_SHIP)
    assert mine.payload.expected_local_revision == ship_revision
    assert other.payload.expected_local_revision.text == shore_revision
    assert {mine.payload.decided_revision, other.payload.decided_revision} == {decided}

    # The quiet ship's row moved on meanwhile: the decision is stale there.
    newer = Revision(uuid.uuid4().bytes)
    ack(downlink, setup.ship.node_id, mine.command_id, pb.COMMAND_ALREADY_APPLIED)
    ack(downlink, OTHER_SHIP, other.command_id, pb.COMMAND_CONFLICT_REPORTED,
        reason="DECISION_STALE", local=newer, row={"name": "anchor", "qty": 99,
                                                   "price": Decimal("10.50")})
    setup.arbiter.run_once()

    case = setup.apps.conflicts.get_case(conflict_id)
    assert case.state is ConflictState.EXPIRED
    assert case.expiry["reason_code"] == "DECISION_STALE"
    (reopened,) = [row[0] for row in pg_rows(setup.pool,
                                             "SELECT conflict_id FROM active_conflict")
                   if setup.apps.conflicts.get_case(row[0]).key_digest == case.key_digest]
    new_case = setup.apps.conflicts.get_case(reopened)
    assert new_case.id != conflict_id
    evidence = new_case.latest_evidence
    assert evidence["origin_node_id"] == OTHER_SHIP
    assert evidence["incoming_result_revision"] == newer.text
    assert evidence["current_revision"] == decided.text


def test_a_ship_report_of_a_shore_change_joins_the_case_of_the_same_update(
        shore, target_db, shore_mariadb, downlink):
    setup = make_setup(shore, target_db, shore_mariadb, downlink, Clock(),
                       Policy(PolicyName.MANUAL))
    conflict_id = concurrent_update(setup)
    _, ship_revision = setup.ship.rows[1]

    ship_reports_shore_change(setup, downlink)

    case = setup.apps.conflicts.get_case(conflict_id)
    assert len(case.evidence) == 2  # the uplink's and the ship's report, one case
    assert case.latest_evidence["source"] == "COMMAND_ACK"
    assert case.latest_evidence["incoming_result_revision"] == ship_revision.text
    assert [row[0] for row in pg_rows(setup.pool, "SELECT conflict_id FROM active_conflict")
            ].count(conflict_id) == 1
    assert downlink.pending_follow_ups(10) == []


def test_a_late_report_of_a_revision_a_decision_weighed_opens_no_new_case(
        shore, target_db, shore_mariadb, downlink):
    setup = make_setup(shore, target_db, shore_mariadb, downlink, Clock(),
                       Policy(PolicyName.SHORE_WINS))
    conflict_id = concurrent_update(setup)
    setup.arbiter.run_once()
    (command,) = decision_commands(downlink, setup.ship.node_id)
    ack(downlink, setup.ship.node_id, command.command_id, pb.COMMAND_APPLIED)
    setup.arbiter.run_once()
    assert setup.apps.conflicts.get_case(conflict_id).state is ConflictState.ACKNOWLEDGED

    # The ship's answer to an older shore change arrives only now, naming its old revision.
    ship_row, ship_revision = setup.ship.rows[1]
    record = RecordKey.of(setup.ship.database, "items", {"id": 1})
    shore_event = uuid.uuid4()
    (issued,) = downlink.issue([NewCommand(
        node_id=setup.ship.node_id, kind=CommandKind.ROW_CHANGE, source_id=shore_event,
        payload=RowChangePayload(record, Operation.UPDATE, {"name": "anchor", "qty": 31,
                                                            "price": Decimal("10.50")},
                                 ship_revision, Revision(uuid.uuid4().bytes), SHORE_NODE,
                                 shore_event))])
    ack(downlink, setup.ship.node_id, issued.command_id, pb.COMMAND_CONFLICT_REPORTED,
        reason="REVISION_MISMATCH", local=ship_revision,
        row={k: v for k, v in ship_row.items() if k != "id"})
    setup.arbiter.run_once()

    assert [row for row in pg_rows(setup.pool, "SELECT conflict_id FROM active_conflict")
            if setup.apps.conflicts.get_case(row[0]).key_digest
            == setup.apps.conflicts.get_case(conflict_id).key_digest] == []


def test_an_expired_auto_decide_lease_is_taken_over(shore, target_db, shore_mariadb, downlink):
    clock = Clock()
    setup = make_setup(shore, target_db, shore_mariadb, downlink, clock,
                       Policy(PolicyName.SHORE_WINS))
    conflict_id = concurrent_update(setup)
    # A worker took the lease and died before deciding.
    case = setup.apps.conflicts.get_case(conflict_id)
    until = clock.now + dt.timedelta(seconds=60)
    case.start_auto_decide("dead-worker", "SHORE_WINS", clock.now.isoformat(), until.isoformat(),
                           "system:arbiter", "policy SHORE_WINS")
    setup.apps.conflicts.save(case, extra_statements=[
        ("UPDATE active_conflict SET due_at = %s WHERE conflict_id = %s", (until, conflict_id))])

    assert setup.arbiter.run_once() == 0  # the lease still holds
    assert setup.apps.conflicts.get_case(conflict_id).state is ConflictState.AUTO_DECIDING
    clock.advance(61)
    assert setup.arbiter.run_once() >= 1

    case = setup.apps.conflicts.get_case(conflict_id)
    assert case.state is ConflictState.DISPATCHED
    assert case.lease["owner"] == "arb-1" and case.lease["taken_over_from"] == "dead-worker"


def answered_decision_of_no_case(setup, downlink, row_id: int) -> uuid.UUID:
    """A decision command for a conflict case that does not exist, applied by the ship."""
    missing_case, decision_id = uuid.uuid4(), uuid.uuid4()
    record = RecordKey.of(setup.ship.database, "items", {"id": row_id})
    (issued,) = downlink.issue([NewCommand(
        node_id=setup.ship.node_id, kind=CommandKind.CONFLICT_DECISION, source_id=decision_id,
        payload=DecisionPayload(decision_id, missing_case, "table:x.items", None, record, None,
                                {"name": "n", "qty": 1, "price": Decimal("1.00")},
                                Revision(uuid.uuid4().bytes), "test"),
        conflict_id=missing_case)])
    ack(downlink, setup.ship.node_id, issued.command_id, pb.COMMAND_APPLIED)
    return issued.command_id


def test_an_answer_that_cannot_be_followed_up_stays_pending_and_stops_nothing(
        shore, target_db, shore_mariadb, downlink, caplog):
    setup = make_setup(shore, target_db, shore_mariadb, downlink, Clock(),
                       Policy(PolicyName.SHORE_WINS))
    command_id = answered_decision_of_no_case(setup, downlink, 9)
    conflict_id = concurrent_update(setup)

    setup.arbiter.run_once()  # logs the unknown case, goes on with the rest
    setup.arbiter.run_once()  # and does not log it again

    assert setup.apps.conflicts.get_case(conflict_id).state is ConflictState.DISPATCHED
    assert [c.command_id for c in downlink.pending_follow_ups(10)] == [command_id]
    reports = [r for r in caplog.records if str(command_id) in r.getMessage()]
    assert len(reports) == 1 and reports[0].exc_info is None


def test_commands_that_cannot_be_followed_up_hold_up_none_answered_after_them(
        shore, target_db, shore_mariadb, downlink, caplog):
    setup = make_setup(shore, target_db, shore_mariadb, downlink, Clock(),
                       Policy(PolicyName.SHORE_WINS))
    setup.arbiter.follow_up_batch = 1  # one command per round: the first one answered
    issued = [answered_decision_of_no_case(setup, downlink, number) for number in (1, 2)]

    # A round per pending command (others' may be older): each one is reached although the
    # ones before it are still pending.
    pending = downlink.pending_follow_ups(1000)
    for _ in pending:
        setup.arbiter.follow_up_acks()

    for command_id in issued:
        assert len([r for r in caplog.records if str(command_id) in r.getMessage()]) == 1
    assert set(issued) <= {c.command_id for c in downlink.pending_follow_ups(1000)}


class ReportJoinsWhileDeciding:
    """Reads revisions as the real reader does; on its first read (after the service read the
    case, before it saves) a ship's report joins the case, as happens in a running fleet."""

    def __init__(self, reader, join) -> None:
        self.reader, self.join, self.joined = reader, join, False

    def current_revision(self, case):
        return self.current_row(case)[1]

    def current_row(self, case):
        if not self.joined:
            self.joined = True
            self.join()
        return self.reader.current_row(case)


@pytest.mark.parametrize("pinned", [False, True])
def test_a_report_joining_while_a_person_decides(shore, target_db, shore_mariadb, downlink,
                                                 pinned):
    setup = make_setup(shore, target_db, shore_mariadb, downlink, Clock(),
                       Policy(PolicyName.MANUAL))
    conflict_id = concurrent_update(setup)
    setup.arbiter.run_once()

    def ship_reports() -> None:
        ship_reports_shore_change(setup, downlink)

    looked_at = setup.apps.conflicts.get_case(conflict_id)
    assert looked_at.state is ConflictState.PENDING_MANUAL
    service = ConflictService(setup.apps.conflicts,
                              ReportJoinsWhileDeciding(setup.service.revisions, ship_reports))
    decision = Decision(conflict_id, DecisionSide.SHORE, "shore count", "user:bob",
                        expected_version=looked_at.version if pinned else None)

    if pinned:  # the approver saw one evidence; there are two now: they must look again
        with pytest.raises(CaseChanged):
            service.decide(decision)
    else:  # decided on the case as it is now, with both reports in it
        service.decide(decision)
    case = setup.apps.conflicts.get_case(conflict_id)
    assert len(case.evidence) == 2
    assert case.state is (ConflictState.PENDING_MANUAL if pinned else ConflictState.DECIDED)


def test_a_rejected_decision_is_sent_again_once_the_cause_is_fixed(
        shore, target_db, shore_mariadb, downlink, pg_database, monkeypatch, capsys):
    setup = make_setup(shore, target_db, shore_mariadb, downlink, Clock(),
                       Policy(PolicyName.SHORE_WINS))
    conflict_id = concurrent_update(setup)
    setup.arbiter.run_once()
    (first,) = decision_commands(downlink, setup.ship.node_id)
    ack(downlink, setup.ship.node_id, first.command_id, pb.COMMAND_REJECTED,
        reason="TARGET_SCHEMA")
    setup.arbiter.run_once()
    case = setup.apps.conflicts.get_case(conflict_id)
    assert case.state is ConflictState.DISPATCHED  # waits for someone to fix the ship
    assert case.acks[setup.ship.node_id]["result"] == "COMMAND_REJECTED"

    use_event_store(monkeypatch, pg_database)
    redispatch = ["conflicts", "redispatch", str(conflict_id), "--node", setup.ship.node_id,
                  "--reason", "table enabled for sync", "--actor", "ana"]
    assert main(redispatch) == 0
    assert main(redispatch) == 1  # nothing rejected any more: refused, nothing sent
    assert "NOT_REDISPATCHABLE" in capsys.readouterr().err

    first_again, second = decision_commands(downlink, setup.ship.node_id)
    assert first_again.command_id == first.command_id and second.sequence > first.sequence
    assert second.payload == first.payload  # the same decision, as a new command
    case = setup.apps.conflicts.get_case(conflict_id)
    assert case.command_of(setup.ship.node_id) == str(second.command_id)
    assert setup.ship.node_id not in case.acks
    applied_and_released(setup, downlink, conflict_id, second.command_id)
