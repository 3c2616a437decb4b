"""The event recorder of every tidesync application, each with its own events table.

Saving an aggregate can carry `extra_statements`: SQL run in the same transaction as the
events, so an index table (the inbox) never disagrees with the streams it summarises.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from eventsourcing.application import Application
from eventsourcing.persistence import PersistenceError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import Environment, get_topic
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

Statement = tuple[str, Sequence[object]]
_App = TypeVar("_App", bound=Application[Any])
_CREATE_ATTEMPTS = 8
# One lock for every tidesync process creating event tables in a database: creating tables,
# indexes and the insert function is serialised, so nobody meets a half-made catalog row.
_CREATE_LOCK_KEY = 0x7469646573796E63  # "tidesync"


class PostgresStatementsRecorder(PostgresApplicationRecorder):
    """Runs caller-supplied statements inside the event insert transaction.

    Also creates its tables safely when several processes start at once on a fresh database.
    Concurrent `CREATE TABLE IF NOT EXISTS` of one table can collide in PostgreSQL's catalog
    (a unique violation), and concurrent `CREATE OR REPLACE FUNCTION` can fail with "tuple
    concurrently updated". The creating transaction therefore first takes a transaction-level
    advisory lock, so the second process finds what the first made; the composite types the
    library creates in transactions of their own are covered by trying again after a jittered
    pause.
    """

    def create_table(self) -> None:
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                super().create_table()
                return
            except PersistenceError:
                if attempt == _CREATE_ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * (attempt + 1) * (1 + random.random()))  # noqa: S311

    def _create_table(self, curs: Cursor[DictRow]) -> None:
        curs.execute("SELECT pg_advisory_xact_lock(%s)", (_CREATE_LOCK_KEY,))
        super()._create_table(curs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The library sends events as one array of a composite type, which psycopg writes
        # as text, escaping every state byte in Python; an apply job's events carry a few
        # hundred kilobytes of results. Four binary column arrays carry the same rows.
        self.insert_columns_statement = SQL(
            "INSERT INTO {schema}.{table} AS t (originator_id, originator_version, topic, state)"
            " SELECT * FROM unnest(%b::{id_type}[], %b::bigint[], %b::text[], %b::bytea[])"
            " RETURNING notification_id"
        ).format(schema=Identifier(self.datastore.schema),
                 table=Identifier(self.events_table_name),
                 id_type=Identifier(self.datastore.originator_id_type))

    def _insert_events(self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent],
                       **kwargs: Any) -> None:
        super()._insert_events(curs, stored_events, **kwargs)
        for sql, params in kwargs.get("extra_statements", ()):
            curs.execute(sql.encode(), params)

    def _insert_stored_events(self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent],
                              **_: Any) -> None:
        # What the library's application recorder does, with the insert above.
        self._lock_table(curs)
        self._notify_channel(curs)
        curs.execute(self.insert_columns_statement, (
            [e.originator_id for e in stored_events],
            [e.originator_version for e in stored_events],
            [e.topic for e in stored_events],
            [e.state for e in stored_events],
        ))


RECORDER_TOPIC = "tidesync.apps.recorder:PostgresStatementsRecorder"
"""The `eventsourcing` topic of the recorder every tidesync application uses."""


def with_statement_recorder(env: dict[str, str]) -> dict[str, str]:
    """The event store env with the recorder that understands `extra_statements`."""
    return {**env, "APPLICATION_RECORDER_TOPIC": RECORDER_TOPIC}


def open_application(cls: type[_App], env: Mapping[str, str]) -> _App:
    """`cls` over the event store `env`, in its own events table, with the recorder above."""
    return cls(env=Environment(cls.name, with_statement_recorder(dict(env))))


def created_ids(app: Application[Any], created: type, page_size: int = 500) -> list[uuid.UUID]:
    """The ids of every aggregate whose first event is `created`, in the order they were made
    (read from the application's notifications, a page at a time)."""
    topic = get_topic(created)
    ids: list[uuid.UUID] = []
    start = 1
    while True:
        page = app.recorder.select_notifications(start, page_size, topics=[topic])
        ids += [uuid.UUID(str(notification.originator_id)) for notification in page]
        if len(page) < page_size:
            return ids
        start = page[-1].id + 1
