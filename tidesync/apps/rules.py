"""Rule releases (§8.2): the `rule_releases` application. Draft a rule as its next version,
validate, approve, publish, roll back, mark active; what ships are offered and may name.

Each version is a RuleRelease stream; a RuleVersions stream per rule id numbers them and records
every command that looks at more than one version, so such commands on one rule serialise.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import tomllib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError
from eventsourcing.utils import EnvType

from tidesync.apps.recorder import created_ids
from tidesync.apps.settings import FOUR_EYES_ENV
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.column_kinds import ColumnType
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.rules.release import (
    OFFERED_STATUSES,
    RELEASED_STATUSES,
    ROLLED_BACK,
    ROLLING_OUT,
    ReleaseRefused,
    ReleaseStatus,
    RuleRelease,
    RuleVersions,
    Transition,
    check_audit,
    release_uuid,
    rule_versions_uuid,
    shore_schema_problems,
)
from tidesync.domain.rules.sync_rule import RuleError, SyncRule

TableSchema = tuple[Mapping[str, ColumnType] | None, Sequence[str]]
SchemaLookup = Callable[[str, str], TableSchema]
"""(database, table) → the table's columns (None: no such table) and primary key."""

_TRUE = frozenset({"true", "1", "yes", "on"})
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
MAX_DOCUMENT_BYTES = 64 * 1024


class ReleaseNotFound(TidesyncError, LookupError):
    code = ErrorCode.NOT_FOUND


class ReleaseChanged(TidesyncError):
    """Another command changed the same rule meanwhile; the command can be tried again."""

    code = ErrorCode.CHANGED_MEANWHILE


@dataclass(frozen=True)
class RuleSummary:
    """One rule id: its newest version and status, and the version ships are offered."""

    rule_id: str
    latest_version: int
    latest_status: ReleaseStatus
    offered_version: int | None
    offered_status: ReleaseStatus | None
    changed_at: dt.datetime


def rule_from_toml(text: str) -> SyncRule:
    """A rule from its TOML file's text (at most MAX_DOCUMENT_BYTES of UTF-8)."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise RuleError(f"a rule file has at most {MAX_DOCUMENT_BYTES // 1024} KiB")
    if _UNSTORABLE.search(text):
        raise RuleError("a rule file may not hold NUL characters or lone surrogates")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RuleError(f"not valid TOML: {error}") from None
    return SyncRule.from_document(document)


def parse_release_ref(text: str) -> tuple[str, int | None]:
    """`ID` or `ID@VERSION` (VERSION a positive integer)."""
    rule_id, at, version = text.partition("@")
    if not rule_id or (at and not (version.isdigit() and int(version) >= 1)):
        raise RuleError(f"{text[:80]!r} is not RULE or RULE@VERSION (a version from 1)")
    return rule_id, int(version) if at else None



class RuleReleasesApplication(Application[uuid.UUID]):
    """The RuleRelease and RuleVersions streams, in their own events table. `[rules]`
    settings arrive in the environment (`RulesSettings.env()`)."""

    name = "rule_releases"

    def __init__(self, env: EnvType | None = None, clock: Clock = utc_now) -> None:
        super().__init__(env)
        self.clock = clock
        self._lock = threading.Lock()
        self._offered: tuple[int, list[tuple[SyncRule, ReleaseStatus]]] | None = None
        self._released: dict[tuple[str, int], SyncRule] = {}

    @property
    def four_eyes(self) -> bool:
        # The environment is named after the application: FOUR_EYES_ENV without its prefix.
        key = FOUR_EYES_ENV.removeprefix(self.name.upper() + "_")
        return (self.env.get(key) or "false").strip().lower() in _TRUE

    # ------------------------------------------------------------------ reading

    def rule_ids(self) -> list[str]:
        """Every rule id ever drafted, sorted."""
        ids = created_ids(self, RuleVersions.Started)  # type: ignore[attr-defined]
        return sorted(self._versions_by_id(aggregate_id).rule_id for aggregate_id in ids)

    def versions(self, rule_id: str) -> RuleVersions:
        return self._versions_by_id(rule_versions_uuid(rule_id), rule_id)

    def _versions_by_id(self, aggregate_id: uuid.UUID, rule_id: str = "") -> RuleVersions:
        try:
            versions: RuleVersions = self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            raise ReleaseNotFound(f"no rule {rule_id[:80]!r} has been drafted") from None
        return versions

    def release(self, rule_id: str, version: int) -> RuleRelease:
        try:
            release: RuleRelease = self.repository.get(release_uuid(rule_id, version))
        except AggregateNotFoundError:
            raise ReleaseNotFound(f"rule {rule_id[:80]!r} has no version {version}") from None
        return release

    def releases(self, rule_id: str) -> list[RuleRelease]:
        """Every version of the rule, oldest first."""
        latest = self.versions(rule_id).latest
        return [self.release(rule_id, version) for version in range(1, latest + 1)]

    def history(self, rule_id: str, version: int) -> list[Transition]:
        return list(self.release(rule_id, version).transitions)

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        """Per rule id, the version ships should run now (the newest offered one)."""
        position = self.recorder.max_notification_id() or 0
        with self._lock:
            if self._offered is not None and self._offered[0] == position:
                return list(self._offered[1])
        found = [(release.rule, release.status) for rule_id in self.rule_ids()
                 if (release := _offered_release(self.releases(rule_id))) is not None]
        with self._lock:
            self._offered = (position, found)
        return list(found)

    def released(self, rule_id: str, version: int) -> SyncRule | None:
        """A version that was ever offered, else None (content never changes: cached)."""
        with self._lock:
            cached = self._released.get((rule_id, version))
        if cached is not None:
            return cached
        try:
            release = self.release(rule_id, version)
        except ReleaseNotFound:
            return None
        if release.status not in RELEASED_STATUSES:
            return None
        with self._lock:
            self._released[(rule_id, version)] = release.rule
        return release.rule

    # ------------------------------------------------------------------ commands

    def draft(self, rule: SyncRule, actor: str, reason: str, trace_id: str = "") -> SyncRule:
        """Store `rule` as the next version of its id, DRAFT; returns it with that version."""
        check_audit(actor, reason)
        problems = rule.problems()
        if problems:
            raise RuleError(f"rule {rule.rule_id[:80]} is not valid: " + "; ".join(problems))
        at = self.clock()
        try:
            versions = self.versions(rule.rule_id)
        except ReleaseNotFound:
            versions = RuleVersions(rule_id=rule.rule_id, at=at, actor=actor, reason=reason,
                                    trace_id=trace_id)
        # Transforms are pinned to today's implementations: a later change of one fails
        # validation on every ship instead of silently changing what it writes.
        numbered = rule.pinned().with_version(versions.latest + 1)
        release = RuleRelease.draft(numbered, at, actor, reason, trace_id)
        versions.drafted(numbered.version, at, actor, reason, trace_id)
        self._save(versions, release)
        return numbered

    def validate(self, rule_id: str, version: int, actor: str, reason: str,
                 schema: SchemaLookup | None = None, trace_id: str = "") -> list[str]:
        """Check the version (statically, and against the shore's table when `schema` is
        given); no problems → VALIDATED, else it stays DRAFT. Returns the problems."""
        release = self.release(rule_id, version)
        rule = release.rule
        problems = rule.problems()
        if schema is not None:
            columns, primary_key = schema(*rule.target)
            problems += shore_schema_problems(rule, columns, primary_key)
        release.validate(problems, self.clock(), actor, reason, trace_id)
        self._save(release)
        return problems

    def approve(self, rule_id: str, version: int, actor: str, reason: str,
                trace_id: str = "") -> None:
        release = self.release(rule_id, version)
        release.approve(self.clock(), actor, reason, self.four_eyes, trace_id)
        self._save(release)

    def publish(self, rule_id: str, version: int, actor: str, reason: str,
                trace_id: str = "") -> None:
        """APPROVED → DISTRIBUTING; refused while another version of the rule rolls out, or
        when a newer version is already offered."""
        versions, releases = self.versions(rule_id), self.releases(rule_id)
        release = _version(releases, rule_id, version)
        at = self.clock()
        release.publish(at, actor, reason, trace_id)
        rolling = [other for other in releases
                   if other is not release and other.status in ROLLING_OUT]
        if rolling:
            raise ReleaseRefused(ErrorCode.ROLLOUT_IN_PROGRESS,
                                 f"{rolling[0].name} is {rolling[0].status}: wait until it is"
                                 f" active, or roll it back, before publishing {release.name}")
        newer = [other for other in releases
                 if other.status in OFFERED_STATUSES and other.rule_version > version]
        if newer:
            raise ReleaseRefused(ErrorCode.RELEASE_OUTDATED,
                                 f"{newer[0].name} is already {newer[0].status}: draft a new"
                                 f" version instead of publishing {release.name}")
        versions.published(version, at, actor, reason, trace_id)
        self._save(versions, release)

    def mark_active(self, rule_id: str, version: int, actor: str, reason: str,
                    trace_id: str = "") -> None:
        """DISTRIBUTING/ROLLBACK_TARGET → ACTIVE, the previous ACTIVE version → SUPERSEDED.
        Marking an ACTIVE version again changes nothing."""
        versions, releases = self.versions(rule_id), self.releases(rule_id)
        release = _version(releases, rule_id, version)
        if release.status is ReleaseStatus.ACTIVE:
            return
        at = self.clock()
        release.activate(at, actor, reason, trace_id)
        previous = [other for other in releases
                    if other is not release and other.status is ReleaseStatus.ACTIVE]
        for other in previous:
            other.supersede(version, at, actor, f"version {version} became active", trace_id)
        versions.activated(version, at, actor, reason, trace_id)
        self._save(versions, release, *previous)

    def rollback(self, rule_id: str, actor: str, reason: str,
                 trace_id: str = "") -> tuple[int, int | None]:
        """The offered version → SUPERSEDED ("rolled back"); the version active before it →
        ROLLBACK_TARGET, offered again until every node runs it. Returns (from, to); `to` is
        None when no version was active before (the rule is then offered to no ship)."""
        check_audit(actor, reason)
        versions, releases = self.versions(rule_id), self.releases(rule_id)
        offered = _offered_release(releases)
        if offered is None:
            raise ReleaseRefused(ErrorCode.NOTHING_TO_ROLL_BACK,
                                 f"no version of rule {rule_id} is offered to ships")
        to_version = versions.rollback_target(offered.rule_version)
        at = self.clock()
        offered.supersede(to_version, at, actor, ROLLED_BACK, trace_id)
        changed = [offered]
        if to_version is not None:
            target = _version(releases, rule_id, to_version)
            target.choose_for_rollback(at, actor, reason, trace_id)
            changed.append(target)
        versions.rolled_back(offered.rule_version, to_version, at, actor, reason, trace_id)
        self._save(versions, *changed)
        return offered.rule_version, to_version

    def _save(self, *aggregates: Aggregate) -> None:
        try:
            self.save(*aggregates)
        except IntegrityError:
            raise ReleaseChanged("another command changed this rule meanwhile; try again"
                                 ) from None

    # Last in the class: below it, `list` would name this method in annotations.
    def list(self) -> list[RuleSummary]:
        """Every rule id with its newest version and the version ships are offered."""
        return [_summary(self.releases(rule_id)) for rule_id in self.rule_ids()]


def _version(releases: Sequence[RuleRelease], rule_id: str, version: int) -> RuleRelease:
    if not 1 <= version <= len(releases):
        raise ReleaseNotFound(f"rule {rule_id[:80]!r} has no version {version}")
    return releases[version - 1]


def _offered_release(releases: Sequence[RuleRelease]) -> RuleRelease | None:
    offered = [release for release in releases if release.status in OFFERED_STATUSES]
    return offered[-1] if offered else None


def _summary(releases: Sequence[RuleRelease]) -> RuleSummary:
    latest, offered = releases[-1], _offered_release(releases)
    return RuleSummary(
        rule_id=latest.rule_id, latest_version=latest.rule_version, latest_status=latest.status,
        offered_version=None if offered is None else offered.rule_version,
        offered_status=None if offered is None else offered.status,
        changed_at=max(release.changed_at for release in releases))
