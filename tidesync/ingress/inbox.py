"""Durable receive (§10.2): one transaction stores a batch's new events, and RECEIVED is
answered only after it commits. A re-sent event is compared with the stored one.

New events are not decoded here: their index columns come straight from the Protobuf message,
and the apply processor decodes each one from the stored batch body.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import json
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from psycopg_pool import ConnectionPool

from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.values import Row, canonical_value
from tidesync.ingress.database import Connection, transaction
from tidesync.ingress.receipts import result_code
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import (
    NameTable,
    WireError,
    event_from_wire,
    parse_message,
)
from tidesync.wire.protocol import SCHEMA_MAJORS

log = logging.getLogger(__name__)

_INT32 = 1 << 31
_INT64 = 1 << 63
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MAX_STORED_BODIES = 4
"""Most stored batch bodies one upload loads to compare re-sent events (each up to the
decompressed cap): what a resend costs stays bounded whatever it mixes."""
_OPERATIONS = frozenset({pb.INSERT, pb.UPDATE, pb.DELETE, pb.SNAPSHOT})

# One statement: the events, and the body only if at least one event was new.
_INSERT_EVENTS = (
    "WITH new AS ("
    " INSERT INTO inbox_event (origin_node_id, event_id, batch_ref, batch_index, source_topic,"
    " source_partition, source_position, source_sequence, replay_epoch, received_at)"
    " SELECT %(node)s, e.event_id, %(batch_ref)s, e.batch_index, e.source_topic,"
    " e.source_partition, e.source_position, e.source_sequence, e.replay_epoch, %(now)s"
    " FROM unnest(%(ids)b::uuid[], %(indexes)b::int4[], %(topics)b::text[],"
    " %(partitions)b::int4[], %(positions)b::int8[], %(sequences)b::int8[], %(epochs)b::int8[])"
    " AS e(event_id, batch_index, source_topic, source_partition, source_position,"
    " source_sequence, replay_epoch)"
    " ON CONFLICT (origin_node_id, event_id) DO NOTHING"
    " RETURNING batch_index"
    "), body AS ("
    " INSERT INTO inbox_batch (batch_ref, origin_node_id, client_batch_id, body, event_count,"
    " received_at)"
    " SELECT %(batch_ref)s, %(node)s, %(client_batch_id)b, %(body)b, %(event_count)s, %(now)s"
    " WHERE EXISTS (SELECT FROM new)"
    ") SELECT batch_index FROM new"
)
_SELECT_EXISTING = (
    "SELECT e.event_id, e.batch_ref, e.batch_index, e.state, e.result, e.reason_code,"
    " e.source_topic, e.source_partition, e.source_position,"
    " r.result, r.reason_code, r.conflict_id, r.result_revision, r.decided_at"
    " FROM inbox_event e LEFT JOIN LATERAL ("
    "   SELECT result, reason_code, conflict_id, result_revision, decided_at FROM receipt"
    "   WHERE receipt.origin_node_id = e.origin_node_id AND receipt.event_id = e.event_id"
    "   ORDER BY seq DESC LIMIT 1) r ON true"
    " WHERE e.origin_node_id = %s AND e.event_id = ANY(%s)"
)
_INSERT_REJECTIONS = (
    "INSERT INTO receive_rejection (origin_node_id, event_id, reason_code, detail,"
    " content_digest, recorded_at) VALUES (%s, %s, %s, %s, %s, %s)"
)


C = TypeVar("C")
"""A connection inside the receiving transaction."""


class ReceiveReason(enum.StrEnum):
    """Per-event reason codes of an upload answer."""

    DUPLICATE_EVENT = "DUPLICATE_EVENT"
    FORGED_ORIGIN = "FORGED_ORIGIN"
    INTEGRITY_MISMATCH = "INTEGRITY_MISMATCH"
    MALFORMED_EVENT = "MALFORMED_EVENT"
    SCHEMA_MAJOR_UNSUPPORTED = "SCHEMA_MAJOR_UNSUPPORTED"
    NOT_STORED = "NOT_STORED"
    COMPARE_DEFERRED = "COMPARE_DEFERRED"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why one event of a batch is PERMANENT_REJECTED; recorded in receive_rejection."""

    reason: ReceiveReason
    detail: str
    digest: bytes


@dataclass
class _Screened:
    """The batch's events split into rows to insert (columns as arrays) and refusals."""

    refused: dict[int, Refusal] = field(default_factory=dict)
    repeats: dict[int, int] = field(default_factory=dict)  # index -> first index, same id
    ids: list[uuid.UUID] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    sequences: list[int | None] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Stored:
    """An event already in the inbox, with its result when it has one."""

    batch_ref: uuid.UUID
    batch_index: int
    result: pb.EventResult | None


class _ReceivingInbox(ABC, Generic[C]):
    """The rules of durable receive; subclasses supply the statements of their database."""

    def _receive(self, conn: C, node_id: str, raw: bytes, batch: pb.UploadBatch,
                 now: dt.datetime) -> pb.UploadBatchResponse:
        """`receive` inside the caller's transaction: the answer holds once it commits."""
        screened = _screen(node_id, batch)
        _check_repeats(node_id, batch, screened)
        new = self._insert(conn, node_id, raw, batch, screened, now)
        existing = [i for i in screened.indexes if i not in new]
        answers = self._compare_existing(conn, node_id, batch, existing, screened)
        self._record_refusals(conn, node_id, batch, screened.refused, now)
        return _response(batch, screened, answers, now)

    def _compare_existing(
        self, conn: C, node_id: str, batch: pb.UploadBatch, indexes: list[int],
        screened: _Screened,
    ) -> dict[int, pb.EventReceiveStatus]:
        """The answer for each already stored event: its recorded state if the content is the
        same, INTEGRITY_MISMATCH (recorded as a refusal) if not."""
        if not indexes:
            return {}
        ids = {uuid.UUID(bytes=batch.events[i].event_id): i for i in indexes}
        stored = self._stored(conn, node_id, list(ids))
        refs = _refs_to_compare(ids, stored)
        bodies = _parsed_bodies(self._bodies(conn, refs))
        stored_names = {ref: NameTable(body.strings) for ref, body in bodies.items()}
        incoming_names = NameTable(batch.strings)
        answers: dict[int, pb.EventReceiveStatus] = {}
        for event_id, index in ids.items():
            wire = batch.events[index]
            record = stored.get(event_id)
            if record is None:  # Deleted between the insert and this read: ask again later.
                answers[index] = _status(wire, pb.RETRYABLE_FAILURE, ReceiveReason.NOT_STORED,
                                         "event vanished while receiving; retry")
                continue
            if record.batch_ref not in refs:
                answers[index] = _status(wire, pb.RETRYABLE_FAILURE,
                                         ReceiveReason.COMPARE_DEFERRED,
                                         "too many earlier batches to compare at once; retry")
                continue
            body = bodies.get(record.batch_ref)
            if body is None:  # The body is past its retention: nothing left to compare.
                answers[index] = _status(wire, pb.RECEIVED, ReceiveReason.DUPLICATE_EVENT,
                                         "already received; body no longer kept",
                                         record.result)
                continue
            same, stored_digest = _same_content(wire, incoming_names, batch.protocol_version,
                                                body, stored_names[record.batch_ref],
                                                record.batch_index)
            if same:
                answers[index] = _status(wire, pb.RECEIVED, ReceiveReason.DUPLICATE_EVENT,
                                         "already received", record.result)
            else:
                answers[index] = _mismatch(node_id, wire, screened, index, stored_digest,
                                           incoming_names, batch.protocol_version)
        return answers

    @abstractmethod
    def _insert(self, conn: C, node_id: str, raw: bytes, batch: pb.UploadBatch,
                screened: _Screened, now: dt.datetime) -> set[int]:
        """Insert the screened events (and the body if any is new); the new batch indexes."""

    @abstractmethod
    def _stored(self, conn: C, node_id: str,
                ids: list[uuid.UUID]) -> dict[uuid.UUID, _Stored]:
        """The stored events among `ids`, with their results."""

    @abstractmethod
    def _bodies(self, conn: C, refs: set[uuid.UUID]) -> list[tuple[uuid.UUID, bytes]]:
        """The stored batch bodies among `refs` (those past retention are missing)."""

    @abstractmethod
    def _record_refusals(self, conn: C, node_id: str, batch: pb.UploadBatch,
                         refused: dict[int, Refusal], now: dt.datetime) -> None:
        """Keep the refused events' reasons and digests for operators."""


class PostgresInbox(_ReceivingInbox[Connection]):
    """The `inbox_event` / `inbox_batch` tables (migrations 0001)."""

    def __init__(self, pool: ConnectionPool[Connection]) -> None:
        self.pool = pool

    def receive(self, node_id: str, raw: bytes, batch: pb.UploadBatch,
                now: dt.datetime) -> pb.UploadBatchResponse:
        """Store the batch's new events and its body in one transaction; answer per event.

        `raw` is the verified, decompressed body of `batch`; `node_id` the authenticated node.
        Raises StoreUnavailable when PostgreSQL fails (then nothing counts as received).
        """
        with transaction(self.pool) as conn:
            return self._receive(conn, node_id, raw, batch, now)

    def _insert(self, conn: Connection, node_id: str, raw: bytes, batch: pb.UploadBatch,
                screened: _Screened, now: dt.datetime) -> set[int]:
        if not screened.indexes:
            return set()
        rows = conn.execute(_INSERT_EVENTS, {
            "node": node_id, "batch_ref": uuid.uuid4(), "now": now, "ids": screened.ids,
            "indexes": screened.indexes, "topics": screened.topics,
            "partitions": screened.partitions, "positions": screened.positions,
            "sequences": screened.sequences, "epochs": screened.epochs,
            "client_batch_id": batch.batch_id, "body": raw, "event_count": len(batch.events),
        }).fetchall()
        return {row[0] for row in rows}

    def _stored(self, conn: Connection, node_id: str,
                ids: list[uuid.UUID]) -> dict[uuid.UUID, _Stored]:
        rows = conn.execute(_SELECT_EXISTING, (node_id, ids)).fetchall()
        return {row[0]: _Stored(row[1], row[2], _stored_result(row)) for row in rows}

    def _bodies(self, conn: Connection, refs: set[uuid.UUID]) -> list[tuple[uuid.UUID, bytes]]:
        if not refs:
            return []
        return conn.execute("SELECT batch_ref, body FROM inbox_batch WHERE batch_ref = ANY(%s)",
                            (list(refs),)).fetchall()

    def _record_refusals(self, conn: Connection, node_id: str, batch: pb.UploadBatch,
                         refused: dict[int, Refusal], now: dt.datetime) -> None:
        if not refused:
            return
        with conn.cursor() as cursor:
            cursor.executemany(_INSERT_REJECTIONS, [
                (node_id, _event_uuid(batch.events[i].event_id), r.reason.value, r.detail,
                 r.digest, now)
                for i, r in refused.items()
            ])






def _optional_text(value: uuid.UUID | None) -> str | None:
    return None if value is None else str(value)


# ----------------------------------------------------------------------------- screening


def _screen(node_id: str, batch: pb.UploadBatch) -> _Screened:
    """Per-event checks that need no decoding, and the index columns of the accepted ones."""
    screened = _Screened()
    names = batch.strings
    own_refs = {ref for ref, name in enumerate(names) if name == node_id}
    first_index: dict[bytes, int] = {}
    versions: dict[str, bool] = {}
    for index, wire in enumerate(batch.events):
        refusal = _refusal(wire, names, own_refs, versions)
        if refusal is not None:
            screened.refused[index] = refusal
            continue
        event_id = wire.event_id
        if event_id in first_index:
            screened.repeats[index] = first_index[event_id]
            continue
        first_index[event_id] = index
        screened.ids.append(uuid.UUID(bytes=event_id))
        screened.indexes.append(index)
        screened.topics.append(names[wire.source_topic_ref])
        screened.partitions.append(wire.source_partition)
        screened.positions.append(wire.source_position)
        screened.sequences.append(
            wire.source_sequence if wire.HasField("source_sequence") else None)
        screened.epochs.append(wire.replay_epoch)
    return screened


def _refusal(wire: pb.ChangeEvent, names: Sequence[str], own_refs: set[int],
             versions: dict[str, bool]) -> Refusal | None:
    problem = _malformed(wire, len(names))
    if problem is not None:
        return Refusal(ReceiveReason.MALFORMED_EVENT, problem, _wire_digest(wire))
    if wire.origin_node_ref not in own_refs:
        return Refusal(ReceiveReason.FORGED_ORIGIN,
                       f"origin {names[wire.origin_node_ref][:63]!r} is not the sending node",
                       _wire_digest(wire))
    version = wire.schema_version
    if version and not versions.setdefault(version, _major_supported(version)):
        return Refusal(ReceiveReason.SCHEMA_MAJOR_UNSUPPORTED,
                       f"schema version {version[:16]!r} is not supported", _wire_digest(wire))
    return None


def _malformed(wire: pb.ChangeEvent, name_count: int) -> str | None:
    """What makes the event unusable as an inbox row, or None. Values are not looked at."""
    if len(wire.event_id) != 16:
        return "event_id must be 16 bytes"
    if wire.origin_node_ref >= name_count or wire.source_topic_ref >= name_count:
        return "name reference outside the table"
    if wire.operation not in _OPERATIONS:
        return "unknown operation"
    if wire.source_partition >= _INT32 or wire.source_position >= _INT64 or (
        wire.replay_epoch >= _INT64 or wire.source_sequence >= _INT64
    ):
        return "queue coordinate out of range"
    return None


def _major_supported(version: str) -> bool:
    major, _, minor = version.partition(".")
    return major.isdigit() and minor.isdigit() and int(major) in SCHEMA_MAJORS


def _check_repeats(node_id: str, batch: pb.UploadBatch, screened: _Screened) -> None:
    """An event id twice in one batch: the later copy must carry the same content."""
    if not screened.repeats:
        return
    names = NameTable(batch.strings)
    for index, first in list(screened.repeats.items()):
        first_digest = _content_digest(batch.events[first], names, batch.protocol_version)
        if first_digest is None or first_digest != _content_digest(
            batch.events[index], names, batch.protocol_version
        ):
            refusal = _mismatch_refusal(node_id, batch.events[index], first_digest, names,
                                        batch.protocol_version)
            screened.refused[index] = refusal
            del screened.repeats[index]


# ----------------------------------------------------------------------------- comparing


def _parsed_bodies(rows: list[tuple[uuid.UUID, bytes]]) -> dict[uuid.UUID, pb.UploadBatch]:
    out: dict[uuid.UUID, pb.UploadBatch] = {}
    for ref, body in rows:
        try:
            out[ref] = parse_message(body, pb.UploadBatch)
        except WireError:
            log.error("stored batch body does not parse batch_ref=%s", ref)
    return out


def _refs_to_compare(ids: dict[uuid.UUID, int],
                     stored: dict[uuid.UUID, _Stored]) -> set[uuid.UUID]:
    """The stored bodies this request may load: the first MAX_STORED_BODIES distinct ones in
    batch order. Events in later bodies answer RETRYABLE_FAILURE; a resend without the
    answered events reaches them, so progress never stops."""
    refs: dict[uuid.UUID, None] = {}
    for event_id in ids:
        record = stored.get(event_id)
        if record is not None and len(refs) < MAX_STORED_BODIES:
            refs.setdefault(record.batch_ref)
    return set(refs)


def _same_content(wire: pb.ChangeEvent, names: NameTable, version: str,
                  stored_batch: pb.UploadBatch, stored_names: NameTable, stored_index: int
                  ) -> tuple[bool, bytes | None]:
    """Whether the incoming event equals the stored one (decoded on both sides), and the
    stored event's content digest."""
    if stored_index >= len(stored_batch.events):
        return False, None
    stored_wire = stored_batch.events[stored_index]
    # A sender may leave before values out (a ship sending major 2 keeps them only where a
    # conflict can be recorded): they are then compared only where both copies carry them.
    with_before = not (stored_wire.before_omitted or wire.before_omitted)
    stored_digest = _content_digest(stored_wire, stored_names, stored_batch.protocol_version,
                                    with_before)
    incoming_digest = _content_digest(wire, names, version, with_before)
    if stored_digest is not None:
        return stored_digest == incoming_digest, stored_digest
    # Neither side decodes: only a byte-identical resend under the same names is the same.
    same = incoming_digest is None and stored_wire == wire and (
        list(stored_batch.strings) == names.names)
    return same, None


def _content_digest(wire: pb.ChangeEvent, names: NameTable, version: str,
                    with_before: bool = True) -> bytes | None:
    """SHA-256 of the decoded event's canonical content; None if it does not decode."""
    try:
        event = event_from_wire(wire, names, batch_version=version)
    except WireError:
        return None
    return content_digest(event, with_before)


def content_digest(event: ChangeEvent, with_before: bool = True) -> bytes:
    """SHA-256 over what an event says, independent of how the batch interned its names.

    Values are compared typed and exact (canonical_value); image column order does not
    matter; the schema version counts by its major only (a newer minor adds optional fields).
    """
    fields: list[object] = [
        event.schema_version.partition(".")[0], str(event.event_id), event.origin_node_id,
        event.source_connector_id, event.source_topic, event.source_partition,
        event.source_position, event.source_sequence, event.transaction_id,
        event.transaction_order, event.rule_id, event.rule_version, event.record.canonical(),
        event.operation.value, _image(event.before) if with_before else None,
        _image(event.after),
        _revision_hex(event.base_revision), _revision_hex(event.result_revision),
        canonical_value(event.business_occurred_at), canonical_value(event.captured_at),
        event.trace_id, event.replay_epoch, _image(event.source_details),
    ]
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


def _image(row: Row | None) -> list[list[object]] | None:
    if row is None:
        return None
    return sorted([name, canonical_value(value)] for name, value in row.items())


def _revision_hex(revision: object) -> str | None:
    value = getattr(revision, "value", None)
    return value.hex() if isinstance(value, bytes) else None


def _mismatch(node_id: str, wire: pb.ChangeEvent, screened: _Screened, index: int,
              stored_digest: bytes | None, names: NameTable,
              version: str) -> pb.EventReceiveStatus:
    refusal = _mismatch_refusal(node_id, wire, stored_digest, names, version)
    screened.refused[index] = refusal
    return _status(wire, pb.PERMANENT_REJECTED, refusal.reason, refusal.detail)


def _mismatch_refusal(node_id: str, wire: pb.ChangeEvent, stored_digest: bytes | None,
                      names: NameTable, version: str) -> Refusal:
    incoming = _content_digest(wire, names, version) or _wire_digest(wire)
    log.warning(
        "integrity mismatch: node=%s event_id=%s stored_sha256=%s incoming_sha256=%s",
        node_id, _event_uuid(wire.event_id),
        stored_digest.hex() if stored_digest else "undecodable", incoming.hex(),
    )
    return Refusal(ReceiveReason.INTEGRITY_MISMATCH,
                   "event id already received with different content", incoming)


# ----------------------------------------------------------------------------- answers


def _response(batch: pb.UploadBatch, screened: _Screened,
              answers: dict[int, pb.EventReceiveStatus],
              now: dt.datetime) -> pb.UploadBatchResponse:
    response = pb.UploadBatchResponse(batch_id=batch.batch_id,
                                      server_time_micros=_micros(now))
    statuses = response.statuses
    refused, repeats = screened.refused, screened.repeats
    for index, wire in enumerate(batch.events):
        source = repeats.get(index, index)
        answer = answers.get(source)
        if source in refused or index in refused:
            refusal = refused.get(index) or refused[source]
            statuses.add(event_id=wire.event_id, status=pb.PERMANENT_REJECTED,
                         reason_code=refusal.reason.value, detail=refusal.detail)
        elif answer is not None:
            statuses.append(answer)
        else:
            statuses.add(event_id=wire.event_id, status=pb.RECEIVED)
    return response


def _status(wire: pb.ChangeEvent, status: pb.ReceiveStatus, reason: str, detail: str,
            result: pb.EventResult | None = None) -> pb.EventReceiveStatus:
    answer = pb.EventReceiveStatus(event_id=wire.event_id, status=status, reason_code=reason,
                                   detail=detail)
    if result is not None:
        answer.result.CopyFrom(result)
    return answer


def _stored_result(row: tuple[Any, ...]) -> pb.EventResult | None:
    """The terminal result of a stored event: the receipt row, else the inbox columns."""
    (event_id, _, _, state, inbox_result, inbox_reason, topic, partition, position,
     result, reason, conflict_id, revision, decided_at) = row
    if result is None and state == "TERMINAL":
        result, reason = inbox_result, inbox_reason
    code = result_code(result)
    if code is None:
        return None
    out = pb.EventResult(event_id=event_id.bytes, result=code, reason_code=reason or "",
                         source_topic=topic, source_partition=partition,
                         source_position=position)
    if conflict_id is not None:
        out.conflict_id = conflict_id.bytes
    if revision is not None:
        out.result_revision = revision
    if decided_at is not None:
        out.decided_at_micros = _micros(decided_at)
    return out


def _wire_digest(wire: pb.ChangeEvent) -> bytes:
    return hashlib.sha256(wire.SerializeToString(deterministic=True)).digest()


def _event_uuid(raw: bytes) -> uuid.UUID | None:
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None


def _micros(moment: dt.datetime) -> int:
    return (moment - _EPOCH) // dt.timedelta(microseconds=1)
