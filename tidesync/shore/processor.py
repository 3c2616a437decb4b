"""The apply processor (§10.3–10.4): claims received events per source partition and applies
them to the target in source order, recording every step in ApplyJob streams.

Per-key order holds because a partition is applied by one worker at a time, in position
order; conflicts and rejections are terminal and never hold other keys.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from eventsourcing.application import AggregateNotFoundError

from tidesync import failpoints
from tidesync.apps.apply_jobs import ApplyJobsApplication
from tidesync.apps.conflict_capture import capture_conflict
from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.apps.jobs import SKIPPED_BY_OPERATOR
from tidesync.apps.recorder import Statement
from tidesync.domain.actor import system_actor
from tidesync.domain.apply_job import (
    ApplyJob,
    ErrorClass,
    EventResult,
    FinalResult,
)
from tidesync.domain.backoff import Backoff
from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.clock import Clock
from tidesync.domain.conflict_case import conflict_evidence, record_key_digest, rule_for
from tidesync.shore.settings import NOT_AUTHORIZED, ApplyConfig
from tidesync.shore.work_queue import (
    Claim,
    ClaimedEvent,
    LeaseLost,
    StoredBatches,
    UndecodableEvent,
    WorkQueue,
)
from tidesync.target.contract import (
    CommitOutcomeUnknown,
    TargetApplier,
    TargetError,
    TargetOutcome,
    TargetOutcomeKind,
    TransientTargetError,
)

log = logging.getLogger(__name__)

ACTOR = system_actor("apply-processor")
GAP_RECHECK_SECONDS = 2.0

@dataclass
class ProcessorSettings:
    worker_id: str = field(default_factory=lambda: f"worker-{uuid.uuid4().hex[:8]}")
    max_events_per_job: int = 2000
    chunk_size: int = 500
    """Events per target transaction; a job applies several chunks, finalized together."""
    lease_seconds: float = 60.0
    backoff: Backoff = field(default_factory=Backoff)
    scope: ApplyConfig = field(default_factory=ApplyConfig)
    """Which tables each node may write (`[apply.node_tables]`) and the gap deadline."""


class ApplyProcessor:
    """One worker: `run_once()` claims a partition's next events and takes them to terminal."""

    def __init__(self, apply_jobs: ApplyJobsApplication, conflicts: ConflictCasesApplication,
                 queue: WorkQueue, applier: TargetApplier,
                 clock: Clock, settings: ProcessorSettings | None = None,
                 draw: Callable[[], float] = random.random) -> None:
        self.apply_jobs = apply_jobs
        self.conflicts = conflicts
        self.queue = queue
        self.applier = applier
        self.clock = clock
        self.settings = settings or ProcessorSettings()
        self.draw = draw

    def run_once(self) -> int:
        """Process one claim; returns how many events it took to a terminal result."""
        now = self.clock()
        claim = self.queue.claim(self.settings.worker_id, now, self.settings.lease_seconds,
                                 self.settings.max_events_per_job)
        if claim is None:
            return 0
        failpoints.hit("after_claim")
        try:
            return self._run_claim(claim)
        except LeaseLost:
            # Paused or slow past the lease: another worker owns the partition now and
            # carries these events on; nothing of this claim was written after the loss.
            log.warning("apply job %s lost its lease; leaving its events to the new owner",
                        claim.job_id)
            return 0

    def _run_claim(self, claim: Claim) -> int:
        self.queue.renew(claim, self.settings.lease_seconds)
        self._record_takeovers(claim)
        job = ApplyJob(
            origin_node_id=claim.partition.origin_node_id, topic=claim.partition.topic,
            partition=claim.partition.partition, replay_epoch=claim.partition.replay_epoch,
            job_no=claim.job_no, event_ids=[str(e.event_id) for e in claim.events],
            positions=[e.position for e in claim.events], worker=self.settings.worker_id,
            lease_expires_at=claim.lease_expires_at, actor=ACTOR, reason="claimed",
        )
        # APPLYING is on record before the target is touched, so a takeover can name it.
        self.apply_jobs.save(job)
        try:
            batches = self.queue.load_batches(claim)
        except Exception as error:  # noqa: BLE001 (a stored body that no longer parses)
            return self._retry_later(claim, job, claim.events, [], [], _unexpected(error))
        return self._process(claim, job, batches)

    def _process(self, claim: Claim, job: ApplyJob, batches: StoredBatches) -> int:
        now = self.clock()
        ready, held, next_sequence = split_at_gap(claim.events, claim.next_sequence)
        held_ids = [str(e.event_id) for e in held]
        stalled = bool(held) and self._gap_stalled(claim, now)
        if held:
            job.release(held_ids, "GAP_STALLED" if stalled else "SEQUENCE_GAP", ACTOR,
                        f"source_sequence {next_sequence} missing")
            log.log(logging.ERROR if stalled else logging.WARNING,
                    "sequence gap%s on partition %s/%d of node %s at %d",
                    " stalled past its deadline" if stalled else "",
                    claim.partition.topic, claim.partition.partition,
                    claim.partition.origin_node_id, next_sequence)
        size = self.settings.chunk_size
        chunks = [ready[start:start + size] for start in range(0, len(ready), size)]
        results: list[FinalResult] = []
        for index, chunk in enumerate(chunks):
            self.queue.renew(claim, self.settings.lease_seconds)
            try:
                results += self._apply_chunk(job, chunk, batches)
            except (TransientTargetError, CommitOutcomeUnknown) as error:
                return self._retry_later(claim, job, _unfinished(chunks[index:], results),
                                         held_ids, results, error.reason_code)
            except Exception as error:  # noqa: BLE001
                # A fault no reason code names (a bug, a database error nobody mapped): the
                # chunk waits and retries like a transient one and ends DEAD, where an
                # operator can replay or skip it; it never takes the worker down.
                reason_code = _unexpected(error)
                return self._retry_later(claim, job, _unfinished(chunks[index:], results),
                                         held_ids, results, reason_code)
        statements = self._finalize(claim, job, results, now)
        if held:
            statements += self.queue.gap_statements(
                claim, next_sequence, now, now + dt.timedelta(seconds=GAP_RECHECK_SECONDS),
                held_ids if stalled else ())
        else:
            statements += self.queue.unlease_statements(claim, next_sequence=next_sequence)
        self._save_fenced(claim, job, statements)
        return len(results)

    def _gap_stalled(self, claim: Claim, now: dt.datetime) -> bool:
        """Whether the partition's gap is older than the deadline (gap_detected_at was
        written from the injected clock, so both sides are the injected clock)."""
        since = claim.gap_detected_at
        deadline = dt.timedelta(seconds=self.settings.scope.gap_deadline_seconds)
        return since is not None and now - since >= deadline

    def _save_fenced(self, claim: Claim, job: ApplyJob, statements: list[Statement]) -> None:
        """Save the job's outcome with its index updates, only while the claim holds the
        partition: the fence runs first in the same transaction and locks the row."""
        try:
            self.apply_jobs.save(job, extra_statements=[*self.queue.fence_statements(claim),
                                                        *statements])
        except Exception as error:
            if not self.queue.holds(claim):
                raise LeaseLost(f"apply job {claim.job_id} lost its lease") from error
            raise

    def _apply_chunk(self, job: ApplyJob, chunk: Sequence[ClaimedEvent],
                     batches: StoredBatches) -> list[FinalResult]:
        """One target transaction: the chunk's terminal results, skipped, undecodable and
        unauthorized events first (they never reach the target)."""
        results = [self._skipped(e) for e in chunk if e.skip]
        items = batches.decode([e for e in chunk if not e.skip])
        results += [self._malformed(i) for i in items if isinstance(i, UndecodableEvent)]
        events: list[ChangeEvent] = []
        for item in items:
            if not isinstance(item, ChangeEvent):
                continue
            if self._allowed(item):
                events.append(item)
            else:
                results.append(self._not_authorized(item))
        outcomes = self.applier.apply_chunk(events)
        failpoints.hit("after_target_commit")
        chunk_results = [self._result(event, outcome)
                         for event, outcome in zip(events, outcomes, strict=True)]
        applied = [r.event_id for r in chunk_results if r.result is EventResult.APPLIED]
        if applied:
            job.target_committed(applied, ACTOR, "target transaction committed")
        return results + chunk_results

    def _finalize(self, claim: Claim, job: ApplyJob, results: list[FinalResult],
                  now: dt.datetime) -> list[Statement]:
        if not results:
            return []
        job.finalize([r.as_row() for r in results], ACTOR, "terminal results recorded")
        return self.queue.finalize_statements(claim.partition.origin_node_id, claim.job_id,
                                              results, now)

    def _retry_later(self, claim: Claim, job: ApplyJob, pending: Sequence[ClaimedEvent],
                     held_ids: list[str], done: list[FinalResult], reason_code: str) -> int:
        """A transient failure: what this job finished is finalized; the rest waits with
        full-jitter backoff (re-applying it later is idempotent thanks to the ledger)."""
        now = self.clock()
        attempt = claim.attempts + 1
        retry_ids = [str(e.event_id) for e in pending]
        statements = self._finalize(claim, job, done, now)
        resume_at = pending[0].sequence if pending else None
        if self.settings.backoff.exhausted(attempt):
            job.dead_letter(retry_ids, ErrorClass.EXHAUSTED.value, reason_code, attempt, ACTOR,
                            "retries exhausted; waiting for an operator")
            statements += self.queue.dead_statements(
                claim, retry_ids, ErrorClass.EXHAUSTED.value, reason_code, attempt, resume_at)
            log.error("apply retries exhausted on partition %s/%d of node %s: %s",
                      claim.partition.topic, claim.partition.partition,
                      claim.partition.origin_node_id, reason_code)
        else:
            delay = self.settings.backoff.delay(attempt, self.draw())
            not_before = now + dt.timedelta(seconds=delay)
            job.schedule_retry(retry_ids, ErrorClass.INFRA.value, reason_code, attempt,
                               not_before, ACTOR, "target error; retrying")
            statements += self.queue.retry_statements(
                claim, retry_ids, ErrorClass.INFRA.value, not_before, attempt, resume_at)
            log.warning("transient target error %s; retry %d in %.1fs", reason_code, attempt,
                        delay)
        self._save_fenced(claim, job, statements)
        return len(done)

    def _result(self, event: ChangeEvent, outcome: TargetOutcome) -> FinalResult:
        result, reason = EventResult.REJECTED, outcome.reason_code
        conflict_id: str | None = None
        revision: str | None = None
        if outcome.kind in (TargetOutcomeKind.APPLIED, TargetOutcomeKind.ALREADY_APPLIED):
            result, reason = EventResult.APPLIED, ""
            revision = event.result_revision.text if event.result_revision else None
        elif outcome.kind is TargetOutcomeKind.CONFLICT:
            result, reason = EventResult.CONFLICT_RECORDED, "BASE_REVISION_MISMATCH"
            conflict_id = str(self._capture_conflict(event, outcome))
        return FinalResult(str(event.event_id), result, reason, conflict_id, revision,
                           event.source_position, rule_for(event), event.record.canonical(),
                           event.operation.value)

    def _allowed(self, event: ChangeEvent) -> bool:
        return self.settings.scope.allows(event.origin_node_id, event.database, event.table)

    def _not_authorized(self, event: ChangeEvent) -> FinalResult:
        return FinalResult(str(event.event_id), EventResult.REJECTED, NOT_AUTHORIZED,
                           position=event.source_position, rule_id=rule_for(event),
                           record_key=event.record.canonical(),
                           operation=event.operation.value)

    @staticmethod
    def _skipped(claimed: ClaimedEvent) -> FinalResult:
        return FinalResult(str(claimed.event_id), EventResult.REJECTED, SKIPPED_BY_OPERATOR,
                           position=claimed.position)

    def _malformed(self, item: UndecodableEvent) -> FinalResult:
        return FinalResult(str(item.claimed.event_id), EventResult.REJECTED,
                           str(item.error.reason), position=item.claimed.position)

    def _capture_conflict(self, event: ChangeEvent, outcome: TargetOutcome) -> uuid.UUID:
        """Create or reuse the one active ConflictCase of rule + record key; append evidence."""
        rule_id = rule_for(event)
        conflict_id, _ = capture_conflict(
            self.conflicts, self.queue, rule_id=rule_id,
            digest=record_key_digest(rule_id, event), database=event.database,
            table=event.table, rule_version=event.rule_version,
            current=outcome.current_revision, incoming=event.result_revision,
            evidence=conflict_evidence(event, outcome.current_row, outcome.current_revision),
            actor=ACTOR, reason="base revision mismatch")
        return conflict_id

    def _record_takeovers(self, claim: Claim) -> None:
        """Mark the job whose lease expired unfinished as taken over by this claim."""
        if claim.previous_job_id is None:
            return
        try:
            old = self.apply_jobs.get_job(claim.previous_job_id)
        except AggregateNotFoundError:
            return  # The old worker died before recording its claim.
        old.take_over(self.settings.worker_id, claim.lease_expires_at, str(claim.job_id),
                      ACTOR, "lease expired")
        self.apply_jobs.save(old)
        log.warning("took over apply job %s (lease expired)", claim.previous_job_id)


def _unexpected(error: Exception) -> str:
    """The reason code of an unexpected fault, logged by code and type only (never values)."""
    reason_code = error.reason_code if isinstance(error, TargetError) else "UNEXPECTED_ERROR"
    log.error("applying failed unexpectedly (%s, %s)", reason_code, type(error).__name__)
    return reason_code


def _unfinished(chunks: Sequence[Sequence[ClaimedEvent]],
                results: Sequence[FinalResult]) -> list[ClaimedEvent]:
    """The events of these chunks that have no terminal result yet."""
    finished = {result.event_id for result in results}
    return [e for chunk in chunks for e in chunk if str(e.event_id) not in finished]


def split_at_gap(events: Sequence[ClaimedEvent], next_sequence: int,
                 ) -> tuple[list[ClaimedEvent], list[ClaimedEvent], int]:
    """Events up to the first missing source_sequence, those after it, and the next expected
    sequence. Events without a sequence are not gap-checked (§10.4)."""
    expected = next_sequence
    for index, event in enumerate(events):
        sequence = event.sequence
        if sequence is None or sequence < expected:
            continue
        if sequence > expected:
            return list(events[:index]), list(events[index:]), expected
        expected += 1
    return list(events), [], expected
