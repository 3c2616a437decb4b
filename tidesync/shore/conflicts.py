"""Where a conflict decision reads the record's current row and revision: the record key (from
the views, the inbox or the commands) and the shore target itself.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.apps.conflicts import RevisionUnavailable
from tidesync.domain.change_event import RecordKey
from tidesync.domain.conflict_case import ConflictCase, image_evidence, key_digest
from tidesync.domain.evidence import EvidenceValueError, parse_record_key
from tidesync.target.contract import TargetApplier
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import NameTable, WireError, event_from_wire

log = logging.getLogger(__name__)

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


class PostgresRecordKeys:
    """Finds a case's record key: in the record_head view, else in a received batch that
    carried one of its events. Either way it must hash to the case's key digest."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def record_key(self, case: ConflictCase) -> RecordKey:
        for candidate in [*self._from_record_head(case), *self._from_inbox(case),
                          *self._from_commands(case)]:
            if key_digest(case.rule_id, candidate.canonical()) == case.key_digest:
                return candidate
        raise RevisionUnavailable("the record key is no longer on record")

    def _from_record_head(self, case: ConflictCase) -> list[RecordKey]:
        with self.pool.connection() as conn:
            try:
                rows = conn.execute(
                    "SELECT record_key FROM record_head WHERE rule_id = %s AND key_digest = %s",
                    (case.rule_id, case.key_digest)).fetchall()
            except psycopg.errors.UndefinedTable:
                return []
        keys = []
        for (text,) in rows:
            try:
                keys.append(parse_record_key(str(text)))
            except EvidenceValueError:
                continue
        return keys

    def _from_inbox(self, case: ConflictCase) -> list[RecordKey]:
        for evidence in reversed(case.evidence):
            with self.pool.connection() as conn:
                row = conn.execute(
                    "SELECT b.body, e.batch_index FROM inbox_event e"
                    " JOIN inbox_batch b ON b.batch_ref = e.batch_ref"
                    " WHERE e.origin_node_id = %s AND e.event_id = %s",
                    (str(evidence["origin_node_id"]), uuid.UUID(str(evidence["event_id"])),
                     )).fetchone()
            if row is None:
                continue
            batch = pb.UploadBatch.FromString(bytes(row[0]))
            try:
                event = event_from_wire(batch.events[int(row[1])], NameTable(batch.strings),
                                        batch_version=batch.protocol_version)
            except WireError:
                continue
            # A rule may apply the ship's table to another shore table: the case names it.
            shore = RecordKey(case.database, case.table, event.record.primary_key,
                              event.record.schema)
            return [event.record, shore]
        return []


    def _from_commands(self, case: ConflictCase) -> list[RecordKey]:
        """Evidence a ship reported in answer to a command names the command."""
        ids = []
        for evidence in case.evidence:
            with contextlib.suppress(ValueError):
                ids.append(uuid.UUID(str(evidence["event_id"])))
        with self.pool.connection() as conn:
            try:
                rows = conn.execute("SELECT payload->>'record' FROM downlink_command"
                                    " WHERE command_id = ANY(%s)", (ids,)).fetchall()
            except psycopg.errors.UndefinedTable:
                return []
        keys = []
        for (text,) in rows:
            with contextlib.suppress(EvidenceValueError):
                keys.append(parse_record_key(str(text)))
        return keys


class TargetRevisionReader:
    """Reads the current revision from the shore target itself (the record of truth), through
    one applier connection shared under a lock; opened on first use."""

    def __init__(self, open_applier: Callable[[], TargetApplier], keys: PostgresRecordKeys) -> None:
        self._open_applier = open_applier
        self._applier: TargetApplier | None = None
        self._keys = keys
        self._lock = threading.Lock()

    def current_revision(self, case: ConflictCase) -> str | None:
        return self.current_row(case)[1]

    def current_row(self, case: ConflictCase) -> tuple[list[list[object]] | None, str | None]:
        """The shore's whole row of the case's record (type-tagged, key and sync columns
        included; None: no row) and its revision."""
        key = self._keys.record_key(case)
        with self._lock:
            try:
                if self._applier is None:
                    self._applier = self._open_applier()
                row, revision = self._applier.current_row(key.database, key.table,
                                                          key.as_dict())
            except Exception as error:  # any target failure means: cannot tell
                log.warning("reading the current row of conflict %s failed: %s", case.id,
                            type(error).__name__)
                raise RevisionUnavailable(getattr(error, "reason_code", "TARGET_ERROR")) from error
        image = None if row is None else image_evidence({**row, **key.as_dict()})
        return image, None if revision is None else revision.text

    def close(self) -> None:
        with self._lock:
            if self._applier is not None:
                self._applier.close()
                self._applier = None


