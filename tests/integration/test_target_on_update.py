"""An applied UPDATE leaves a `TIMESTAMP … ON UPDATE CURRENT_TIMESTAMP` column with the source's
value, also when the source's update did not move it (the same second): the target's own clock
never stamps a replicated row."""

from __future__ import annotations

import datetime as dt

from tests.target_events import SHORE, insert, update
from tidesync.target.contract import TargetOutcomeKind
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table

STAMPED = dt.datetime(2006, 2, 15, 4, 34, 33, tzinfo=dt.UTC)


def test_an_update_keeps_the_sources_on_update_stamp(shore_mariadb, make_mariadb_database):
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute("CREATE TABLE film (id INT PRIMARY KEY, rate DECIMAL(4,2) NOT NULL,"
                           " last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP"
                           " ON UPDATE CURRENT_TIMESTAMP) ENGINE=InnoDB")
        enable_mysql_table(conn, database, "film", SHORE)
        applier = MySQLTargetApplier(host=shore_mariadb.host, port=shore_mariadb.port,
                                     user=shore_mariadb.user, password=shore_mariadb.password,
                                     node_id=SHORE)
        try:
            rows = [{"id": key, "rate": 2, "last_update": STAMPED} for key in (1, 2, 3)]
            created = [insert(database, "film", row) for row in rows]
            assert {o.kind for o in applier.apply_chunk(created)} == {TargetOutcomeKind.APPLIED}
            # The source changed the rates within the stamp's second: the stamp did not move.
            # One event alone, then several in one chunk (sent as one set-based statement).
            changed = [update(database, "film", row, {"rate": 3}, event.result_revision)
                       for row, event in zip(rows, created, strict=True)]
            assert "last_update" not in changed[0].changed_columns()
            for chunk in (changed[:1], changed[1:]):
                outcomes = applier.apply_chunk(chunk)
                assert {o.kind for o in outcomes} == {TargetOutcomeKind.APPLIED}
        finally:
            applier.close()
        with conn.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
            cursor.execute("SELECT rate, last_update FROM film ORDER BY id")
            found = cursor.fetchall()
        assert [(int(rate), stamp) for rate, stamp in found] == [
            (3, STAMPED.replace(tzinfo=None))] * 3
    finally:
        conn.close()
