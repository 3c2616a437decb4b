"""Replay by range, end to end: real broker, real shore server and apply worker on PostgreSQL and
MariaDB, the real ship client.

Every event of a partition is applied first; a row is then changed on the shore directly. A
replay of a closed range, interrupted by a client restart half-way, sends that range again
under a new epoch: the shore recognises every replayed event as applied before, the changed row
keeps the shore's value, no replayed event reaches the shore twice, and the main consumer's
queue commit is untouched (the replay never commits)."""

from __future__ import annotations

import pytest

from tests.integration.ship_support import ItemsCapture, produce
from tests.integration.test_gap_resend import step_until
from tests.integration.test_ship_client import (
    committed_offsets,
    expected_rows,
    ship_config,
    shore_for_ship,
    shore_rows,
)
from tidesync.bootstrap.ship import build_client
from tidesync.domain.replay import ReplayRange, ReplayRangeError
from tidesync.ship.client import ExitCode
from tidesync.ship.replay import replay_group
from tidesync.ship.replay_runs import RANGE_REPLAY_EPOCHS, RunState, SQLiteReplayRuns

pytestmark = pytest.mark.services

ROWS = 10
UPDATES = 5
EVENTS = ROWS + UPDATES
FIRST, LAST = 2, 11  # offsets, both included: 10 records


def test_a_replayed_range_applies_nothing_twice_and_survives_a_restart(
        pg_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    records = [capture.insert(k, f"part-{k}", k, "1.50") for k in range(1, ROWS + 1)]
    records += [capture.update(k, qty=k * 7) for k in range(1, UPDATES + 1)]
    produce(kafka_broker.bootstrap_servers, records)
    with shore_for_ship(pg_database, shore_mariadb, database) as shore:
        config = ship_config(shore, kafka_broker, tmp_path / "ship.sqlite")
        client = build_client(config)
        try:
            assert client.run(until_idle=True, timeout=60) is ExitCode.IDLE
            runs = SQLiteReplayRuns(client.state.database)
            with pytest.raises(ReplayRangeError, match="not closed"):
                runs.request(ReplayRange(capture.topic, 0, 0, EVENTS), actor="ops",
                             reason="too far")
            run = runs.request(ReplayRange(capture.topic, 0, FIRST, LAST), actor="ops",
                               reason="shore restored from a backup")
        finally:
            client.close()
        assert shore_rows(shore_mariadb, database) == expected_rows(capture)
        # The shore changes a row of the range after it applied the range's events.
        conn = shore_mariadb.connect(database=database, autocommit=True)
        with conn.cursor() as cursor:
            cursor.execute("UPDATE items SET qty = 999 WHERE id = 3")
        conn.close()
        before_replay = shore_rows(shore_mariadb, database)

        # A client reading at 2 records a second is stopped part-way through the range.
        slow = build_client(ship_config(shore, kafka_broker, tmp_path / "ship.sqlite",
                                        replay_rate_records_per_sec=2))
        try:
            step_until(slow, lambda: 0 <= (runs_of(slow).run(run.replay_epoch)
                                           or run).read_offset < LAST, "the replay under way")
        finally:
            slow.close()
        client = build_client(config)
        try:
            assert client.run(until_idle=True, timeout=60) is ExitCode.IDLE
            progress = SQLiteReplayRuns(client.state.database).progress(
                SQLiteReplayRuns(client.state.database).run(run.replay_epoch) or run)
        finally:
            client.close()

        assert run.replay_epoch >= RANGE_REPLAY_EPOCHS and run.actor == "user:ops"
        assert progress.run.state is RunState.READ and progress.done
        # The shore answers a replayed event it recognised as a success (APPLIED, as for any
        # event already applied); that it wrote nothing shows in its rows: row 3 keeps the
        # shore's change although the range holds its insert and its update.
        assert progress.results == {"APPLIED": LAST - FIRST + 1}
        assert shore_rows(shore_mariadb, database) == before_replay
        assert [row[2] for row in before_replay if row[0] == 3] == [999]
        with pg_database.connect() as pg:
            replayed = pg.execute(
                "SELECT source_position, source_sequence, state, result FROM inbox_event"
                " WHERE origin_node_id = %s AND replay_epoch = %s ORDER BY source_position",
                (shore.node_id, run.replay_epoch)).fetchall()
    assert replayed == [(offset, offset - FIRST + 1, "TERMINAL", "APPLIED")
                        for offset in range(FIRST, LAST + 1)]
    assert committed_offsets(kafka_broker, config.group_id, capture.topic, 1) == [EVENTS]
    group = replay_group(config.group_id, run.replay_epoch)
    assert committed_offsets(kafka_broker, group, capture.topic, 1) == [-1001]  # none


def runs_of(client: object) -> SQLiteReplayRuns:
    return SQLiteReplayRuns(client.state.database)  # type: ignore[attr-defined]
