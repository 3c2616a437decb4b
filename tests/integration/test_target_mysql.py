"""MySQLTargetApplier and `target enable` on a real MariaDB: every §11.1 row, the ledger,
permanent rejections inside a chunk, the triggers' local/remote split, exact values, and the
mapping of lock wait timeouts to TransientTargetError."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from tests import target_events
from tests.integration.shore_support import run_sql
from tests.target_events import SHIP, SHORE, insert, update
from tests.target_events import delete as delete_event
from tidesync.domain.change_event import Operation, Revision
from tidesync.domain.values import BitString, JsonText
from tidesync.entrypoints.cli import main as cli_main
from tidesync.localservices import MariaDBInstance
from tidesync.target.contract import TargetOutcomeKind, TransientTargetError
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table, inspect_mysql_table

PARTS_DDL = ("CREATE TABLE parts (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL,"
             " qty INT NULL, code VARCHAR(10) NULL UNIQUE) ENGINE=InnoDB")




def _applier(instance: MariaDBInstance, **kw: Any) -> MySQLTargetApplier:
    return MySQLTargetApplier(host=instance.host, port=instance.port, user=instance.user,
                              password=instance.password, node_id=SHORE, **kw)


@pytest.fixture
def shore_db(shore_mariadb: MariaDBInstance,
             make_mariadb_database: Callable[[MariaDBInstance], str]) -> str:
    """A database with an enabled `parts` table."""
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database, PARTS_DDL)
    connection = shore_mariadb.connect(database)
    try:
        enable_mysql_table(connection, database, "parts", SHORE)
    finally:
        connection.close()
    return database


@pytest.fixture
def applier(shore_mariadb: MariaDBInstance) -> Iterator[MySQLTargetApplier]:
    target = _applier(shore_mariadb)
    yield target
    target.close()


def _row(instance: MariaDBInstance, database: str, key: int) -> tuple[Any, ...] | None:
    rows = run_sql(instance, database,
                "SELECT id, name, qty, _sync_revision, _sync_origin, _sync_event_id"
                f" FROM parts WHERE id = {key}")
    return rows[0] if rows else None


def _ledger_count(instance: MariaDBInstance, database: str) -> int:
    return int(run_sql(instance, database, "SELECT COUNT(*) FROM _sync_applied")[0][0])


def _seed(applier: MySQLTargetApplier, database: str, key: int = 1,
          name: str = "pump") -> tuple[dict[str, Any], Revision]:
    """A row put there by an applied INSERT; returns its image and revision."""
    row = {"id": key, "name": name, "qty": 1}
    event = insert(database, "parts", row)
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    assert event.result_revision is not None
    return row, event.result_revision


# --- enable and triggers --------------------------------------------------------------------


def test_enable_adds_columns_backfills_and_is_idempotent(shore_mariadb, make_mariadb_database):
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database, PARTS_DDL,
         "INSERT INTO parts (id, name) VALUES (1, 'a'), (2, 'b')")
    connection = shore_mariadb.connect(database)
    try:
        first = enable_mysql_table(connection, database, "parts", SHORE)
        second = enable_mysql_table(connection, database, "parts", SHORE)
        with connection.cursor() as cursor:
            state = inspect_mysql_table(cursor, database, "parts")
    finally:
        connection.close()
    assert first.changed and "back-filled 2 rows with fresh revisions" in first.actions
    assert not second.changed, second.actions
    assert state.enabled and state.trigger_node_ids() == {SHORE}
    rows = run_sql(shore_mariadb, database,
                "SELECT _sync_revision, _sync_origin, _sync_event_id FROM parts ORDER BY id")
    assert len({revision for revision, _, _ in rows}) == 2
    assert all(Revision.parse(rev) and origin == SHORE and event_id is None
               for rev, origin, event_id in rows)


def test_local_writes_get_fresh_metadata_and_remote_applies_keep_the_events(
        shore_mariadb, shore_db, applier):
    run_sql(shore_mariadb, shore_db,
         "INSERT INTO parts (id, name, _sync_revision, _sync_origin, _sync_event_id)"
         " VALUES (7, 'local', 'forged', 'someone', 'forged')")
    _, _, _, local_revision, origin, event_id = _row(shore_mariadb, shore_db, 7)
    assert Revision.parse(local_revision) and origin == SHORE and event_id is None
    run_sql(shore_mariadb, shore_db, "UPDATE parts SET qty = 3, _sync_origin = 'x' WHERE id = 7")
    _, _, _, updated_revision, origin, event_id = _row(shore_mariadb, shore_db, 7)
    assert updated_revision != local_revision and origin == SHORE and event_id is None

    row, _ = _seed(applier, shore_db, key=8)
    event = update(shore_db, "parts", row, {"qty": 9},
                   base=applier.current_row(shore_db, "parts", {"id": 8})[1])
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    _, _, qty, stored_revision, origin, event_id = _row(shore_mariadb, shore_db, 8)
    assert event.result_revision is not None
    assert (qty, stored_revision, origin, event_id) == (
        9, event.result_revision.text, SHIP, str(event.event_id))
    # A local write after the remote apply takes the row back as a new local change.
    run_sql(shore_mariadb, shore_db, "UPDATE parts SET qty = 10 WHERE id = 8")
    _, _, _, stored_revision, origin, event_id = _row(shore_mariadb, shore_db, 8)
    assert stored_revision != event.result_revision.text and origin == SHORE and event_id is None


def test_cli_enable_and_status(shore_mariadb, make_mariadb_database, monkeypatch, capsys):
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database, PARTS_DDL)
    for name, value in (("HOST", shore_mariadb.host), ("PORT", str(shore_mariadb.port)),
                        ("USER", shore_mariadb.user), ("NODE_ID", SHORE)):
        monkeypatch.setenv(f"TIDESYNC_TARGET__{name}", value)
    assert cli_main(["target", "status", f"{database}.parts"]) == 1
    assert "NOT enabled" in capsys.readouterr().out
    assert cli_main(["target", "enable", f"{database}.parts"]) == 0
    assert "created trigger" in capsys.readouterr().out
    assert cli_main(["target", "enable", f"{database}.parts"]) == 0
    assert "already enabled, nothing changed" in capsys.readouterr().out
    assert cli_main(["target", "status", f"{database}.parts"]) == 0
    out = capsys.readouterr().out
    assert f"{database}.parts: enabled" in out and "ledger _sync_applied: present" in out


# --- §11.1, row by row ----------------------------------------------------------------------


def test_insert_into_empty_is_applied_with_the_events_metadata(shore_mariadb, shore_db, applier):
    event = insert(shore_db, "parts", {"id": 1, "name": "pump", "qty": 4})
    [outcome] = applier.apply_chunk([event])
    assert (outcome.event_id, outcome.kind) == (event.event_id, TargetOutcomeKind.APPLIED)
    assert event.result_revision is not None
    assert _row(shore_mariadb, shore_db, 1) == (
        1, "pump", 4, event.result_revision.text, SHIP, str(event.event_id))
    assert applier.applied_event_ids([event.event_id, revision_uuid()]) == {event.event_id}


def revision_uuid() -> Any:
    import uuid

    return uuid.uuid4()


def test_insert_over_a_row_from_another_source_is_a_conflict(shore_mariadb, shore_db, applier):
    run_sql(shore_mariadb, shore_db, "INSERT INTO parts (id, name) VALUES (1, 'shore-made')")
    [outcome] = applier.apply_chunk([insert(shore_db, "parts", {"id": 1, "name": "ship-made"})])
    assert outcome.kind is TargetOutcomeKind.CONFLICT and outcome.reason_code == "ROW_EXISTS"
    assert outcome.current_row is not None and outcome.current_row["name"] == "shore-made"
    assert outcome.current_revision == Revision.parse(outcome.current_row["_sync_revision"])
    assert _ledger_count(shore_mariadb, shore_db) == 0


def test_update_on_matching_base_writes_the_changed_columns(shore_mariadb, shore_db, applier):
    row, base = _seed(applier, shore_db)
    # A concurrent local change to another column must survive: only changed columns are set.
    event = update(shore_db, "parts", row, {"name": "valve"}, base=base)
    [outcome] = applier.apply_chunk([event])
    assert outcome.kind is TargetOutcomeKind.APPLIED
    assert event.result_revision is not None
    assert _row(shore_mariadb, shore_db, 1) == (
        1, "valve", 1, event.result_revision.text, SHIP, str(event.event_id))


def test_update_on_mismatching_base_is_a_conflict_with_evidence(shore_mariadb, shore_db, applier):
    row, base = _seed(applier, shore_db)
    run_sql(shore_mariadb, shore_db, "UPDATE parts SET qty = 50 WHERE id = 1")  # shore edits
    [outcome] = applier.apply_chunk([update(shore_db, "parts", row, {"qty": 2}, base=base)])
    assert outcome.kind is TargetOutcomeKind.CONFLICT
    assert outcome.reason_code == "REVISION_MISMATCH"
    assert outcome.current_row is not None and outcome.current_row["qty"] == 50
    assert outcome.current_row["_sync_origin"] == SHORE
    assert outcome.current_revision is not None and outcome.current_revision != base
    assert _row(shore_mariadb, shore_db, 1)[2] == 50  # type: ignore[index]


def test_delete_on_matching_base_is_applied(shore_mariadb, shore_db, applier):
    row, base = _seed(applier, shore_db)
    [outcome] = applier.apply_chunk([delete_event(shore_db, "parts", row, base=base)])
    assert outcome.kind is TargetOutcomeKind.APPLIED
    assert _row(shore_mariadb, shore_db, 1) is None
    assert _ledger_count(shore_mariadb, shore_db) == 2


def test_delete_of_a_row_updated_meanwhile_is_a_conflict(shore_mariadb, shore_db, applier):
    row, base = _seed(applier, shore_db)
    run_sql(shore_mariadb, shore_db, "UPDATE parts SET name = 'renamed' WHERE id = 1")
    [outcome] = applier.apply_chunk([delete_event(shore_db, "parts", row, base=base)])
    assert outcome.kind is TargetOutcomeKind.CONFLICT
    assert outcome.reason_code == "REVISION_MISMATCH"
    assert outcome.current_row is not None and outcome.current_row["name"] == "renamed"
    assert _row(shore_mariadb, shore_db, 1) is not None


def test_delete_of_a_row_deleted_by_another_event_is_a_conflict(shore_mariadb, shore_db,
                                                                applier):
    row, base = _seed(applier, shore_db)
    first = delete_event(shore_db, "parts", row, base=base)
    other = delete_event(shore_db, "parts", row, base=base)
    assert applier.apply_chunk([first])[0].kind is TargetOutcomeKind.APPLIED
    [outcome] = applier.apply_chunk([other])
    assert (outcome.kind, outcome.reason_code) == (TargetOutcomeKind.CONFLICT, "ROW_MISSING")
    assert outcome.current_row is None and outcome.current_revision is None


# --- idempotency and the ledger -------------------------------------------------------------


def test_the_same_event_twice_is_already_applied_with_one_ledger_row(
        shore_mariadb, shore_db, applier):
    row, base = _seed(applier, shore_db)
    event = update(shore_db, "parts", row, {"qty": 2}, base=base)
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    [again] = applier.apply_chunk([event])
    assert again.kind is TargetOutcomeKind.ALREADY_APPLIED
    twice_in_one_chunk = update(shore_db, "parts", {**row, "qty": 2}, {"qty": 3},
                                base=event.result_revision)
    outcomes = applier.apply_chunk([twice_in_one_chunk, twice_in_one_chunk])
    assert [o.kind for o in outcomes] == [TargetOutcomeKind.APPLIED,
                                          TargetOutcomeKind.ALREADY_APPLIED]
    rows = run_sql(shore_mariadb, shore_db, "SELECT event_id FROM _sync_applied")
    assert sorted(r[0] for r in rows).count(str(event.event_id)) == 1
    assert _ledger_count(shore_mariadb, shore_db) == 3


def test_a_replayed_insert_after_its_row_was_deleted_is_not_applied_again(
        shore_mariadb, shore_db, applier):
    row = {"id": 1, "name": "pump", "qty": 1}
    event = insert(shore_db, "parts", row)
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    run_sql(shore_mariadb, shore_db, "DELETE FROM parts WHERE id = 1")
    other = insert(shore_db, "parts", {"id": 2, "name": "valve"})
    outcomes = applier.apply_chunk([event, other])
    assert [o.kind for o in outcomes] == [TargetOutcomeKind.ALREADY_APPLIED,
                                          TargetOutcomeKind.APPLIED]
    assert _row(shore_mariadb, shore_db, 1) is None
    assert _row(shore_mariadb, shore_db, 2) is not None


def test_snapshot_of_the_current_revision_is_already_applied(shore_mariadb, shore_db, applier):
    row, base = _seed(applier, shore_db)
    snapshot = target_events.change(Operation.SNAPSHOT, shore_db, "parts", {"id": 1},
                                    after=row, result=base)
    assert applier.apply_chunk([snapshot])[0].kind is TargetOutcomeKind.ALREADY_APPLIED
    # Another revision over a row last written from the same ship: the snapshot follows
    # every earlier change of its partition, so it overwrites (upsert-if-not-newer).
    newer = target_events.change(Operation.SNAPSHOT, shore_db, "parts", {"id": 1}, after=row)
    assert applier.apply_chunk([newer])[0].kind is TargetOutcomeKind.APPLIED
    assert _row(shore_mariadb, shore_db, 1) is not None
    # A row another node wrote last holds data of its own: an ordinary conflict.
    other = target_events.change(Operation.SNAPSHOT, shore_db, "parts", {"id": 1}, after=row,
                                 origin="ship-0099")
    assert applier.apply_chunk([other])[0].kind is TargetOutcomeKind.CONFLICT
    again = target_events.change(Operation.SNAPSHOT, shore_db, "parts", {"id": 1}, after=row)
    assert applier.apply_chunk([again])[0].kind is TargetOutcomeKind.APPLIED
    assert applier.apply_chunk([newer])[0].kind is TargetOutcomeKind.ALREADY_APPLIED


def test_applied_event_ids_answers_after_a_commit_from_a_new_connection(
        shore_mariadb, shore_db, applier):
    events = [insert(shore_db, "parts", {"id": key, "name": "x"}) for key in (1, 2)]
    applier.apply_chunk(events)
    fresh = _applier(shore_mariadb)
    try:
        unknown = revision_uuid()
        assert fresh.applied_event_ids([e.event_id for e in events] + [unknown]) == {
            e.event_id for e in events}
    finally:
        fresh.close()


# --- rejections -----------------------------------------------------------------------------


def test_a_permanent_failure_mid_chunk_rejects_only_that_event(shore_mariadb, shore_db, applier):
    good = [insert(shore_db, "parts", {"id": key, "name": f"part-{key}"}) for key in (1, 2, 4)]
    too_long = insert(shore_db, "parts", {"id": 3, "name": "x" * 21})
    events = [good[0], good[1], too_long, good[2]]
    outcomes = applier.apply_chunk(events)
    assert [o.kind for o in outcomes] == [TargetOutcomeKind.APPLIED] * 2 + [
        TargetOutcomeKind.REJECTED, TargetOutcomeKind.APPLIED]
    assert outcomes[2].reason_code == "DATA_TOO_LONG"
    assert "name" in outcomes[2].detail and "x" * 21 not in outcomes[2].detail
    assert [_row(shore_mariadb, shore_db, key) is not None for key in (1, 2, 3, 4)] == [
        True, True, False, True]
    assert _ledger_count(shore_mariadb, shore_db) == 3


def test_rejection_reasons(shore_mariadb, shore_db, applier):
    run_sql(shore_mariadb, shore_db, "CREATE TABLE plain (id INT PRIMARY KEY)")
    row, _ = _seed(applier, shore_db, key=1)
    run_sql(shore_mariadb, shore_db, "UPDATE parts SET code = 'C1' WHERE id = 1")
    events = [
        update(shore_db, "parts", row, {"qty": 5}, base=None),
        insert(shore_db, "plain", {"id": 1}),
        insert(shore_db, "nowhere", {"id": 1}),
        insert(shore_db, "parts", {"id": 2, "name": "x", "colour": "red"}),
        insert(shore_db, "parts", {"id": 3, "name": "x", "code": "C1"}),
        insert(shore_db, "parts", {"id": 4, "name": "x", "qty": 2**40}),
        insert(shore_db, "parts", {"id": 5, "name": "x", "qty": [1]}),  # type: ignore[dict-item]
        insert(shore_db, "parts", {"id": 6, "name": "local"}, origin=SHORE),
        insert(shore_db, "parts", {"id": 7, "name": "fine"}),
    ]
    outcomes = applier.apply_chunk(events)
    assert [o.reason_code for o in outcomes] == [
        "MISSING_BASE_REVISION", "TABLE_NOT_ENABLED", "UNKNOWN_TABLE", "UNKNOWN_COLUMN",
        "DUPLICATE_UNIQUE_KEY", "VALUE_OUT_OF_RANGE", "UNSUPPORTED_TYPE", "ORIGIN_IS_TARGET", "",
    ]
    assert outcomes[-1].kind is TargetOutcomeKind.APPLIED
    assert all(o.event_id == e.event_id for o, e in zip(outcomes, events, strict=True))


def test_route_maps_the_ships_database_to_the_shores(shore_mariadb, shore_db):
    routed = _applier(shore_mariadb, route=lambda database, table: (shore_db, table))
    try:
        event = insert("fleet_erp", "parts", {"id": 1, "name": "pump"})
        assert routed.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
        row, current = routed.current_row("fleet_erp", "parts", {"id": 1})
        assert row is not None and row["name"] == "pump" and current == event.result_revision
    finally:
        routed.close()


# --- values ---------------------------------------------------------------------------------

VALUES_DDL = (
    "CREATE TABLE typed (id INT PRIMARY KEY, price DECIMAL(12,4), amount DECIMAL(30,10),"
    " at_dt DATETIME(6), at_ts TIMESTAMP(6) NULL, day DATE, clock TIME(6), doc JSON,"
    " flags BIT(12), flag BIT(1), blob_col BLOB, bin BINARY(4), active TINYINT(1),"
    " big BIGINT UNSIGNED, ratio DOUBLE, note TEXT, status ENUM('OPEN','DONE'))"
)
EXACT_ROW: dict[str, Any] = {
    "id": 1, "price": Decimal("12.5000"), "amount": Decimal("12345678901234567890.0000000001"),
    "at_dt": dt.datetime(2025, 3, 1, 23, 59, 59, 123456, tzinfo=dt.UTC),
    "at_ts": dt.datetime(2025, 3, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
    "day": dt.date(2025, 2, 28), "clock": dt.time(13, 14, 15, 999999),
    "doc": JsonText('{"deck": 3, "zone": "A"}'), "flags": BitString(12, 0b1010_0000_0101),
    "flag": True, "blob_col": bytes(range(256)), "bin": b"\x00\x01\xfe\xff", "active": False,
    "big": 2**64 - 1, "ratio": 0.1, "note": "naïve 中文 ✓", "status": "DONE",
}


def test_every_value_type_round_trips_exactly(shore_mariadb, shore_db, applier):
    run_sql(shore_mariadb, shore_db, VALUES_DDL)
    connection = shore_mariadb.connect(shore_db)
    try:
        enable_mysql_table(connection, shore_db, "typed", SHORE)
    finally:
        connection.close()
    applier.forget_tables()
    event = insert(shore_db, "typed", EXACT_ROW)
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
    row, current = applier.current_row(shore_db, "typed", {"id": 1})
    assert row is not None and current == event.result_revision
    business = {name: row[name] for name in EXACT_ROW}
    assert business == EXACT_ROW
    assert {name: type(value) for name, value in business.items()} == {
        name: type(value) for name, value in EXACT_ROW.items()}
    assert str(business["price"]) == "12.5000"
    assert row["_sync_event_id"] == str(event.event_id)
    assert isinstance(row["_sync_updated_at"], dt.datetime)
    assert row["_sync_updated_at"].tzinfo is dt.UTC


# --- transient errors -----------------------------------------------------------------------


def test_lock_wait_timeout_is_transient_and_commits_nothing(shore_mariadb, shore_db, applier):
    row, base = _seed(applier, shore_db, key=1)
    impatient = _applier(shore_mariadb, lock_wait_timeout=1)
    holder = shore_mariadb.connect(shore_db)
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT * FROM parts WHERE id = 1 FOR UPDATE")
            events = [insert(shore_db, "parts", {"id": 2, "name": "first"}),
                      update(shore_db, "parts", row, {"qty": 7}, base=base)]
            with pytest.raises(TransientTargetError) as caught:
                impatient.apply_chunk(events)
        assert caught.value.reason_code == "LOCK_WAIT_TIMEOUT"
        holder.rollback()
        assert _row(shore_mariadb, shore_db, 2) is None
        assert _ledger_count(shore_mariadb, shore_db) == 1
        # The same chunk goes through once the lock is gone.
        outcomes = impatient.apply_chunk(events)
        assert [o.kind for o in outcomes] == [TargetOutcomeKind.APPLIED] * 2
    finally:
        holder.close()
        impatient.close()


def test_a_killed_connection_is_transient_and_the_applier_reconnects(
        shore_mariadb, shore_db, applier):
    _seed(applier, shore_db, key=1)
    connection_id = applier._connection.thread_id()
    killer = threading.Thread(target=run_sql, args=(shore_mariadb, shore_db,
                                                 f"KILL CONNECTION {connection_id}"))
    killer.start()
    killer.join()
    with pytest.raises(TransientTargetError):
        applier.apply_chunk([insert(shore_db, "parts", {"id": 2, "name": "lost"})])
    event = insert(shore_db, "parts", {"id": 3, "name": "after"})
    assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED


# --- batches of UPDATEs as one set-based compare-and-set ------------------------------------


def _seed_many(applier: MySQLTargetApplier, database: str,
               keys: range) -> dict[int, tuple[dict[str, Any], Revision]]:
    events = {key: insert(database, "parts", {"id": key, "name": f"part-{key}", "qty": key})
              for key in keys}
    outcomes = applier.apply_chunk(list(events.values()))
    assert {o.kind for o in outcomes} == {TargetOutcomeKind.APPLIED}
    seeded = {}
    for key, event in events.items():
        assert event.after is not None and event.result_revision is not None
        seeded[key] = (dict(event.after), event.result_revision)
    return seeded


def _counting_sets(applier: MySQLTargetApplier, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record whether each set-based attempt kept its writes (True) or fell back (False)."""
    attempts: list[bool] = []
    original = applier._update_as_set

    def counted(*args: Any) -> bool:
        kept = original(*args)
        attempts.append(kept)
        return kept

    monkeypatch.setattr(applier, "_update_as_set", counted)
    return attempts


def test_a_batch_of_updates_is_one_set_and_each_row_gets_its_events_metadata(
        shore_mariadb, shore_db, applier, monkeypatch):
    seeded = _seed_many(applier, shore_db, range(1, 7))
    attempts = _counting_sets(applier, monkeypatch)
    names = {1: "it's", 2: "back\\slash", 3: "ünïcødé", 4: "semi;colon", 5: "pct %s", 6: ""}
    events = [update(shore_db, "parts", row, {"name": names[key]}, base=base)
              for key, (row, base) in seeded.items()]
    outcomes = applier.apply_chunk(events)
    assert [o.kind for o in outcomes] == [TargetOutcomeKind.APPLIED] * 6
    assert attempts == [True]
    for key, event in zip(seeded, events, strict=True):
        assert event.result_revision is not None
        assert _row(shore_mariadb, shore_db, key) == (
            key, names[key], key, event.result_revision.text, SHIP, str(event.event_id))
    assert _ledger_count(shore_mariadb, shore_db) == 12


def test_a_conflict_or_a_replay_in_a_set_judges_each_event_as_one_by_one(
        shore_mariadb, shore_db, applier, monkeypatch):
    seeded = _seed_many(applier, shore_db, range(1, 6))
    row, base = seeded[2]
    replayed = update(shore_db, "parts", row, {"qty": 20}, base=base)
    assert applier.apply_chunk([replayed])[0].kind is TargetOutcomeKind.APPLIED
    run_sql(shore_mariadb, shore_db, "UPDATE parts SET qty = 30 WHERE id = 3")  # shore edits
    attempts = _counting_sets(applier, monkeypatch)
    events = [replayed if key == 2 else update(shore_db, "parts", row, {"qty": key * 10},
                                               base=base)
              for key, (row, base) in seeded.items()]
    outcomes = applier.apply_chunk(events)
    assert [o.kind for o in outcomes] == [
        TargetOutcomeKind.APPLIED, TargetOutcomeKind.ALREADY_APPLIED,
        TargetOutcomeKind.CONFLICT, TargetOutcomeKind.APPLIED, TargetOutcomeKind.APPLIED]
    assert outcomes[2].reason_code == "REVISION_MISMATCH"
    assert outcomes[2].current_row is not None and outcomes[2].current_row["qty"] == 30
    assert attempts == [False]
    assert [_row(shore_mariadb, shore_db, key)[2] for key in range(1, 6)] == [  # type: ignore[index]
        10, 20, 30, 40, 50]
    assert _ledger_count(shore_mariadb, shore_db) == 5 + 1 + 3


def test_a_rejected_value_in_a_set_rejects_only_that_event(
        shore_mariadb, shore_db, applier, monkeypatch):
    seeded = _seed_many(applier, shore_db, range(1, 5))
    attempts = _counting_sets(applier, monkeypatch)
    events = [update(shore_db, "parts", row, {"name": "x" * (21 if key == 3 else 5)}, base=base)
              for key, (row, base) in seeded.items()]
    outcomes = applier.apply_chunk(events)
    assert [o.kind for o in outcomes] == [TargetOutcomeKind.APPLIED] * 2 + [
        TargetOutcomeKind.REJECTED, TargetOutcomeKind.APPLIED]
    assert outcomes[2].reason_code == "DATA_TOO_LONG"
    assert attempts[0] is False
    assert [_row(shore_mariadb, shore_db, key)[1] for key in range(1, 5)] == [  # type: ignore[index]
        "xxxxx", "xxxxx", "part-3", "xxxxx"]
    assert _ledger_count(shore_mariadb, shore_db) == 4 + 3


def test_updates_mixing_literal_kinds_in_a_column_go_one_by_one(
        shore_mariadb, shore_db, applier, monkeypatch):
    seeded = _seed_many(applier, shore_db, range(1, 4))
    attempts = _counting_sets(applier, monkeypatch)
    qty: dict[int, Any] = {1: 7, 2: "8", 3: None}
    events = [update(shore_db, "parts", row, {"qty": qty[key]}, base=base)
              for key, (row, base) in seeded.items()]
    assert [o.kind for o in applier.apply_chunk(events)] == [TargetOutcomeKind.APPLIED] * 3
    assert attempts == [False]
    assert [_row(shore_mariadb, shore_db, key)[2] for key in range(1, 4)] == [  # type: ignore[index]
        7, 8, None]


def test_a_set_of_updates_locks_only_the_rows_its_events_name(
        shore_mariadb, shore_db, applier, monkeypatch):
    # A small table tempts the optimizer to scan it; the set must still look rows up by key,
    # or a local transaction holding another row would block it.
    seeded = _seed_many(applier, shore_db, range(1, 4))
    impatient = _applier(shore_mariadb, lock_wait_timeout=1)
    attempts = _counting_sets(impatient, monkeypatch)
    holder = shore_mariadb.connect(shore_db)
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("UPDATE parts SET qty = 99 WHERE id = 3")
            events = [update(shore_db, "parts", row, {"qty": key * 10}, base=base)
                      for key, (row, base) in seeded.items() if key != 3]
            outcomes = impatient.apply_chunk(events)
        assert [o.kind for o in outcomes] == [TargetOutcomeKind.APPLIED] * 2
        assert attempts == [True]
    finally:
        holder.rollback()
        holder.close()
        impatient.close()
    assert [_row(shore_mariadb, shore_db, key)[2] for key in range(1, 4)] == [  # type: ignore[index]
        10, 20, 3]


def test_a_set_of_updates_on_a_table_keeping_binary_revisions(
        shore_mariadb, make_mariadb_database, applier, monkeypatch):
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database,
         "CREATE TABLE parts (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL, qty INT NULL,"
         " _sync_revision BINARY(16) NOT NULL) ENGINE=InnoDB")
    connection = shore_mariadb.connect(database)
    try:
        enable_mysql_table(connection, database, "parts", SHORE)
    finally:
        connection.close()
    seeded = _seed_many(applier, database, range(1, 4))
    attempts = _counting_sets(applier, monkeypatch)
    events = [update(database, "parts", row, {"qty": key * 10}, base=base)
              for key, (row, base) in seeded.items()]
    assert [o.kind for o in applier.apply_chunk(events)] == [TargetOutcomeKind.APPLIED] * 3
    assert attempts == [True]
    rows = run_sql(shore_mariadb, database, "SELECT id, qty, _sync_revision FROM parts ORDER BY id")
    assert rows == [(key, key * 10, event.result_revision.value)  # type: ignore[union-attr]
                    for key, event in zip(range(1, 4), events, strict=True)]


@pytest.mark.parametrize("collation", ["utf8mb4_bin", "latin1_swedish_ci", "ascii_bin"])
def test_a_set_of_updates_keyed_by_text_in_another_collation(
        shore_mariadb, make_mariadb_database, applier, collation):
    database = make_mariadb_database(shore_mariadb)
    charset = collation.split("_")[0]
    run_sql(shore_mariadb, database,
         f"CREATE TABLE tags (code VARCHAR(20) CHARACTER SET {charset} COLLATE {collation}"
         " PRIMARY KEY, label VARCHAR(20) NOT NULL) ENGINE=InnoDB")
    connection = shore_mariadb.connect(database)
    try:
        enable_mysql_table(connection, database, "tags", SHORE)
    finally:
        connection.close()
    codes = ["a", "B", "c d", "e'f"]
    inserts = [insert(database, "tags", {"code": code, "label": "new"}, key="code")
               for code in codes]
    assert {o.kind for o in applier.apply_chunk(inserts)} == {TargetOutcomeKind.APPLIED}
    events = [update(database, "tags", {"code": code, "label": "new"}, {"label": f"v{index}"},
                     base=event.result_revision, key="code")
              for index, (code, event) in enumerate(zip(codes, inserts, strict=True))]
    assert [o.kind for o in applier.apply_chunk(events)] == [TargetOutcomeKind.APPLIED] * 4
    # And again, whichever way the first batch went.
    again = [update(database, "tags", {"code": code, "label": f"v{index}"}, {"label": "w"},
                    base=event.result_revision, key="code")
             for index, (code, event) in enumerate(zip(codes, events, strict=True))]
    assert [o.kind for o in applier.apply_chunk(again)] == [TargetOutcomeKind.APPLIED] * 4
    rows = run_sql(shore_mariadb, database, "SELECT code, label, _sync_event_id FROM tags")
    assert sorted(rows) == sorted((code, "w", str(event.event_id))
                                  for code, event in zip(codes, again, strict=True))
