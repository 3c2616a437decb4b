"""Onboarding a ship whose business table already holds data, end to end on the real parts, as
docs/onboarding.md's runbook says: a ship and the shore MariaDB hold the same 100,000-row
`parts` table, except that 0.5 % of the rows were edited on the ship, 0.5 % on the shore, and
0.5 % exist on the ship only. One fleet revision key; `target enable` on both sides
(content-derived revisions); `ship capture`, `ship run` (with the ship's database for shore
commands), `shore work` and the shore server running; `reconcile` by file exchange finds
exactly the differing keys; `snapshot start --keys` sends them while the ship keeps writing.

Checked: the ship-only rows are copied to the shore; every row present on both sides with
other content becomes one conflict, decided by the table's policy (last writer wins on the
service time: the side that edited the row wins, row by row, on both sides); the ship's writes
made during the snapshot all arrive, in order; SIGKILL of the capture (after a chunk was
published, before it was recorded) and of `shore work` during the snapshot loses and doubles
nothing (ledger, one conflict per key, row checksums); a final `reconcile` reports zero
differences; a replay of a closed range applies nothing twice. Last, a sync rule with
`snapshot = "on_activation"` is released for a second table whose rows only the ship holds:
the ship queues a snapshot of it when the rule activates, `snapshot status` shows it go
SNAPSHOTTING → CATCHING_UP → IN_SYNC, and the shore ends with the ship's rows.

Not covered: rows present on the shore only (the snapshot goes ship → shore; a shore → ship
repair is a separate command).
"""

from __future__ import annotations

import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.clocks import WallClock
from tests.e2e.fleet_support import release_in_process
from tests.e2e.onboarding_support import (
    CREW_DDL,
    CREW_LOAD,
    CREW_ROWS,
    CREW_RULE,
    NEW_KEYS,
    ROWS,
    SHIP_CHANGED,
    SHIP_ONLY,
    SHORE_CHANGED,
    T0,
    Processes,
    Writer,
    checksum,
    crew_rows,
    drift,
    dropped_after,
    eventually,
    keys_where,
    ledger,
    load,
    ok,
    phases,
    reconcile,
    rows_of,
    snapshot_status,
)
from tests.e2e.test_bidirectional import Captures
from tests.integration.test_ingress import ACTOR, make_config, node_service, running
from tests.integration.test_ship_client import client_env
from tests.integration.test_shore_work_crash import worker_env
from tidesync.bootstrap.capture import run_capture
from tidesync.bootstrap.rules import open_rule_releases
from tidesync.capture.settings import CaptureConfig, CaptureSource
from tidesync.capture.snapshot_store import SnapshotState, SnapshotStore
from tidesync.config import Config, ShipConfig, TargetConfig
from tidesync.domain.content_revision import read_revision_key
from tidesync.domain.node import secret_text
from tidesync.localservices import PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.target.backfill import BackfillOptions
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

CHUNK_ROWS = 100


@pytest.fixture(scope="module")
def pg_database() -> Iterator[PostgresDatabase]:
    """An event store of its own: the test leaves conflict cases and work behind."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


def _target_env(instance: Any, database: str, node: str, key_file: Path) -> dict[str, str]:
    return {"TIDESYNC_TARGET__HOST": instance.host, "TIDESYNC_TARGET__PORT": str(instance.port),
            "TIDESYNC_TARGET__USER": instance.user,
            "TIDESYNC_TARGET__PASSWORD": instance.password or "",
            "TIDESYNC_TARGET__DATABASE": database, "TIDESYNC_TARGET__NODE_ID": node,
            "TIDESYNC_TARGET__REVISION_KEY_FILE": str(key_file)}


def _capture_env(instance: Any, database: str, logical: str, position: Path) -> dict[str, str]:
    return {"TIDESYNC_CAPTURE__SOURCE": "mysql", "TIDESYNC_CAPTURE__LOGICAL_NAME": logical,
            "TIDESYNC_CAPTURE__TOPIC_PARTITIONS": "3",
            "TIDESYNC_CAPTURE__POSITION_PATH": str(position),
            "TIDESYNC_CAPTURE__MYSQL_HOST": instance.host,
            "TIDESYNC_CAPTURE__MYSQL_PORT": str(instance.port),
            "TIDESYNC_CAPTURE__MYSQL_USER": instance.user,
            "TIDESYNC_CAPTURE__MYSQL_PASSWORD": instance.password or "",
            "TIDESYNC_CAPTURE__SERVER_ID": str(9000 + secrets.randbelow(900)),
            "TIDESYNC_CAPTURE__DATABASES": database,
            "TIDESYNC_CAPTURE__FLUSH_INTERVAL_MS": "50",
            "TIDESYNC_CAPTURE__SNAPSHOT_ROWS_PER_SEC": "1000"}


def _ship_target_env(instance: Any, database: str) -> dict[str, str]:
    return {"TIDESYNC_SHIP_TARGET__KIND": "mysql", "TIDESYNC_SHIP_TARGET__HOST": instance.host,
            "TIDESYNC_SHIP_TARGET__PORT": str(instance.port),
            "TIDESYNC_SHIP_TARGET__USER": instance.user,
            "TIDESYNC_SHIP_TARGET__PASSWORD": instance.password or "",
            "TIDESYNC_SHIP_TARGET__DATABASE": database}


def _cases(pg: str, database: str) -> dict[str, int]:
    with psycopg.connect(pg) as conn:
        rows = conn.execute("SELECT state, count(*) FROM conflict_center WHERE database = %s"
                            " GROUP BY state", (database,)).fetchall()
    return {state: int(count) for state, count in rows}


def _inbox(pg: str, node: str) -> dict[tuple[str, str | None], int]:
    with psycopg.connect(pg) as conn:
        rows = conn.execute("SELECT state, result, count(*) FROM inbox_event"
                            " WHERE origin_node_id = %s GROUP BY 1, 2", (node,)).fetchall()
    return {(state, result): int(count) for state, result, count in rows}


def _snapshot_requests(position: Path) -> list[Any]:
    store = SnapshotStore(position)
    try:
        return store.requests()
    finally:
        store.close()


def test_onboarding_a_ship_with_a_hundred_thousand_rows(
        pg_database: PostgresDatabase, ship_mariadb: Any, shore_mariadb: Any,
        kafka_broker: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    token = secrets.token_hex(4)
    database, ship_node = f"onboard_{token}", f"ship-{token}"
    table = f"{database}.parts"
    key_file = tmp_path / "revision.key"
    processes = Processes(tmp_path)
    ship_mariadb.create_database(database)
    shore_mariadb.create_database(database)
    ship = ship_mariadb.connect(database=database, autocommit=True)
    shore = shore_mariadb.connect(database=database, autocommit=True)
    with dropped_after([(ship_mariadb, database), (shore_mariadb, database)]):
        try:
            _onboard(pg_database, ship_mariadb, shore_mariadb, kafka_broker, tmp_path,
                     database, ship_node, table, key_file, processes, ship, shore, started)
        finally:
            processes.stop_all()
            ship.close()
            shore.close()


def _onboard(pg_database: Any, ship_mariadb: Any, shore_mariadb: Any, kafka_broker: Any,
             tmp_path: Path, database: str, ship_node: str, table: str, key_file: Path,
             processes: Processes, ship: Any, shore: Any, started: float) -> None:
    def lap(what: str) -> None:
        print(f"{time.monotonic() - started:6.1f} s  {what}")

    # Before tidesync: the same rows on both sides, then each side's own edits.
    load(ship)
    load(shore)
    drift(ship, shore)
    for connection in (ship, shore):
        with connection.cursor() as cursor:
            cursor.execute(CREW_DDL)
    with ship.cursor() as cursor:
        cursor.execute(CREW_LOAD, (T0,))
    ship_edits, shore_edits, ship_only = (keys_where(SHIP_CHANGED), keys_where(SHORE_CHANGED),
                                          keys_where(SHIP_ONLY))
    lap("100,000 rows on both sides")

    # 1. One fleet revision key; 2. `target enable` on both sides at once.
    bootstrap = kafka_broker.bootstrap_servers
    logical = f"onb{database[-8:]}"
    shore_logical = f"onbs{database[-8:]}"
    ship_base = {**client_env(ShipConfig()),
                 **_target_env(ship_mariadb, database, ship_node, key_file)}
    shore_base = worker_env(pg_database, shore_mariadb,
                            **_target_env(shore_mariadb, database, "shore", key_file))
    ok(shore_base, "target", "revision-key", str(key_file))
    enables = [processes.start(f"enable-{side}", env, "target", "enable", table)
               for side, env in (("ship", ship_base), ("shore", shore_base))]
    for process in enables:
        assert process.wait(120) == 0, [processes.output(name) for name in processes.logs]
    revisions = BackfillOptions(revision_key=read_revision_key(str(key_file)))
    enable_mysql_table(ship, database, "crew_list", ship_node, backfill=revisions)
    enable_mysql_table(shore, database, "crew_list", "shore", backfill=revisions)
    lap("both sides enabled")

    # 3. Capture, the ship client, the shore's worker and server.
    migrate_postgres(pg_database.dsn)
    config = make_config(pg_database, heartbeat_interval_seconds=5)  # offers rules fast
    clock = WallClock()
    with node_service(config) as service:
        issued = service.register(ship_node, ACTOR, clock())
    position = tmp_path / "capture-position.sqlite"
    shore_capture = Config(capture=CaptureConfig(
        source=CaptureSource.MYSQL, logical_name=shore_logical,
        kafka_bootstrap_servers=bootstrap, position_path=str(tmp_path / "shore-capture.sqlite"),
        flush_interval_ms=50, mysql_host=shore_mariadb.host, mysql_port=shore_mariadb.port,
        mysql_user=shore_mariadb.user, mysql_password=shore_mariadb.password,
        server_id=9000 + secrets.randbelow(900), databases=(database,)))
    run_capture(shore_capture, until_caught_up=True)
    with running(config, clock) as url:  # type: ignore[arg-type]
        ship_config = ShipConfig(
            node_id=ship_node, shore_url=url, secret=secret_text(issued.secret),
            state_path=str(tmp_path / "ship-state.sqlite"), kafka_bootstrap_servers=bootstrap,
            topic_pattern=rf"^sync\.cdc\.{logical}\.", source_connector_id=f"{logical}-builtin",
            bidirectional_tables=(table, f"{database}.crew_list"), receipts_interval_seconds=1,
            heartbeat_interval_seconds=5, commands_interval_seconds=1)
        ship_env = {**client_env(ship_config),
                    **_target_env(ship_mariadb, database, ship_node, key_file),
                    **_ship_target_env(ship_mariadb, database),
                    **_capture_env(ship_mariadb, database, logical, position),
                    "TIDESYNC_CAPTURE__KAFKA_BOOTSTRAP_SERVERS": bootstrap}
        shore_env = {**shore_base,
                     "TIDESYNC_DOWNLINK__KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                     "TIDESYNC_DOWNLINK__TOPIC_PATTERN": rf"^sync\.cdc\.{shore_logical}\.",
                     "TIDESYNC_DOWNLINK__CONSUMER_GROUP": f"shore-cdc-{database}",
                     "TIDESYNC_DOWNLINK__SOURCE_CONNECTOR_ID": f"{shore_logical}-builtin",
                     "TIDESYNC_DOWNLINK__BIDIRECTIONAL_TABLES": f"{table},{database}.crew_list",
                     "TIDESYNC_DOWNLINK__NODES": ship_node,
                     "TIDESYNC_CONFLICTS__POLICIES":
                         f"{table}=LAST_WRITER_WINS:serviced_at",
                     "TIDESYNC_SHORE__APPLY_MAX_EVENTS_PER_JOB": "500",
                     "TIDESYNC_SHORE__APPLY_CHUNK_SIZE": "250"}
        # A ship looks for new topics only now and then: the later table's, made up front.
        kafka_broker.create_topic(f"sync.cdc.{logical}.{database}.crew_list", partitions=3)
        with Captures([shore_capture]):
            # The capture dies after publishing the snapshot's 4th chunk, before recording it.
            processes.start("capture", {**ship_env,
                                        "TIDESYNC_FAILPOINTS": "snapshot_chunk_published#4=kill"},
                            "ship", "capture")
            processes.start("ship", ship_env, "ship", "run")
            processes.start("worker", shore_env, "shore", "work", "--worker-id", "w-1")
            lap("capture, ship client, shore worker started")

            # 4. Reconcile: exactly the rows edited on one side or present on the ship only.
            before = reconcile(shore_env, ship_env, table, tmp_path, "parts")
            differing = ship_edits | shore_edits | ship_only
            assert before.differing == len(differing)
            assert before.rows in (ROWS, ROWS - len(ship_only))  # the side that ended it
            keys_file = tmp_path / "parts.keys"
            keys_file.write_text(ok(shore_env, "reconcile", "keys", str(before.last_message)),
                                 encoding="utf-8")
            listed = {int(line.strip("[]")) for line in keys_file.read_text().splitlines()}
            assert listed == differing
            lap(f"reconciled: {before.differing} differing keys, {before.messages} messages,"
                f" {before.link_bytes} bytes")

            # 5. The snapshot of those keys, while the ship keeps writing.
            ship_before = rows_of(ship, differing)
            shore_before = rows_of(shore, differing)
            writer = Writer(ship_mariadb, database, seed=16)
            writer.start()
            try:
                ok(ship_env, "snapshot", "start", table, "--keys", str(keys_file),
                   "--chunk-rows", str(CHUNK_ROWS), "--reason", "onboarding parts")
                capture = processes.running["capture"]
                eventually(lambda: capture.poll() is not None, "the capture to die mid-snapshot",
                           60)
                assert capture.returncode == -signal.SIGKILL, processes.output("capture")
                (interrupted,) = _snapshot_requests(position)
                assert interrupted.state is SnapshotState.SNAPSHOTTING
                assert interrupted.chunks_done == 3
                processes.start("capture", ship_env, "ship", "capture")
                lap("capture killed after chunk 4 and restarted")

                # `shore work` is killed while it applies the snapshot's events.
                eventually(lambda: len(rows_of(shore, ship_only)) >= 100,
                           "the shore to apply snapshot rows", 60)
                worker = processes.running["worker"]
                worker.send_signal(signal.SIGKILL)
                assert worker.wait(10) == -signal.SIGKILL
                copied_at_kill = len(rows_of(shore, ship_only))
                snapshot_at_kill = snapshot_status(ship_env)
                processes.start("worker", shore_env, "shore", "work", "--worker-id", "w-2")
                lap(f"shore work killed ({snapshot_at_kill['phase']},"
                    f" chunks {snapshot_at_kill['chunks']}, {copied_at_kill} of"
                    f" {len(ship_only)} ship-only rows copied) and restarted")
                eventually(lambda: _snapshot_requests(position)[0].state
                           is SnapshotState.EMITTED, "every chunk published", 90)
            finally:
                changes = writer.stop()
            lap(f"snapshot emitted; the ship made {changes} changes meanwhile")
            assert snapshot_at_kill["phase"] in ("SNAPSHOTTING", "CATCHING_UP")
            assert copied_at_kill < len(ship_only)  # killed in the middle of the snapshot

            eventually(lambda: snapshot_status(ship_env)["phase"] == "IN_SYNC",
                       "the snapshot IN_SYNC", 120)
            lap(f"snapshot IN_SYNC; cases {_cases(pg_database.dsn, database)}")
            eventually(lambda: _cases(pg_database.dsn, database)
                       == {"ACKNOWLEDGED": len(ship_edits | shore_edits)},
                       "every conflict decided and acknowledged", 120)
            eventually(lambda: checksum(ship) == checksum(shore), "both sides equal", 60)
            lap("in sync, conflicts acknowledged")
            processes.assert_alive("capture", "ship", "worker")

            # Row by row: the side that edited a row wins it; ship-only rows are copied.
            ship_after, shore_after = rows_of(ship), rows_of(shore)
            assert ship_after == shore_after
            for key in ship_edits:
                assert shore_after[key] == ship_before[key], key
            for key in shore_edits:
                assert ship_after[key] == shore_before[key], key
            for key in ship_only:
                assert shore_after[key] == ship_before[key], key
            assert len(ship_after) == ROWS + writer.inserted - writer.deleted
            assert all(key in ship_after for key in range(NEW_KEYS, NEW_KEYS + changes)
                       if key - NEW_KEYS in writer.insert_numbers)
            assert snapshot_status(ship_env)["rows_emitted"] == len(differing)

            # Nothing lost, nothing doubled: the shore's ledger holds each change the ship made
            # meanwhile, each copied row and each conflict the ship won exactly once (the
            # chunk sent twice changed nothing), and no event was refused.
            applied = ledger(shore, database)
            assert len(applied) == changes + len(ship_only) + len(ship_edits), (
                _ledger_by_origin(shore, database))
            inbox = _inbox(pg_database.dsn, ship_node)
            assert set(inbox) <= {("TERMINAL", "APPLIED"), ("TERMINAL", "CONFLICT_RECORDED")}, (
                _reasons(pg_database.dsn, ship_node))
            conflicts = len(ship_edits | shore_edits)
            assert conflicts <= inbox[("TERMINAL", "CONFLICT_RECORDED")] <= conflicts + CHUNK_ROWS
            lap(f"ledger {len(applied)} events; inbox {_reasons(pg_database.dsn, ship_node)}")

            # The final reconcile finds nothing.
            after = reconcile(shore_env, ship_env, table, tmp_path, "again")
            assert (after.differing, after.messages) == (0, 2)
            assert "0 differing of" in ok(shore_env, "reconcile", "show", "--files", database)
            lap(f"final reconcile: 0 differing keys, {after.link_bytes} bytes")

            # A replay of a closed range applies nothing twice.
            sums, ledger_size = checksum(shore), len(applied)
            topic = f"sync.cdc.{logical}.{database}.parts"
            barrier = _snapshot_requests(position)[0].barrier
            partition, last = min(((p, o) for (_, p), o in barrier.items()))
            replay = ok(ship_env, "replay", "--topic", topic, "--partition", str(partition),
                        "--from-offset", "0", "--to-offset", str(last),
                        "--reason", "onboarding check")
            eventually(lambda: '"done": true' in ok(ship_env, "replay", "--status"),
                       "the replay answered", 90)
            assert checksum(shore) == sums and checksum(ship) == sums
            assert len(ledger(shore, database)) == ledger_size
            lap(f"replayed offsets 0..{last} of partition {partition}: {replay.strip()[:60]}")
            processes.assert_alive("capture", "ship", "worker")

            # A rule asking for a snapshot on activation: the ship's crew list reaches the
            # shore, and `snapshot status` follows it to IN_SYNC.
            _release(pg_database, shore_mariadb, CREW_RULE.format(db=database, ship=ship_node))
            seen = phases(ship_env, "crew-list@1", "IN_SYNC", 120)
            assert seen[-3:] == ["SNAPSHOTTING", "CATCHING_UP", "IN_SYNC"], seen
            assert snapshot_status(ship_env, "crew-list@1")["rows_emitted"] == CREW_ROWS
            deadline = time.monotonic() + 30
            while crew_rows(shore) != crew_rows(ship):
                assert time.monotonic() < deadline, (len(crew_rows(shore)), _reasons(
                    pg_database.dsn, ship_node, "%crew_list"))
                time.sleep(0.2)
            assert len(crew_rows(shore)) == CREW_ROWS
            lap(f"rule activation snapshot: {' -> '.join(seen)}")
            processes.assert_alive("capture", "ship", "worker")


def _reasons(pg: str, node: str, topics: str = "%") -> list[tuple[Any, ...]]:
    with psycopg.connect(pg) as conn:
        return conn.execute("SELECT state, result, reason_code, count(*) FROM inbox_event"
                            " WHERE origin_node_id = %s AND source_topic LIKE %s"
                            " GROUP BY 1, 2, 3", (node, topics)).fetchall()


def _release(pg: PostgresDatabase, shore_mariadb: Any, text: str) -> None:
    target = TargetConfig(host=shore_mariadb.host, port=shore_mariadb.port,
                          user=shore_mariadb.user, password=shore_mariadb.password,
                          node_id="shore")
    app = open_rule_releases(Config(event_store=make_config(pg).event_store))
    try:
        release_in_process(app, target, text, "the crew list joins the sync")
    finally:
        app.close()


def _ledger_by_origin(connection: Any, database: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT origin_node_id, table_name, count(*)"
                       f" FROM `{database}`.`_sync_applied` GROUP BY 1, 2")
        return list(cursor.fetchall())
