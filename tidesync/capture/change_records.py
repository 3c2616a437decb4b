"""A captured row change → the records Debezium writes for it: a delete is followed by its
tombstone, and an update of the primary key is a delete of the old key and a create of the new.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from tidesync.capture.envelope_writer import (
    DebeziumEnvelopeWriter,
    DebeziumRecord,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)
from tidesync.cdc.debezium import FOREIGN_KEY_CHECKS_HEADER, NEW_KEY_HEADER, OLD_KEY_HEADER
from tidesync.domain.values import Row, Value

Headers = tuple[tuple[str, bytes], ...]
_NO_HEADERS: Headers = ()
_CHECKS_OFF: Headers = ((FOREIGN_KEY_CHECKS_HEADER, b"0"),)


@dataclass(frozen=True, slots=True)
class RowChange:
    """One captured row change, before it is written as records."""

    table: TableDefinition
    op: EnvelopeOp
    before: Row | None
    after: Row | None
    source: SourceInfo


def change_records(writer: DebeziumEnvelopeWriter, change: RowChange, processed_at: dt.datetime,
                   *, tombstones: bool) -> list[tuple[DebeziumRecord, Headers]]:
    """The records Debezium writes for a row change: a delete is followed by its tombstone, and
    an update of the primary key is a delete of the old key and a create of the new one.

    A change the source made with foreign key checks off carries a header saying so on each
    of its change records (not on tombstones), so an applier can do the same."""
    records = _change_records(writer, change, processed_at, tombstones)
    if change.source.foreign_key_checks:
        return records
    return [(record, headers + _CHECKS_OFF if record.value is not None else headers)
            for record, headers in records]


def _change_records(writer: DebeziumEnvelopeWriter, change: RowChange, processed_at: dt.datetime,
                    tombstones: bool) -> list[tuple[DebeziumRecord, Headers]]:
    table, before, after = change.table, change.before, change.after
    if change.op is EnvelopeOp.UPDATE and before is not None and after is not None and (
            _key_values(table, before) != _key_values(table, after)):
        old_key = writer.tombstone(table, before).key_bytes() or b""
        new_key = writer.tombstone(table, after).key_bytes() or b""
        records: list[tuple[DebeziumRecord, Headers]] = [
            (writer.change(table, EnvelopeOp.DELETE, before=before, after=None,
                           source=change.source, processed_at=processed_at),
             ((NEW_KEY_HEADER, new_key),))]
        if tombstones:
            records.append((writer.tombstone(table, before), _NO_HEADERS))
        records.append((writer.change(table, EnvelopeOp.CREATE, before=None, after=after,
                                      source=change.source, processed_at=processed_at),
                        ((OLD_KEY_HEADER, old_key),)))
        return records
    records = [(writer.change(table, change.op, before=before, after=after,
                              source=change.source, processed_at=processed_at), _NO_HEADERS)]
    if change.op is EnvelopeOp.DELETE and tombstones and before is not None:
        records.append((writer.tombstone(table, before), _NO_HEADERS))
    return records


def _key_values(table: TableDefinition, row: Row) -> tuple[tuple[type, Value], ...]:
    return tuple((type(row[name]), row[name]) for name in table.primary_key)
