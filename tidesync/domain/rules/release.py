"""Rule releases (§8.2): each version of a rule is a RuleRelease stream that moves from DRAFT to
ACTIVE and on to SUPERSEDED, every step with who, why and when; a RuleVersions stream per rule id
numbers the versions and keeps the order in which versions became active, for rollbacks.

Also the interfaces other parts of the shore use: `ReleasedRules` (what ships run and may name)
and `RuleActivationReports` (what each node says it runs).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from eventsourcing.domain import Aggregate, event

from tidesync.domain.column_kinds import ColumnType
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.rules.sync_rule import RuleError, SyncRule

RELEASE_NAMESPACE = uuid.UUID("5d2c7e91-0a4b-5f38-9c16-7b3e2a8d4f60")
ROLLED_BACK = "rolled back"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
MAX_REASON = 2000


class ReleaseStatus(enum.StrEnum):
    DRAFT = "DRAFT"
    VALIDATED = "VALIDATED"
    APPROVED = "APPROVED"
    DISTRIBUTING = "DISTRIBUTING"
    ACTIVE = "ACTIVE"
    SUPERSEDED = "SUPERSEDED"
    ROLLBACK_TARGET = "ROLLBACK_TARGET"


OFFERED_STATUSES = frozenset({ReleaseStatus.DISTRIBUTING, ReleaseStatus.ROLLBACK_TARGET,
                              ReleaseStatus.ACTIVE})
"""Versions ships are told to run (the newest of them, per rule)."""

RELEASED_STATUSES = OFFERED_STATUSES | {ReleaseStatus.SUPERSEDED}
"""Versions that were offered at some time: events may still name them."""

ROLLING_OUT = frozenset({ReleaseStatus.DISTRIBUTING, ReleaseStatus.ROLLBACK_TARGET})
"""Versions on their way to ACTIVE: at most one per rule."""


class ReleasedRules(Protocol):
    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        """Per rule id, the version ships should run now: the one in DISTRIBUTING,
        ROLLBACK_TARGET or ACTIVE (newest such), with its status."""

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        """A version that was ever offered (DISTRIBUTING, ACTIVE, SUPERSEDED, ROLLBACK_TARGET);
        None for unknown ids/versions and for versions never published."""

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str) -> None:
        """DISTRIBUTING/ROLLBACK_TARGET → ACTIVE; the previous ACTIVE version → SUPERSEDED."""


@dataclass(frozen=True, slots=True)
class NodeActivation:
    """What one node last reported about one rule: the version it runs, the one it was offered
    and how validating that went."""

    node_id: str
    active_version: int
    candidate_version: int
    validation: str
    problems: tuple[str, ...]
    reported_at: dt.datetime


class RuleActivationReports(Protocol):
    def activations(self, rule_id: str) -> list[NodeActivation]:
        """Every node's latest report about the rule, in node id order."""


class ReleaseRefused(TidesyncError):
    """A release command its state, its author or the rule's other versions do not allow."""

    code = ErrorCode.REFUSED

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def release_uuid(rule_id: str, version: int) -> uuid.UUID:
    """The stream of one version: drafting the same version twice collides on it."""
    return uuid.uuid5(RELEASE_NAMESPACE, f"release\x1f{rule_id}\x1f{version}")


def rule_versions_uuid(rule_id: str) -> uuid.UUID:
    return uuid.uuid5(RELEASE_NAMESPACE, f"versions\x1f{rule_id}")


def check_audit(actor: str, reason: str) -> None:
    """Every release event names who and why; refused text never reaches a stream."""
    if not actor.strip():
        raise ReleaseRefused(ErrorCode.INVALID_INPUT, "a release command needs an actor")
    if not reason.strip():
        raise ReleaseRefused(ErrorCode.REASON_REQUIRED, "a release command needs a reason")
    if len(reason) > MAX_REASON:
        raise ReleaseRefused(ErrorCode.INVALID_INPUT,
                             f"a reason has at most {MAX_REASON} characters")
    if _UNSTORABLE.search(actor + reason):
        raise ReleaseRefused(ErrorCode.UNSTORABLE_TEXT,
                             "an actor or reason may not hold NUL or lone surrogates")


@dataclass(frozen=True, slots=True)
class Transition:
    """One step of a release: the status it reached, who moved it, why and when."""

    status: ReleaseStatus
    actor: str
    reason: str
    at: dt.datetime


class RuleRelease(Aggregate):
    """One version of one rule on its way to the ships, with its content fixed at drafting."""

    @staticmethod
    def create_id(rule_id: str, rule_version: int, **_: object) -> uuid.UUID:
        return release_uuid(rule_id, rule_version)

    @classmethod
    def draft(cls, rule: SyncRule, at: dt.datetime, actor: str, reason: str,
              trace_id: str = "") -> RuleRelease:
        """A new DRAFT of `rule` (its version already assigned); refused while the rule has
        static problems."""
        check_audit(actor, reason)
        if rule.version < 1:
            raise ReleaseRefused(ErrorCode.INVALID_INPUT, "a release needs a version from 1")
        problems = rule.problems()
        if problems:
            raise RuleError(f"rule {rule.rule_id} is not valid: " + "; ".join(problems))
        return cls(rule_id=rule.rule_id, rule_version=rule.version,
                   content=rule.canonical().decode(), checksum=rule.checksum().hex(), at=at,
                   actor=actor, reason=reason, trace_id=trace_id)

    @event("Drafted")
    def __init__(self, rule_id: str, rule_version: int, content: str, checksum: str,
                 at: dt.datetime, actor: str, reason: str, trace_id: str = "") -> None:
        # `version` is the stream's own (the number of events); the rule's is `rule_version`.
        self.rule_id = rule_id
        self.rule_version = rule_version
        self.content = content
        self.checksum = checksum
        self.author = actor
        self.status = ReleaseStatus.DRAFT
        self.problems: list[str] = []
        self.was_active = False
        self.transitions = [Transition(ReleaseStatus.DRAFT, actor, reason, at)]

    @property
    def rule(self) -> SyncRule:
        # Parsed on each use: a cached copy would become part of the audited state.
        return SyncRule.from_json(self.content.encode())

    @property
    def name(self) -> str:
        return f"{self.rule_id}@{self.rule_version}"

    @property
    def changed_at(self) -> dt.datetime:
        return self.transitions[-1].at

    # ------------------------------------------------------------------ commands

    def validate(self, problems: Sequence[str], at: dt.datetime, actor: str, reason: str,
                 trace_id: str = "") -> None:
        """Record a validation: none of `problems` → VALIDATED, else it stays DRAFT with them."""
        self._require({ReleaseStatus.DRAFT}, "validated")
        check_audit(actor, reason)
        if problems:
            self._validation_failed(list(problems), at, actor, reason, trace_id)
        else:
            self._validated(at, actor, reason, trace_id)

    def approve(self, at: dt.datetime, actor: str, reason: str, four_eyes: bool,
                trace_id: str = "") -> None:
        """VALIDATED → APPROVED; with four eyes, only by someone other than the author."""
        self._require({ReleaseStatus.VALIDATED}, "approved")
        check_audit(actor, reason)
        if four_eyes and actor == self.author:
            raise ReleaseRefused(ErrorCode.FOUR_EYES,
                                 f"{self.name} was drafted by {actor}: four-eyes approval needs"
                                 " someone else to approve it")
        self._approved(at, actor, reason, trace_id)

    def publish(self, at: dt.datetime, actor: str, reason: str, trace_id: str = "") -> None:
        """APPROVED → DISTRIBUTING: ships are offered this version."""
        self._require({ReleaseStatus.APPROVED}, "published")
        check_audit(actor, reason)
        self._published(at, actor, reason, trace_id)

    def activate(self, at: dt.datetime, actor: str, reason: str, trace_id: str = "") -> None:
        """DISTRIBUTING or ROLLBACK_TARGET → ACTIVE: every selected node runs it."""
        self._require(ROLLING_OUT, "activated")
        check_audit(actor, reason)
        self._activated(at, actor, reason, trace_id)

    def supersede(self, by_version: int | None, at: dt.datetime, actor: str, reason: str,
                  trace_id: str = "") -> None:
        """An offered version → SUPERSEDED: a newer one became active, or a rollback left it."""
        self._require(OFFERED_STATUSES, "superseded")
        check_audit(actor, reason)
        self._superseded(by_version, at, actor, reason, trace_id)

    def choose_for_rollback(self, at: dt.datetime, actor: str, reason: str,
                            trace_id: str = "") -> None:
        """A version that was ACTIVE → ROLLBACK_TARGET: ships are offered it again."""
        if not self.was_active or self.status not in (ReleaseStatus.ACTIVE,
                                                      ReleaseStatus.SUPERSEDED):
            raise ReleaseRefused(ErrorCode.RELEASE_STATE,
                                 f"{self.name} is {self.status} and "
                                 f"{'was' if self.was_active else 'never was'} active: only a"
                                 " version that was active can be rolled back to")
        check_audit(actor, reason)
        self._chosen_for_rollback(at, actor, reason, trace_id)

    def _require(self, statuses: frozenset[ReleaseStatus] | set[ReleaseStatus],
                 what: str) -> None:
        if self.status not in statuses:
            allowed = " or ".join(sorted(statuses))
            raise ReleaseRefused(ErrorCode.RELEASE_STATE,
                                 f"{self.name} is {self.status}: only a {allowed} release can"
                                 f" be {what}")

    # ------------------------------------------------------------------ events

    def _moved(self, status: ReleaseStatus, actor: str, reason: str, at: dt.datetime) -> None:
        self.status = status
        self.transitions = [*self.transitions, Transition(status, actor, reason, at)]

    @event("ValidationFailed")
    def _validation_failed(self, problems: list[str], at: dt.datetime, actor: str, reason: str,
                           trace_id: str) -> None:
        self.problems = list(problems)
        self._moved(ReleaseStatus.DRAFT, actor, reason, at)

    @event("Validated")
    def _validated(self, at: dt.datetime, actor: str, reason: str, trace_id: str) -> None:
        self.problems = []
        self._moved(ReleaseStatus.VALIDATED, actor, reason, at)

    @event("Approved")
    def _approved(self, at: dt.datetime, actor: str, reason: str, trace_id: str) -> None:
        self._moved(ReleaseStatus.APPROVED, actor, reason, at)

    @event("Published")
    def _published(self, at: dt.datetime, actor: str, reason: str, trace_id: str) -> None:
        self._moved(ReleaseStatus.DISTRIBUTING, actor, reason, at)

    @event("Activated")
    def _activated(self, at: dt.datetime, actor: str, reason: str, trace_id: str) -> None:
        self.was_active = True
        self._moved(ReleaseStatus.ACTIVE, actor, reason, at)

    @event("Superseded")
    def _superseded(self, by_version: int | None, at: dt.datetime, actor: str, reason: str,
                    trace_id: str) -> None:
        self._moved(ReleaseStatus.SUPERSEDED, actor, reason, at)

    @event("ChosenForRollback")
    def _chosen_for_rollback(self, at: dt.datetime, actor: str, reason: str,
                             trace_id: str) -> None:
        self._moved(ReleaseStatus.ROLLBACK_TARGET, actor, reason, at)


class RuleVersions(Aggregate):
    """The versions of one rule id: how many were drafted, and the versions that became active,
    oldest first, without those rolled back (the top is what a rollback returns from).

    Every command that looks at more than one version also records an event here, so two such
    commands on the same rule cannot both succeed on a stale view.
    """

    @staticmethod
    def create_id(rule_id: str, **_: object) -> uuid.UUID:
        return rule_versions_uuid(rule_id)

    @event("Started")
    def __init__(self, rule_id: str, at: dt.datetime, actor: str, reason: str,
                 trace_id: str = "") -> None:
        self.rule_id = rule_id
        self.latest = 0
        self.active_line: list[int] = []

    def rollback_target(self, offered_version: int) -> int | None:
        """The version a rollback from `offered_version` returns to (None: none was active
        before it)."""
        line = self.active_line
        if line and line[-1] == offered_version:
            line = line[:-1]
        return line[-1] if line else None

    @event("VersionDrafted")
    def drafted(self, version: int, at: dt.datetime, actor: str, reason: str,
                trace_id: str = "") -> None:
        self.latest = version

    @event("VersionPublished")
    def published(self, version: int, at: dt.datetime, actor: str, reason: str,
                  trace_id: str = "") -> None:
        pass

    @event("VersionActivated")
    def activated(self, version: int, at: dt.datetime, actor: str, reason: str,
                  trace_id: str = "") -> None:
        if not self.active_line or self.active_line[-1] != version:
            self.active_line = [*self.active_line, version]

    @event("RolledBack")
    def rolled_back(self, from_version: int, to_version: int | None, at: dt.datetime,
                    actor: str, reason: str, trace_id: str = "") -> None:
        if self.active_line and self.active_line[-1] == from_version:
            self.active_line = self.active_line[:-1]


def shore_schema_problems(rule: SyncRule, columns: Mapping[str, ColumnType] | None,
                          primary_key: Sequence[str] = ()) -> list[str]:
    """What does not fit the shore's table (the rule's target) with these columns.

    The shore holds the synced columns under their target names (the rename map applied) and
    never the excluded or sensitive ones, and the row filter and transforms run on the ship:
    so the shore's columns are named back to source names and checked against the rule
    without those parts.
    """
    database, table = rule.target
    back = {target.lower(): source for source, target in rule.rename.items()}
    renamed_away = {source.lower() for source in rule.rename} - set(back)
    source_columns = {back.get(name.lower(), name): kind for name, kind in (columns or {}).items()
                      if name.lower() not in renamed_away}
    source_key = [back.get(name.lower(), name) for name in primary_key]
    shore_view = dataclasses.replace(
        rule, source_database=database, source_table=table, exclude_columns=(),
        sensitive_columns=(), row_filter="",
        transforms=())
    return shore_view.schema_problems(None if columns is None else source_columns, source_key)
