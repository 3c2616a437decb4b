"""The ApplyJob aggregate: one leased run of received events from one source partition.

A job covers up to a few hundred consecutive events so that its bookkeeping costs a handful
of stored events per chunk, not several per change; each event's own state lives inside it.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from dataclasses import dataclass

from eventsourcing.domain import Aggregate, event

APPLY_JOB_NAMESPACE = uuid.UUID("3c1b9a52-6d0e-5f4c-8b7a-1e2d3c4b5a69")


class EventApplyState(enum.StrEnum):
    """Internal apply states (§1.3); never shown to a ship as a result."""

    APPLYING = "APPLYING"
    RETRY_WAIT = "RETRY_WAIT"
    TARGET_COMMITTED = "TARGET_COMMITTED"
    FINALIZED = "FINALIZED"
    CONFLICT_CAPTURED = "CONFLICT_CAPTURED"
    RELEASED = "RELEASED"
    DEAD = "DEAD"


class EventResult(enum.StrEnum):
    """Terminal results of an uplink event, as ships receive them (§9.4)."""

    APPLIED = "APPLIED"
    CONFLICT_RECORDED = "CONFLICT_RECORDED"
    REJECTED = "REJECTED"
    EXPIRED_APPROVED = "EXPIRED_APPROVED"


class ErrorClass(enum.StrEnum):
    """Why an event failed, deciding whether an operator may replay it (never MALFORMED)."""

    MALFORMED = "MALFORMED"
    TARGET_SCHEMA = "TARGET_SCHEMA"
    DATA = "DATA"
    UNSUPPORTED = "UNSUPPORTED"
    INFRA = "INFRA"
    EXHAUSTED = "EXHAUSTED"


REPLAYABLE_CLASSES = frozenset(ErrorClass) - {ErrorClass.MALFORMED}

_MALFORMED_REASONS = frozenset({
    "MALFORMED_PAYLOAD", "MALFORMED_PROTOCOL_VERSION", "UNSUPPORTED_PROTOCOL",
    "CHECKSUM_MISMATCH", "PRIMARY_KEY_MISMATCH", "MISSING_RESULT_REVISION",
})
_TARGET_SCHEMA_REASONS = frozenset({
    "UNKNOWN_DATABASE", "UNKNOWN_TABLE", "UNKNOWN_COLUMN", "TABLE_NOT_ENABLED",
})
_UNSUPPORTED_REASONS = frozenset({"UNSUPPORTED_TYPE", "PRIMARY_KEY_CHANGED"})


def error_class_of(reason_code: str) -> ErrorClass:
    """The replay class of a permanent rejection: a fixed target schema or a fixed release
    can make it apply; a malformed event never will."""
    if reason_code in _MALFORMED_REASONS:
        return ErrorClass.MALFORMED
    if reason_code in _TARGET_SCHEMA_REASONS:
        return ErrorClass.TARGET_SCHEMA
    if reason_code in _UNSUPPORTED_REASONS:
        return ErrorClass.UNSUPPORTED
    return ErrorClass.DATA


@dataclass(frozen=True)
class FinalResult:
    """One event's terminal result as recorded in a job, with what read models need: the
    rule, the record key (canonical text), the operation and the source position."""

    event_id: str
    result: EventResult
    reason_code: str = ""
    conflict_id: str | None = None
    result_revision: str | None = None
    position: int = 0
    rule_id: str = ""
    record_key: str = ""
    operation: str = ""

    def as_row(self) -> list[str | int | None]:
        return [self.event_id, self.result.value, self.reason_code, self.conflict_id,
                self.result_revision, self.position, self.rule_id, self.record_key,
                self.operation]

    @classmethod
    def from_row(cls, row: list[str | int | None]) -> FinalResult:
        event_id, result, reason, conflict_id, revision, position, *rest = row
        rule_id, record_key, operation = (*rest, "", "", "")[:3]
        return cls(str(event_id), EventResult(str(result)), str(reason or ""),
                   None if conflict_id is None else str(conflict_id),
                   None if revision is None else str(revision), int(position or 0),
                   str(rule_id or ""), str(record_key or ""), str(operation or ""))


def apply_job_id(origin_node_id: str, topic: str, partition: int, replay_epoch: int,
                 job_no: int) -> uuid.UUID:
    """Deterministic: a second worker claiming the same job number collides, never forks."""
    return uuid.uuid5(
        APPLY_JOB_NAMESPACE, f"{origin_node_id}\x1f{topic}\x1f{partition}\x1f{replay_epoch}"
                             f"\x1f{job_no}",
    )


class ApplyJob(Aggregate):
    """Events of one source partition claimed by a worker under a lease."""

    @staticmethod
    def create_id(origin_node_id: str, topic: str, partition: int, replay_epoch: int,
                  job_no: int, **_: object) -> uuid.UUID:
        return apply_job_id(origin_node_id, topic, partition, replay_epoch, job_no)

    @event("Claimed")
    def __init__(self, origin_node_id: str, topic: str, partition: int, replay_epoch: int,
                 job_no: int, event_ids: list[str], positions: list[int], worker: str,
                 lease_expires_at: dt.datetime, actor: str, reason: str) -> None:
        self.origin_node_id = origin_node_id
        self.topic = topic
        self.partition = partition
        self.replay_epoch = replay_epoch
        self.job_no = job_no
        self.positions = dict(zip(event_ids, positions, strict=True))
        self.states = dict.fromkeys(event_ids, EventApplyState.APPLYING)
        self.results: dict[str, FinalResult] = {}
        self.worker = worker
        self.lease_expires_at = lease_expires_at
        self.attempts = 0
        self.history_note = reason

    @event("TargetCommitted")
    def target_committed(self, event_ids: list[str], actor: str, reason: str) -> None:
        for event_id in event_ids:
            self.states[event_id] = EventApplyState.TARGET_COMMITTED

    def finalize(self, results: list[list[str | int | None]], actor: str, reason: str) -> None:
        """Record terminal results (rows of FinalResult.as_row())."""
        self._finalized(self.origin_node_id, self.topic, self.partition, results, actor, reason)

    @event("Finalized")
    def _finalized(self, origin_node_id: str, topic: str, partition: int,
                   results: list[list[str | int | None]], actor: str, reason: str) -> None:
        # The job's coordinates ride on the event so projections need no other event.
        for row in results:
            final = FinalResult.from_row(row)
            self.results[final.event_id] = final
            self.states[final.event_id] = (
                EventApplyState.CONFLICT_CAPTURED
                if final.result is EventResult.CONFLICT_RECORDED else EventApplyState.FINALIZED
            )

    @event("RetryScheduled")
    def schedule_retry(self, event_ids: list[str], error_class: str, reason_code: str,
                       attempt: int, not_before: dt.datetime, actor: str, reason: str) -> None:
        self.attempts = attempt
        for event_id in event_ids:
            self.states[event_id] = EventApplyState.RETRY_WAIT

    @event("DeadLettered")
    def dead_letter(self, event_ids: list[str], error_class: str, reason_code: str,
                    attempts: int, actor: str, reason: str) -> None:
        for event_id in event_ids:
            self.states[event_id] = EventApplyState.DEAD

    @event("Released")
    def release(self, event_ids: list[str], reason_code: str, actor: str, reason: str) -> None:
        """Events handed back unprocessed (held behind a gap or a retry), for a later job."""
        for event_id in event_ids:
            self.states[event_id] = EventApplyState.RELEASED

    @event("TakenOver")
    def take_over(self, worker: str, lease_expires_at: dt.datetime, by_job: str | None,
                  actor: str, reason: str) -> None:
        """Another worker found this job's lease expired and carries its events on."""
        self.worker = worker
        self.lease_expires_at = lease_expires_at
        for event_id, state in self.states.items():
            if state in (EventApplyState.APPLYING, EventApplyState.TARGET_COMMITTED):
                self.states[event_id] = EventApplyState.RELEASED

    @event("Replayed")
    def replayed(self, event_ids: list[str], error_class: str, actor: str, reason: str) -> None:
        """An operator sent dead or rejected events back for another attempt."""
        for event_id in event_ids:
            self.states[event_id] = EventApplyState.RELEASED
            self.results.pop(event_id, None)

    @event("SkipRequested")
    def skip_requested(self, event_ids: list[str], actor: str, reason: str) -> None:
        """An operator gave up on dead or rejected events: the next job finalizes them as
        REJECTED (SKIPPED_BY_OPERATOR) without touching the target, in their source order."""
        for event_id in event_ids:
            self.states[event_id] = EventApplyState.RELEASED
            self.results.pop(event_id, None)

    def open_event_ids(self) -> list[str]:
        """Events of this job still owned by it (not terminal, not handed back)."""
        return [e for e, s in self.states.items()
                if s in (EventApplyState.APPLYING, EventApplyState.TARGET_COMMITTED)]
