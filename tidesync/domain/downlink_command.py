"""The DownlinkCommand aggregate: one shore-to-ship command for one node, and its ship answer.

A command is issued once (a shore row change, a conflict decision, a resend request, or a turn
or repair of a reconciliation, §9.4, §10.4, §11.6) and acknowledged at most once; repeated acks
change nothing. Payloads are stored type-tagged.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eventsourcing.domain import Aggregate, event

from tidesync.domain.change_event import Operation, RecordKey, Revision
from tidesync.domain.errors import ErrorCode, TidesyncError, Unavailable
from tidesync.domain.evidence import decode_value, parse_record_key
from tidesync.domain.values import Value, canonical_value, frozen_row

DOWNLINK_NAMESPACE = uuid.UUID("2f6c8e0a-41d3-5b97-8c2e-6a0f4b1d9e73")


class CommandKind(enum.StrEnum):
    ROW_CHANGE = "ROW_CHANGE"
    CONFLICT_DECISION = "CONFLICT_DECISION"
    RESEND = "RESEND"
    """Upload a partition's events again from a source_sequence the shore is missing."""
    RECONCILE = "RECONCILE"
    """Answer one message of a reconciliation against the ship's table."""
    SNAPSHOT_KEYS = "SNAPSHOT_KEYS"
    """Send the listed rows of a ship table as snapshot records (a reconciliation's repair)."""


class CommandResult(enum.StrEnum):
    """The ship's result of a command (the names of sync.proto's CommandResult)."""

    COMMAND_APPLIED = "COMMAND_APPLIED"
    COMMAND_ALREADY_APPLIED = "COMMAND_ALREADY_APPLIED"
    COMMAND_CONFLICT_REPORTED = "COMMAND_CONFLICT_REPORTED"
    COMMAND_REJECTED = "COMMAND_REJECTED"


MAX_ACKS_PER_REQUEST = 1000
_CURSOR = re.compile(r"0|[1-9][0-9]{0,18}")


class DownlinkUnavailable(Unavailable):
    """PostgreSQL could not be reached or was busy; the request may be retried."""


class BadCursor(TidesyncError, ValueError):
    """A page cursor this server did not issue."""

    code = ErrorCode.INVALID_INPUT


class TooManyAcks(TidesyncError, ValueError):
    """More acks in one request than MAX_ACKS_PER_REQUEST."""

    code = ErrorCode.LIMIT_EXCEEDED


def parse_cursor(cursor: str) -> int:
    """The last sequence a page returned ("" for none)."""
    if cursor and (_CURSOR.fullmatch(cursor) is None or int(cursor) >= 1 << 63):
        raise BadCursor("cursor is not one this server issued")
    return int(cursor or 0)


def command_id_for(node_id: str, kind: CommandKind, source_id: uuid.UUID) -> uuid.UUID:
    """Deterministic: a re-consumed shore event or a re-dispatched decision meets the stream
    it created before instead of issuing a second command."""
    return uuid.uuid5(DOWNLINK_NAMESPACE, f"{node_id}\x1f{kind.value}\x1f{source_id}")


def resend_source_id(topic: str, partition: int, replay_epoch: int,
                     from_sequence: int) -> uuid.UUID:
    """The source of a resend request: the partition, its replay epoch and the first missing
    sequence, so a gap found stalled again asks once (with the node, in `command_id_for`)."""
    return uuid.uuid5(DOWNLINK_NAMESPACE,
                      f"resend\x1f{topic}\x1f{partition}\x1f{replay_epoch}\x1f{from_sequence}")


def needs_follow_up(kind: CommandKind, result: CommandResult) -> bool:
    """Acks the shore must act on: every decision ack (the conflict moves on), and any row
    change the ship did not apply (a conflict to open, or a rejection to look at). A resend
    answer needs none: its partition applies once the events arrive, and a refused one stays
    GAP_STALLED with the ship's reason on the command."""
    if kind in (CommandKind.RESEND, CommandKind.RECONCILE, CommandKind.SNAPSHOT_KEYS):
        return False
    return kind is CommandKind.CONFLICT_DECISION or result in (
        CommandResult.COMMAND_CONFLICT_REPORTED, CommandResult.COMMAND_REJECTED)


# ----------------------------------------------------------------------------- payloads


def image_to_json(image: Mapping[str, Value] | None) -> list[list[object]] | None:
    """Named values in type-tagged canonical form, order kept."""
    if image is None:
        return None
    return [[name, canonical_value(value)] for name, value in image.items()]


def image_from_json(raw: object) -> Mapping[str, Value] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ValueError("an image is a list of [name, value] pairs")
    return frozen_row((str(pair[0]), decode_value(pair[1])) for pair in raw)


def _revision_text(revision: Revision | None) -> str | None:
    return None if revision is None else revision.text


def _revision(raw: object) -> Revision | None:
    return None if raw is None else Revision.parse(str(raw))


@dataclass(frozen=True)
class RowChangePayload:
    """A shore business change for a ship (ShoreRowChange): values are the after image's
    non-key business columns (None for a DELETE)."""

    record: RecordKey
    operation: Operation
    values: Mapping[str, Value] | None
    expected_local_revision: Revision | None
    result_revision: Revision | None
    origin_node_id: str
    origin_event_id: uuid.UUID
    rule_id: str = ""
    """The sync rule the change was shaped by for the node ("" without rules)."""
    rule_version: int | None = None
    by_key: bool = False
    """The node's table carries no sync metadata (a DOWNLINK-only rule): applied by key."""

    def to_json(self) -> dict[str, object]:
        document: dict[str, object] = {
            "record": self.record.canonical(), "operation": self.operation.value,
            "values": image_to_json(self.values),
            "expected_local_revision": _revision_text(self.expected_local_revision),
            "result_revision": _revision_text(self.result_revision),
            "origin_node_id": self.origin_node_id,
            "origin_event_id": str(self.origin_event_id),
        }
        if self.rule_id:
            document.update(rule_id=self.rule_id, rule_version=self.rule_version)
        if self.by_key:
            document["by_key"] = True
        return document

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RowChangePayload:
        version = raw.get("rule_version")
        return cls(
            parse_record_key(str(raw["record"])), Operation(str(raw["operation"])),
            image_from_json(raw.get("values")), _revision(raw.get("expected_local_revision")),
            _revision(raw.get("result_revision")), str(raw["origin_node_id"]),
            uuid.UUID(str(raw["origin_event_id"])), str(raw.get("rule_id") or ""),
            None if version is None else int(version), bool(raw.get("by_key", False)),
        )


@dataclass(frozen=True)
class DecisionPayload:
    """A conflict decision for a ship (ConflictDecision): decided_value None is a tombstone."""

    decision_id: uuid.UUID
    conflict_id: uuid.UUID
    rule_id: str
    rule_version: int | None
    record: RecordKey
    expected_local_revision: Revision | None
    decided_value: Mapping[str, Value] | None
    decided_revision: Revision
    reason: str

    def to_json(self) -> dict[str, object]:
        return {
            "decision_id": str(self.decision_id), "conflict_id": str(self.conflict_id),
            "rule_id": self.rule_id, "rule_version": self.rule_version,
            "record": self.record.canonical(),
            "expected_local_revision": _revision_text(self.expected_local_revision),
            "decided_value": image_to_json(self.decided_value),
            "decided_revision": self.decided_revision.text, "reason": self.reason,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> DecisionPayload:
        version = raw.get("rule_version")
        decided = _revision(raw["decided_revision"])
        if decided is None:
            raise ValueError("a decision needs its decided revision")
        return cls(
            uuid.UUID(str(raw["decision_id"])), uuid.UUID(str(raw["conflict_id"])),
            str(raw["rule_id"]), None if version is None else int(version),
            parse_record_key(str(raw["record"])), _revision(raw.get("expected_local_revision")),
            image_from_json(raw.get("decided_value")), decided, str(raw.get("reason", "")),
        )


@dataclass(frozen=True)
class ResendPayload:
    """A resend request (ResendRequest): the shore holds a source partition's events up to
    `from_sequence - 1` and waits for `from_sequence` past the gap deadline (§10.4)."""

    topic: str
    partition: int
    replay_epoch: int
    from_sequence: int

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition,
                "replay_epoch": self.replay_epoch, "from_sequence": self.from_sequence}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ResendPayload:
        return cls(str(raw["topic"]), int(raw["partition"]), int(raw["replay_epoch"]),
                   int(raw["from_sequence"]))

    @property
    def source_id(self) -> uuid.UUID:
        return resend_source_id(self.topic, self.partition, self.replay_epoch,
                                self.from_sequence)


def reconcile_source_id(exchange_id: uuid.UUID, round_: int) -> uuid.UUID:
    """The source of one turn of a reconciliation: each round is asked once."""
    return uuid.uuid5(DOWNLINK_NAMESPACE, f"reconcile\x1f{exchange_id}\x1f{round_}")


def snapshot_keys_source_id(exchange_id: uuid.UUID) -> uuid.UUID:
    """The source of a reconciliation's snapshot request: one per exchange."""
    return uuid.uuid5(DOWNLINK_NAMESPACE, f"snapshot-keys\x1f{exchange_id}")


@dataclass(frozen=True)
class ReconcilePayload:
    """One turn of a reconciliation for a ship: `message` is the reconciliation message's
    JSON (counts, digests, keys and row hashes only), `ship_table` the ship's DB.TABLE."""

    exchange_id: uuid.UUID
    round: int
    ship_table: str
    message: str

    def to_json(self) -> dict[str, object]:
        return {"exchange_id": str(self.exchange_id), "round": self.round,
                "ship_table": self.ship_table, "message": self.message}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReconcilePayload:
        return cls(uuid.UUID(str(raw["exchange_id"])), int(raw["round"]),
                   str(raw["ship_table"]), str(raw["message"]))

    @property
    def source_id(self) -> uuid.UUID:
        return reconcile_source_id(self.exchange_id, self.round)


@dataclass(frozen=True)
class SnapshotKeysPayload:
    """Send these rows of the ship's table as snapshot records: `keys` are key value lists
    in type-tagged canonical form."""

    exchange_id: uuid.UUID
    ship_table: str
    keys: tuple[tuple[object, ...], ...]
    actor: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"exchange_id": str(self.exchange_id), "ship_table": self.ship_table,
                "keys": [list(key) for key in self.keys], "actor": self.actor,
                "reason": self.reason}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SnapshotKeysPayload:
        return cls(uuid.UUID(str(raw["exchange_id"])), str(raw["ship_table"]),
                   tuple(tuple(key) for key in raw["keys"]), str(raw.get("actor", "")),
                   str(raw.get("reason", "")))

    @property
    def source_id(self) -> uuid.UUID:
        return snapshot_keys_source_id(self.exchange_id)


Payload = (RowChangePayload | DecisionPayload | ResendPayload | ReconcilePayload
           | SnapshotKeysPayload)
_PAYLOADS: dict[CommandKind, Any] = {
    CommandKind.ROW_CHANGE: RowChangePayload, CommandKind.CONFLICT_DECISION: DecisionPayload,
    CommandKind.RESEND: ResendPayload, CommandKind.RECONCILE: ReconcilePayload,
    CommandKind.SNAPSHOT_KEYS: SnapshotKeysPayload,
}


def payload_from_json(kind: CommandKind, raw: Mapping[str, Any]) -> Payload:
    payload: Payload = _PAYLOADS[kind].from_json(raw)
    return payload


def kind_of(payload: Payload) -> CommandKind:
    if isinstance(payload, ReconcilePayload):
        return CommandKind.RECONCILE
    if isinstance(payload, SnapshotKeysPayload):
        return CommandKind.SNAPSHOT_KEYS
    if isinstance(payload, ResendPayload):
        return CommandKind.RESEND
    return (CommandKind.ROW_CHANGE if isinstance(payload, RowChangePayload)
            else CommandKind.CONFLICT_DECISION)


# ----------------------------------------------------------------------------- aggregate


@dataclass(frozen=True)
class Acknowledgement:
    """What the ship answered, as recorded (current_row in canonical form)."""

    result: CommandResult
    reason_code: str
    detail: str
    local_revision: str | None
    row_exists: bool
    current_row: list[list[object]] | None
    processed_at: dt.datetime | None


@dataclass(frozen=True)
class NewCommand:
    """A command to issue: its id follows from the node, the kind and the source."""

    node_id: str
    kind: CommandKind
    source_id: uuid.UUID
    payload: Payload
    conflict_id: uuid.UUID | None = None
    actor: str = "system:shore"
    reason: str = ""
    trace_id: str = ""

    @property
    def command_id(self) -> uuid.UUID:
        return command_id_for(self.node_id, self.kind, self.source_id)


class DownlinkCommand(Aggregate):
    """One command for one node: issued once, acknowledged at most once."""

    @staticmethod
    def create_id(node_id: str, kind: str, source_id: str, **_: object) -> uuid.UUID:
        return command_id_for(node_id, CommandKind(kind), uuid.UUID(source_id))

    @event("Issued")
    def __init__(self, node_id: str, kind: str, source_id: str, payload: dict[str, Any],
                 conflict_id: str | None, actor: str, reason: str, trace_id: str) -> None:
        self.node_id = node_id
        self.kind = CommandKind(kind)
        self.source_id = uuid.UUID(source_id)
        self.payload_json = payload
        self.conflict_id = None if conflict_id is None else uuid.UUID(conflict_id)
        self.trace_id = trace_id
        self.ack: Acknowledgement | None = None

    @property
    def payload(self) -> Payload:
        return payload_from_json(self.kind, self.payload_json)

    def acknowledge(self, result: CommandResult, reason_code: str, detail: str,
                    local_revision: Revision | None, row_exists: bool,
                    current_row: Mapping[str, Value] | None,
                    processed_at: dt.datetime | None, actor: str) -> bool:
        """Record the ship's answer; False (and nothing recorded) if one is recorded already,
        so a ship repeating its ack after a lost response changes nothing."""
        if self.ack is not None:
            return False
        self._acknowledged(result.value, reason_code, detail, _revision_text(local_revision),
                           row_exists, image_to_json(current_row), processed_at, actor,
                           f"ship answered {result.value}")
        return True

    @event("Acknowledged")
    def _acknowledged(self, result: str, reason_code: str, detail: str,
                      local_revision: str | None, row_exists: bool,
                      current_row: list[list[object]] | None, processed_at: dt.datetime | None,
                      actor: str, reason: str) -> None:
        self.ack = Acknowledgement(CommandResult(result), reason_code, detail, local_revision,
                                   row_exists, current_row, processed_at)
