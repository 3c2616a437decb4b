"""The ship's intake policy (§7.5, §7.6, §12): what becomes of each record read off the CDC queue.

Pure: the state store looks up what it knows (captures recorded before, platform writes this
ship applied, keys held by a blocked record) and these functions decide every record's state,
reason and source sequence; nothing is read or written here.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from tidesync.domain.slots import slot_builder

RECORD_ID_NAMESPACE = uuid.UUID("2f6c1a8e-7d4b-5e93-b1c0-4a8e6d2f9b17")
DUPLICATE_RESULT = "DUPLICATE"
PLATFORM_WRITE_RESULT = "PLATFORM_WRITE"


class EventState(enum.StrEnum):
    """Queue consumption states of §7.6."""

    CONSUMED = "CONSUMED"
    READY = "READY"
    IN_FLIGHT = "IN_FLIGHT"
    RECEIVED = "RECEIVED"
    RETRY_WAIT = "RETRY_WAIT"
    TERMINAL = "TERMINAL"
    EXPIRED_APPROVED = "EXPIRED_APPROVED"
    BLOCKED = "BLOCKED"


SENDABLE = frozenset({EventState.CONSUMED, EventState.READY, EventState.IN_FLIGHT,
                      EventState.RETRY_WAIT})
"""States whose event still has to reach the shore (after a restart: send it again)."""
DONE = frozenset({EventState.TERMINAL, EventState.EXPIRED_APPROVED})
"""The only states the terminal watermark passes (§7.6)."""


class StateReason(enum.StrEnum):
    """Reasons the state store itself gives a record."""

    CAPTURE_REEMITTED = "CAPTURE_REEMITTED"
    BEHIND_BLOCKED_RECORD = "BEHIND_BLOCKED_RECORD"
    REREAD_MISMATCH = "REREAD_MISMATCH"
    REMOTE_APPLY = "REMOTE_APPLY"
    ORIGIN_UNPROVEN = "ORIGIN_UNPROVEN"
    OPERATOR_CONFIRMED = "OPERATOR_CONFIRMED"  # an operator proved a platform write's origin


def record_id(origin_node_id: str, replay_epoch: int, topic: str, partition: int,
              offset: int) -> uuid.UUID:
    """The row id of a record that has no event id (blocked before normalization)."""
    parts = [origin_node_id, str(replay_epoch), topic, str(partition), str(offset)]
    return uuid.uuid5(RECORD_ID_NAMESPACE, "".join(f"{len(p)}:{p};" for p in parts))


# ----------------------------------------------------------------------------- inputs


class RecordKind(enum.StrEnum):
    """What the normalizer made of a record."""

    EVENT = "EVENT"  # a change event
    SKIP = "SKIP"    # nothing to sync (tombstone, heartbeat, transaction marker, schema change)
    BLOCK = "BLOCK"  # unreadable: it must not be passed


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """One queue record as the intake policy sees it (no business values).

    `row_id` is the event id of an event and the position's `record_id` of a block (None for
    a skipped record). `capture_id` identifies where the capture read an event (None when
    unknown); `platform_id` is set for a platform write: the id in its `_sync_event_id`, b""
    when that is unreadable."""

    offset: int
    kind: RecordKind
    row_id: uuid.UUID | None = None
    key_digest: bytes | None = None
    capture_id: bytes | None = None
    platform_id: bytes | None = None
    block_reason: str = ""
    block_detail: str = ""


@dataclass(frozen=True, slots=True)
class IntakeContext:
    """What the intake of one partition knows before a run of records is decided.

    `known_captures` maps capture ids already recorded to their event ids; `blocked_keys`
    are the queue key digests held by a blocked record; `proven_platform_ids` are the platform
    write ids this ship applied (its `applied_command` rows)."""

    next_sequence: int
    blocked_keys: frozenset[bytes] = frozenset()
    known_captures: Mapping[bytes, bytes] = field(default_factory=dict)
    proven_platform_ids: frozenset[bytes] = frozenset()


# ----------------------------------------------------------------------------- decisions


class Tally(enum.StrEnum):
    """What a decided record counts as in a poll's summary."""

    NEW_EVENT = "NEW_EVENT"
    SKIPPED = "SKIPPED"
    BLOCKED = "BLOCKED"
    DUPLICATE = "DUPLICATE"


@dataclass(frozen=True, slots=True)
class IntakeDecision:
    """The decision for a record read for the first time: the row to store (`state` None:
    none) and its columns the policy decides."""

    offset: int
    tally: Tally
    state: EventState | None = None
    result: str | None = None
    reason: str | None = None
    detail: str | None = None
    source_sequence: int | None = None
    capture_id: bytes | None = None
    duplicate_of: bytes | None = None

    @property
    def sendable(self) -> bool:
        """The event goes to the shore (it got the next source sequence)."""
        return self.state is EventState.READY


@dataclass(frozen=True, slots=True)
class IntakeDecisions:
    """The decisions for a run of records, in their order, and the context after them."""

    decisions: tuple[IntakeDecision, ...]
    context: IntakeContext


def decide_fresh(records: Sequence[ReadRecord], context: IntakeContext) -> IntakeDecisions:
    """Decide records read for the first time, in offset order.

    Only an event that goes to the shore takes a source sequence, so the sequences of a
    partition's sendable events are contiguous. An event whose capture coordinates were
    recorded before is a duplicate; a platform write is terminal when proven ours and blocks
    otherwise (never dropped); any other record of a key held by a blocked record waits
    behind it, so per-key order holds."""
    sequence = context.next_sequence
    blocked = set(context.blocked_keys)
    known = dict(context.known_captures)
    decisions = []
    for record in records:
        decision = _decide(record, sequence, blocked, known, context.proven_platform_ids)
        if decision.sendable:
            sequence += 1
            if record.capture_id is not None and record.row_id is not None:
                known[record.capture_id] = record.row_id.bytes
        if decision.tally is Tally.BLOCKED and record.key_digest is not None:
            blocked.add(record.key_digest)
        decisions.append(decision)
    after = IntakeContext(sequence, frozenset(blocked), MappingProxyType(known),
                          context.proven_platform_ids)
    return IntakeDecisions(tuple(decisions), after)


def _decide(record: ReadRecord, sequence: int, blocked: set[bytes], known: dict[bytes, bytes],
            proven: frozenset[bytes]) -> IntakeDecision:
    if record.kind is RecordKind.BLOCK:
        return IntakeDecision(record.offset, Tally.BLOCKED, EventState.BLOCKED,
                              reason=record.block_reason, detail=record.block_detail)
    if record.kind is not RecordKind.EVENT:
        return IntakeDecision(record.offset, Tally.SKIPPED)
    capture = record.capture_id
    original = known.get(capture) if capture is not None else None
    if original is not None:
        return IntakeDecision(record.offset, Tally.DUPLICATE, EventState.TERMINAL,
                              DUPLICATE_RESULT, StateReason.CAPTURE_REEMITTED,
                              "the capture emitted this change again", duplicate_of=original)
    if record.platform_id is not None:
        return _platform_write(record, proven)
    if record.key_digest is not None and record.key_digest in blocked:
        return IntakeDecision(record.offset, Tally.BLOCKED, EventState.BLOCKED, None,
                              StateReason.BEHIND_BLOCKED_RECORD,
                              "an earlier record of the same key is blocked", capture_id=capture)
    return _new_event(record.offset, sequence, capture)


_BUILD_DECISION = slot_builder(IntakeDecision, [each.name for each in fields(IntakeDecision)])
_BUILD_READ_RECORD = slot_builder(ReadRecord, [each.name for each in fields(ReadRecord)])


def _new_event(offset: int, sequence: int, capture: bytes | None) -> IntakeDecision:
    """IntakeDecision(offset, Tally.NEW_EVENT, EventState.READY, source_sequence=sequence,
    capture_id=capture), built slot by slot: this runs for almost every record."""
    return _BUILD_DECISION(offset, Tally.NEW_EVENT, EventState.READY, None, None, None,
                           sequence, capture, None)


def read_event(offset: int, row_id: uuid.UUID, key_digest: bytes | None,
               capture_id: bytes | None, platform_id: bytes | None) -> ReadRecord:
    """ReadRecord(offset, RecordKind.EVENT, row_id, key_digest, capture_id, platform_id),
    built slot by slot: this runs for almost every record."""
    return _BUILD_READ_RECORD(offset, RecordKind.EVENT, row_id, key_digest, capture_id,
                              platform_id, "", "")


def _platform_write(record: ReadRecord, proven: frozenset[bytes]) -> IntakeDecision:
    """A platform write is never uploaded (it came from the shore): proven by applied_command
    it is terminal at once, so the checkpoint passes it; unproven it blocks (ORIGIN_UNPROVEN)
    with the records of its key behind it — never dropped."""
    if record.platform_id and record.platform_id in proven:
        return IntakeDecision(record.offset, Tally.SKIPPED, EventState.TERMINAL,
                              PLATFORM_WRITE_RESULT, StateReason.REMOTE_APPLY,
                              "a shore command applied by this ship",
                              capture_id=record.capture_id)
    return IntakeDecision(record.offset, Tally.BLOCKED, EventState.BLOCKED, None,
                          StateReason.ORIGIN_UNPROVEN,
                          "a platform write whose event id this ship never applied",
                          capture_id=record.capture_id)


# ----------------------------------------------------------------------------- re-reads


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """The row recorded for a position when it was first read."""

    row_id: bytes
    state: EventState
    source_sequence: int | None


class RereadAction(enum.StrEnum):
    """What to do with a record read again after a restart: its row decides."""

    SKIP = "SKIP"                    # skipped then and now: nothing stored, nothing to do
    BLOCK_NEW = "BLOCK_NEW"          # skipped then, not now: its place in the sequence is gone
    BLOCK_STORED = "BLOCK_STORED"    # reads differently while still to send: block its row
    SEND = "SEND"                    # still to send: again, with its stored sequence
    AWAIT_RECEIPT = "AWAIT_RECEIPT"  # received: its terminal result is awaited
    KEEP = "KEEP"                    # final, blocked, or changed after it was sent: as it is


def decide_reread(record: ReadRecord, stored: StoredRecord | None) -> RereadAction:
    """Never a second sequence: a re-read record is sent again only as it was recorded."""
    if stored is None:
        return RereadAction.SKIP if record.kind is RecordKind.SKIP else RereadAction.BLOCK_NEW
    same = (record.kind is RecordKind.EVENT and record.row_id is not None
            and record.row_id.bytes == stored.row_id)
    if not same:
        return RereadAction.BLOCK_STORED if stored.state in SENDABLE else RereadAction.KEEP
    if stored.state in SENDABLE:
        return RereadAction.SEND
    if stored.state is EventState.RECEIVED:
        return RereadAction.AWAIT_RECEIPT
    return RereadAction.KEEP
