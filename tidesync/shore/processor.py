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
from tidesync.domain.conflict_case import conflict_evidence, record_key_digest
from tidesync.domain.rules.release import ReleasedRules
from tidesync.shore.apply_chunks import plan_chunks
from tidesync.shore.gap_resend import GapResends
from tidesync.shore.lease_renewal import LeaseRenewal
from tidesync.shore.rule_scope import Admitted, NodeProfiles, Refused, RuleScope
from tidesync.shore.settings import ApplyConfig
from tidesync.shore.work_queue import (
    Claim,
    ClaimedEvent,
    LeaseLost,
    StoredBatches,
    UndecodableEvent,
    WorkQueue,
)
from tidesync.target.cas import FK_WAITING, ForeignKeyPending, WaitsForForeignKeys
from tidesync.target.contract import (
    CommitOutcomeUnknown,
    RejectReason,
    TargetApplier,
    TargetError,
    TargetOutcome,
    TargetOutcomeKind,
    TransientTargetError,
)

log = logging.getLogger(__name__)

ACTOR = system_actor("apply-processor")
GAP_RECHECK_SECONDS = 2.0
FK_RECHECK_MIN_SECONDS = 0.2
FK_RECHECK_CAP_SECONDS = 15.0
"""A partition waiting for a foreign key is tried again after half the time it has waited so
far, within these bounds (with jitter)."""

@dataclass
class ProcessorSettings:
    worker_id: str = field(default_factory=lambda: f"worker-{uuid.uuid4().hex[:8]}")
    max_events_per_job: int = 2000
    chunk_size: int = 500
    """Events per target transaction; a job applies several chunks, finalized together."""
    lease_seconds: float = 60.0
    backoff: Backoff = field(default_factory=Backoff)
    scope: ApplyConfig = field(default_factory=ApplyConfig)
    """Which tables each node may write (`[apply.node_tables]`, only while no rule is
    released) and the gap deadline."""


class ApplyProcessor:
    """One worker: `run_once()` claims a partition's next events and takes them to terminal."""

    def __init__(self, apply_jobs: ApplyJobsApplication, conflicts: ConflictCasesApplication,
                 queue: WorkQueue, applier: TargetApplier,
                 clock: Clock, settings: ProcessorSettings | None = None,
                 draw: Callable[[], float] = random.random,
                 resends: GapResends | None = None, *, rules: ReleasedRules | None = None,
                 profiles: NodeProfiles | None = None,
                 one_way: TargetApplier | None = None) -> None:
        self.apply_jobs = apply_jobs
        self.conflicts = conflicts
        self.queue = queue
        self.applier = applier
        self.clock = clock
        self.settings = settings or ProcessorSettings()
        self.draw = draw
        self.resends = resends
        """Where a gap stalled past its deadline asks the ship to resend (None: nowhere)."""
        self.scope = RuleScope(rules, profiles, self.settings.scope)
        """Which events may be written, under which rule and in which shape (§10.2)."""
        self.one_way = one_way
        """The applier by key of one-way (UPLINK) rules' tables; None: the compare-and-set
        applier takes them too (their tables then need the sync metadata)."""
        if self.settings.scope.fk_wait_seconds > 0 and isinstance(applier, WaitsForForeignKeys):
            # A broken foreign key may only mean the other row is late: wait, then retry.
            applier.wait_for_foreign_keys(True)

    def run_once(self) -> int:
        """Process one claim; returns how many events it took to a terminal result."""
        now = self.clock()
        claim = self.queue.claim(self.settings.worker_id, now, self.settings.lease_seconds,
                                 self.settings.max_events_per_job)
        if claim is None:
            return 0
        failpoints.hit("after_claim")
        try:
            with LeaseRenewal(self.queue, claim, self.settings.lease_seconds) as renewal:
                return self._run_claim(claim, renewal)
        except LeaseLost:
            # Paused or slow past the lease: another worker owns the partition now and
            # carries these events on; nothing of this claim was written after the loss.
            log.warning("apply job %s lost its lease; leaving its events to the new owner",
                        claim.job_id)
            return 0

    def _run_claim(self, claim: Claim, renewal: LeaseRenewal) -> int:
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
        return self._process(claim, job, batches, renewal)

    def _process(self, claim: Claim, job: ApplyJob, batches: StoredBatches,
                 renewal: LeaseRenewal) -> int:
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
        try:
            decoded = self._decode(ready, batches)
        except Exception as error:  # noqa: BLE001 (as a stored body that no longer parses)
            return self._retry_later(claim, job, ready, held_ids, [], _unexpected(error))
        plan = plan_chunks([_transaction_of(item) for item in decoded], self.settings.chunk_size,
                           tail_may_continue=not held and len(claim.events)
                           >= self.settings.max_events_per_job)
        if plan.applied_until < len(ready):
            # The claim ends inside a source transaction: the next claim takes it whole.
            later = ready[plan.applied_until:]
            job.release([str(e.event_id) for e in later], "TRANSACTION_CONTINUES", ACTOR,
                        "the claim ends inside a source transaction")
            ready = ready[:plan.applied_until]
            next_sequence = split_at_gap(ready, claim.next_sequence)[2]
        chunks = [(ready[start:end], decoded[start:end]) for start, end in plan.chunks]
        results: list[FinalResult] = []
        give_up = self._fk_wait_over(claim, now)
        index = 0
        while index < len(chunks):
            chunk, items = chunks[index]
            # A safe point, nothing of this chunk has reached the target yet: stop if a renewal
            # found the lease gone, else renew now too (the thread renews during the chunk).
            renewal.check()
            self.queue.renew(claim, self.settings.lease_seconds)
            pending = [chunk for chunk, _ in chunks[index:]]
            try:
                results += self._apply_chunk(job, chunk, items, give_up)
            except ForeignKeyPending as waiting:
                cut = _before_transaction_of(waiting.event_id, chunk, items)
                if cut > 0:
                    # What precedes the waiting event's transaction applies now, on its own.
                    chunks[index:index + 1] = [(chunk[:cut], items[:cut]),
                                               (chunk[cut:], items[cut:])]
                    continue
                return self._wait_for_parent(claim, job, _unfinished(pending, results),
                                             results, waiting)
            except (TransientTargetError, CommitOutcomeUnknown) as error:
                return self._retry_later(claim, job, _unfinished(pending, results),
                                         held_ids, results, error.reason_code)
            except Exception as error:  # noqa: BLE001
                # A fault no reason code names (a bug, a database error nobody mapped): the
                # chunk waits and retries like a transient one and ends DEAD, where an
                # operator can replay or skip it; it never takes the worker down.
                reason_code = _unexpected(error)
                return self._retry_later(claim, job, _unfinished(pending, results),
                                         held_ids, results, reason_code)
            index += 1
        statements = self._finalize(claim, job, results, now)
        if held:
            statements += self.queue.gap_statements(
                claim, next_sequence, now, now + dt.timedelta(seconds=GAP_RECHECK_SECONDS),
                held_ids if stalled else ())
        else:
            statements += self.queue.unlease_statements(claim, next_sequence=next_sequence)
        self._save_fenced(claim, job, statements)
        if stalled:
            self._ask_resend(claim, next_sequence)
        return len(results)

    def _decode(self, ready: Sequence[ClaimedEvent], batches: StoredBatches
                ) -> list[ChangeEvent | UndecodableEvent | None]:
        """The ready events decoded, in order; None for those an operator skipped."""
        items = iter(batches.decode([e for e in ready if not e.skip]))
        return [None if e.skip else next(items) for e in ready]

    def _fk_wait_over(self, claim: Claim, now: dt.datetime) -> bool:
        """Whether the partition has waited for a foreign key past `[apply] fk_wait_seconds`
        (fk_wait_since was written from the injected clock: both sides are that clock)."""
        since = claim.fk_wait_since
        deadline = dt.timedelta(seconds=self.settings.scope.fk_wait_seconds)
        return since is not None and now - since >= deadline

    def _wait_for_parent(self, claim: Claim, job: ApplyJob, pending: Sequence[ClaimedEvent],
                         done: list[FinalResult], waiting: ForeignKeyPending) -> int:
        """An event broke a foreign key, whose other row may still come: what this job
        finished is finalized; the rest waits (FK_WAITING) and is tried again, sooner at first,
        at most every FK_RECHECK_CAP_SECONDS, until the deadline. No attempt is counted, so the
        wait never ends DEAD."""
        now = self.clock()
        waited = (now - (claim.fk_wait_since or now)).total_seconds()
        delay = min(FK_RECHECK_CAP_SECONDS, max(FK_RECHECK_MIN_SECONDS, waited / 2))
        delay *= 0.5 + self.draw() / 2
        not_before = now + dt.timedelta(seconds=delay)
        retry_ids = [str(e.event_id) for e in pending]
        statements = self._finalize(claim, job, done, now)
        job.schedule_retry(retry_ids, ErrorClass.DATA.value, FK_WAITING, claim.attempts,
                           not_before, ACTOR, "waiting for a foreign key to resolve")
        statements += self.queue.fk_wait_statements(
            claim, retry_ids, now, not_before, pending[0].sequence if pending else None)
        log.warning("partition %s/%d of node %s waits for a foreign key of %s (event %s); "
                    "retrying in %.1fs, for up to %ds", claim.partition.topic,
                    claim.partition.partition, claim.partition.origin_node_id, waiting.table,
                    waiting.event_id, delay, self.settings.scope.fk_wait_seconds)
        self._save_fenced(claim, job, statements)
        return len(done)

    def _ask_resend(self, claim: Claim, missing_sequence: int) -> None:
        """Ask the ship for the events behind a stalled gap. Asked at every recheck while the
        gap stays stalled: the command's id makes that one command, and a failure here is
        simply asked again at the next recheck."""
        if self.resends is None:
            return
        try:
            self.resends.request(claim.partition, missing_sequence)
        except Exception as error:  # noqa: BLE001 (asked again at the next recheck)
            log.warning("asking node %s to resend partition %s/%d failed (%s); asking again"
                        " at the next recheck", claim.partition.origin_node_id,
                        claim.partition.topic, claim.partition.partition,
                        type(error).__name__)

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
                     items: Sequence[ChangeEvent | UndecodableEvent | None],
                     give_up: bool = False) -> list[FinalResult]:
        """One target transaction: the chunk's terminal results, skipped, undecodable and
        unauthorized events first (they never reach the target). `give_up`: the foreign key
        wait is over, an event that still breaks one ends REJECTED."""
        results = [self._skipped(e) for e in chunk if e.skip]
        results += [self._malformed(i) for i in items if isinstance(i, UndecodableEvent)]
        decided = self.scope.admit([item for item in items if isinstance(item, ChangeEvent)])
        results += [self._not_authorized(d) for d in decided if isinstance(d, Refused)]
        admitted = [d for d in decided if isinstance(d, Admitted)]
        outcomes = self._apply_or_give_up(admitted) if give_up else self._apply_admitted(admitted)
        failpoints.hit("after_target_commit")
        chunk_results = [self._result(item, outcome)
                         for item, outcome in zip(admitted, outcomes, strict=True)]
        applied = [r.event_id for r in chunk_results if r.result is EventResult.APPLIED]
        if applied:
            job.target_committed(applied, ACTOR, "target transaction committed")
        return results + chunk_results

    def _apply_or_give_up(self, admitted: Sequence[Admitted]) -> list[TargetOutcome]:
        """Apply, settling each event that still breaks a foreign key as REJECTED
        CONSTRAINT_VIOLATION (the wait is over) and applying the others without it."""
        given_up: dict[uuid.UUID, TargetOutcome] = {}
        while True:
            rest = [item for item in admitted if item.event.event_id not in given_up]
            try:
                outcomes = self._apply_admitted(rest)
            except ForeignKeyPending as waiting:
                if waiting.event_id in given_up or not any(
                        item.event.event_id == waiting.event_id for item in rest):
                    raise
                log.error("event %s still breaks a foreign key of %s after the wait; "
                          "rejected", waiting.event_id, waiting.table)
                given_up[waiting.event_id] = TargetOutcome(
                    waiting.event_id, TargetOutcomeKind.REJECTED,
                    RejectReason.CONSTRAINT_VIOLATION.value, waiting.detail)
                continue
            by_id = {item.event.event_id: outcome
                     for item, outcome in zip(rest, outcomes, strict=True)}
            by_id.update(given_up)
            return [by_id[item.event.event_id] for item in admitted]

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

    def _apply_admitted(self, admitted: Sequence[Admitted]) -> list[TargetOutcome]:
        """Outcomes in the events' order: one-way events through the applier by key, the
        others compare-and-set; each applier commits its share in one transaction (their
        tables differ, so no key's order spans both; a retry finds the ledgers)."""
        one_way = self.one_way
        by_key = [index for index, item in enumerate(admitted) if item.one_way] if one_way else []
        if not by_key:
            return self.applier.apply_chunk([item.event for item in admitted])
        assert one_way is not None
        keyed = set(by_key)
        others = [index for index in range(len(admitted)) if index not in keyed]
        outcomes: dict[int, TargetOutcome] = {}
        for applier, indexes in ((self.applier, others), (one_way, by_key)):
            if indexes:
                answers = applier.apply_chunk([admitted[index].event for index in indexes])
                outcomes.update(zip(indexes, answers, strict=True))
        return [outcomes[index] for index in range(len(admitted))]

    def _result(self, item: Admitted, outcome: TargetOutcome) -> FinalResult:
        event = item.event
        result, reason = EventResult.REJECTED, outcome.reason_code
        conflict_id: str | None = None
        revision: str | None = None
        if outcome.kind in (TargetOutcomeKind.APPLIED, TargetOutcomeKind.ALREADY_APPLIED):
            # A business trigger that changed the written row leaves its marker on the result.
            result, reason = EventResult.APPLIED, (
                outcome.reason_code if outcome.trigger_modified else "")
            revision = event.result_revision.text if event.result_revision else None
        elif outcome.kind is TargetOutcomeKind.CONFLICT:
            result, reason = EventResult.CONFLICT_RECORDED, "BASE_REVISION_MISMATCH"
            conflict_id = str(self._capture_conflict(event, outcome, item.rule_id))
        return FinalResult(str(event.event_id), result, reason, conflict_id, revision,
                           event.source_position, item.rule_id, event.record.canonical(),
                           event.operation.value)

    @staticmethod
    def _not_authorized(refused: Refused) -> FinalResult:
        """An event the scope refused (a rule, or `[apply.node_tables]` without rules)."""
        event = refused.event
        return FinalResult(str(event.event_id), EventResult.REJECTED, refused.reason_code,
                           position=event.source_position, rule_id=refused.rule_id,
                           record_key=event.record.canonical(),
                           operation=event.operation.value)

    @staticmethod
    def _skipped(claimed: ClaimedEvent) -> FinalResult:
        return FinalResult(str(claimed.event_id), EventResult.REJECTED, SKIPPED_BY_OPERATOR,
                           position=claimed.position)

    def _malformed(self, item: UndecodableEvent) -> FinalResult:
        return FinalResult(str(item.claimed.event_id), EventResult.REJECTED,
                           str(item.error.reason), position=item.claimed.position)

    def _capture_conflict(self, event: ChangeEvent, outcome: TargetOutcome,
                          rule_id: str) -> uuid.UUID:
        """Create or reuse the one active ConflictCase of rule + record key; append evidence.
        `rule_id` is the rule the scope authorized the event under."""
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


def _transaction_of(item: ChangeEvent | UndecodableEvent | None) -> str | None:
    return item.transaction_id if isinstance(item, ChangeEvent) else None


def _before_transaction_of(event_id: uuid.UUID, chunk: Sequence[ClaimedEvent],
                           items: Sequence[ChangeEvent | UndecodableEvent | None]) -> int:
    """How many of the chunk's events come before the source transaction of `event_id` (0
    when it is not in the chunk): they need not wait with it."""
    index = next((i for i, e in enumerate(chunk) if e.event_id == event_id), 0)
    transaction = _transaction_of(items[index]) if index else None
    while transaction is not None and index > 0 and (
            _transaction_of(items[index - 1]) == transaction):
        index -= 1
    return index


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
