"""The ship's sync rules (§8.2, §8.3, §19): fetched from the shore, checked against this ship's
own tables, switched at a recorded queue position, applied to every event before it is stored
or sent, and reported in heartbeats.

A rule version that fails its checks never runs: the last good version of that rule stays
active and the failure is reported. The mask key of `hmac_mask` is this installation's secret
file, created (0600) when a rule first needs it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import itertools
import json
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.change_event import ChangeEvent, Operation
from tidesync.domain.column_kinds import ColumnType
from tidesync.domain.errors import ErrorCode, TidesyncError, Unavailable
from tidesync.domain.rules.runtime import RuleSet, ShapeOutcome, covering_conflicts
from tidesync.domain.rules.schedule import ScheduleError, TransferSchedule
from tidesync.domain.rules.sync_rule import (
    Direction,
    PriorityClass,
    RuleError,
    SnapshotWhen,
    SyncRule,
)
from tidesync.domain.rules.transforms import TransformContext
from tidesync.ship.send_schedule import ScheduledRule
from tidesync.ship.state.rules import SQLiteRules, StoredGeneration, StoredSnapshot
from tidesync.ship.state.watermarks import Watermark
from tidesync.target.contract import LEDGER_TABLE
from tidesync.target.one_way import KEY_POSITION_TABLE
from tidesync.wire import sync_pb2 as pb

log = logging.getLogger(__name__)

MAX_OFFERED_RULES = 1000
MAX_RULE_CONTENT = 256 * 1024
MAX_CONFIG_VERSION = 200
MAX_PROBLEMS = 20
MAX_PROBLEM_TEXT = 300
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Activated = Callable[[Sequence[SyncRule], dt.datetime], None]
"""Told, after each offered config is applied, the active rules that ask for a snapshot on
activation (`snapshot = "on_activation"`); it asks once per rule version (idempotent)."""


class SchemaUnavailable(Unavailable):
    """The ship's own database could not be inspected: validation waits for it."""


class MaskKeyError(TidesyncError):
    """The mask key file cannot be read or created."""

    code = ErrorCode.CONFIG_INVALID


@dataclass(frozen=True, slots=True)
class TableColumns:
    """A table of the ship's database as rule checks need it."""

    columns: Mapping[str, ColumnType]
    primary_key: tuple[str, ...]


class SchemaSource(Protocol):
    """The ship's business database, read for rule validation only."""

    def table(self, database: str, table: str) -> TableColumns | None:
        """The table's columns and primary key; None when it does not exist. Raises
        SchemaUnavailable when the database cannot be reached."""
        ...


# ----------------------------------------------------------------------------- the mask key


class MaskKeyFile:
    """The installation's HMAC key for `hmac_mask`: 32 random bytes as hex text in a file that
    only its owner may read. Ships that must produce equal masks share one copied file."""

    def __init__(self, path: Path) -> None:
        self.path = path.absolute()
        self._key: bytes | None = None

    def key(self) -> bytes:
        if self._key is None:
            self._key = self._read() if self.path.exists() else self._create()
        return self._key

    def _read(self) -> bytes:
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise MaskKeyError(f"cannot read the mask key file {self.path}: "
                               f"{type(error).__name__}") from None
        if len(text) < 32:
            raise MaskKeyError(f"the mask key file {self.path} holds fewer than 32 characters")
        if self.path.stat().st_mode & 0o077:
            log.warning("the mask key file %s is readable by others than its owner", self.path)
        return text.encode("ascii")

    def _create(self) -> bytes:
        text = secrets.token_hex(32)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="ascii") as file:
                file.write(text + "\n")
                file.flush()
                os.fsync(file.fileno())
        except FileExistsError:
            return self._read()
        except OSError as error:
            raise MaskKeyError(f"cannot create the mask key file {self.path}: "
                               f"{type(error).__name__}") from None
        log.info("created the mask key file %s", self.path)
        return text.encode("ascii")


# ----------------------------------------------------------------------------- checks


@dataclass(frozen=True, slots=True)
class CheckedRule:
    """One offered snapshot and what checking it here found (`rule` None: unreadable)."""

    snapshot: StoredSnapshot
    rule: SyncRule | None

    @property
    def valid(self) -> bool:
        return self.snapshot.valid


def check_snapshot(snapshot: pb.RuleSnapshot, schema: SchemaSource | None,
                   clock_text: str = "") -> CheckedRule:
    """Checksum, content, id and version, then the rule's own checks and those against this
    ship's table (statically only without a schema source). Raises SchemaUnavailable."""
    rule, problems = _read_snapshot(snapshot)
    if rule is not None:
        problems += rule.problems()
        if rule.direction is Direction.DOWNLINK and rule.transforms:
            problems.append("transforms: a DOWNLINK rule's values come from the shore as they "
                            "are; its transforms would never be applied")
        if schema is not None:
            table = schema.table(*rule.source)
            problems += (rule.schema_problems(None) if table is None else
                         rule.schema_problems(table.columns, table.primary_key))
            if table is not None and rule.direction is Direction.DOWNLINK:
                problems += _by_key_problems(rule, table, schema)
    stored = StoredSnapshot(
        snapshot.rule_id[:100], snapshot.version, pb.RuleStatus.Name(snapshot.status)
        if snapshot.status in pb.RuleStatus.values() else "RULE_STATUS_UNSPECIFIED",
        bytes(snapshot.content[:MAX_RULE_CONTENT]), bytes(snapshot.checksum[:64]),
        not problems, _bounded(problems), False, "", clock_text)
    return CheckedRule(stored, rule if not problems else None)


def _by_key_problems(rule: SyncRule, table: TableColumns, schema: SchemaSource) -> list[str]:
    """A DOWNLINK-only rule's table is written by key: it needs the ledger and the key-position
    table beside it, and its primary key must be the rule's key."""
    database, name = rule.source
    problems: list[str] = []
    if not table.primary_key:
        problems.append(f"key: {database}.{name} has no primary key; shore changes are "
                        "applied by primary key")
    elif rule.key_columns and ({column.lower() for column in rule.key_columns}
                               != {column.lower() for column in table.primary_key}):
        problems.append(f"key: {database}.{name}'s primary key is "
                        f"{', '.join(table.primary_key)}; shore changes are applied by it")
    missing = [support for support in (LEDGER_TABLE, KEY_POSITION_TABLE)
               if schema.table(database, support) is None]
    if missing:
        problems.append(f"table {database}.{name} is not prepared for shore changes by key "
                        f"(no {', '.join(missing)}): run `tidesync target enable "
                        f"{database}.{name} --direction DOWNLINK`")
    return problems


def _read_snapshot(snapshot: pb.RuleSnapshot) -> tuple[SyncRule | None, list[str]]:
    if len(snapshot.content) > MAX_RULE_CONTENT:
        return None, [f"content: larger than {MAX_RULE_CONTENT} bytes"]
    digest = hashlib.sha256(snapshot.content).digest()
    if not hmac.compare_digest(digest, snapshot.checksum):
        return None, ["checksum: does not match the content"]
    try:
        rule = SyncRule.from_json(snapshot.content)
    except RuleError as error:
        return None, [f"content: {error}"]
    if (rule.rule_id, rule.version) != (snapshot.rule_id, snapshot.version):
        return None, ["content: its id or version differs from the snapshot's"]
    return rule, []


def _bounded(problems: Sequence[str]) -> tuple[str, ...]:
    return tuple(problem[:MAX_PROBLEM_TEXT] for problem in problems[:MAX_PROBLEMS])


# ----------------------------------------------------------------------------- generations


@dataclass(frozen=True)
class Generation:
    """A rule set and where, per partition, it took effect."""

    number: int
    rules: RuleSet
    from_offsets: Mapping[PartitionKey, int]
    switched_at: str
    config_version: str

    def covers(self, key: PartitionKey, offset: int) -> bool:
        return offset >= self.from_offsets.get(key, 0)


def _generation(stored: StoredGeneration) -> Generation:
    rules = RuleSet((SyncRule.from_json(content) for content in stored.contents), explicit=True)
    return Generation(stored.generation, rules, stored.from_offsets, stored.switched_at,
                      stored.config_version)


IMPLICIT = Generation(0, RuleSet(), {}, "", "")
"""Before the first switch: every table its own rule, events unchanged."""


def prunable(generations: Sequence[Generation],
             watermarks: Iterable[Watermark]) -> list[int]:
    """Generations no record can be read under again: for each partition the one after it
    starts at or below where a restart resumes (terminal + 1). The newest always stays."""
    resume = {wm.key: wm.commit_offset for wm in watermarks}
    done: list[int] = []
    for older, newer in itertools.pairwise(generations):
        if all(resume.get(key, -1) >= offset for key, offset in newer.from_offsets.items()):
            done.append(older.number)
        else:
            break
    return done


# ----------------------------------------------------------------------------- the ship's rules


@dataclass(frozen=True, slots=True)
class ConfigApplied:
    """What applying one offered config did."""

    config_version: str
    offered: int
    failed: int
    switched: Generation | None


class ShipRules:
    """The rule generations of this ship and the offered config's checks.

    `shape` picks, for a record's partition and offset, the generation in force when it was
    first read; `apply_config` checks an offered config and switches when the active set
    changes."""

    def __init__(self, store: SQLiteRules, schema: SchemaSource | None,
                 mask_key: MaskKeyFile, activated: Activated | None = None) -> None:
        self.store, self.schema, self.mask_key = store, schema, mask_key
        self.activated = activated
        self._told_no_capture = False
        self.generations = [_generation(stored) for stored in store.generations()]
        self.config_version = store.config_version()
        self.offered = store.offered()
        self._contexts: dict[int, TransformContext] = {}
        self._priorities: dict[str, PriorityClass] = {}
        self._schedules: dict[str, tuple[ScheduledRule, ScheduledRule]] = {}
        self._priorities_of: tuple[int, int] | None = None
        for generation in self.generations:
            self._context(generation)  # a missing mask key fails at start, not mid-poll

    @property
    def current(self) -> Generation:
        return self.generations[-1] if self.generations else IMPLICIT

    def generation_at(self, key: PartitionKey, offset: int) -> Generation:
        for generation in reversed(self.generations):
            if generation.covers(key, offset):
                return generation
        return IMPLICIT

    def shape(self, key: PartitionKey, offset: int, event: ChangeEvent) -> ShapeOutcome:
        generation = self.generation_at(key, offset)
        return generation.rules.shape(event, self._context(generation))

    def priority_of(self, event: ChangeEvent) -> PriorityClass:
        """The class an event is sent in (§13.2): BULK for snapshot rows, else its rule's
        `priority` as the newest generation holding the rule has it; NORMAL without a rule."""
        if event.operation is Operation.SNAPSHOT:
            return PriorityClass.BULK
        self._look_up_rules()
        return self._priorities.get(event.rule_id or "", PriorityClass.NORMAL)

    def schedule_of(self, event: ChangeEvent) -> ScheduledRule | None:
        """The schedule of the event's rule (§13.3) as the newest generation holding the rule
        has it, with the class the event is sent in; None when the rule has none."""
        self._look_up_rules()
        scheduled = self._schedules.get(event.rule_id or "")
        if scheduled is None:
            return None
        return scheduled[1] if event.operation is Operation.SNAPSHOT else scheduled[0]

    def _look_up_rules(self) -> None:
        generations = self.generations
        marker = (len(generations), generations[-1].number if generations else 0)
        if marker == self._priorities_of:  # no switch or prune since the last look-up
            return
        rules = {rule.rule_id: rule for generation in generations
                 for rule in generation.rules.rules}
        self._priorities = {rule_id: rule.priority for rule_id, rule in rules.items()}
        self._schedules = {}
        for rule_id, rule in rules.items():
            if not rule.schedule.strip():
                continue
            try:  # checked when the rule was accepted; an older ship's rows may predate that
                schedule = TransferSchedule.parse(rule.schedule)
            except ScheduleError as error:
                log.warning("rule %s: its schedule cannot be read (%s): it is not held", rule_id,
                            error)
                continue
            self._schedules[rule_id] = (ScheduledRule(rule_id, schedule, rule.priority),
                                        ScheduledRule(rule_id, schedule, PriorityClass.BULK))
        self._priorities_of = marker

    def _context(self, generation: Generation) -> TransformContext:
        context = self._contexts.get(generation.number)
        if context is None:
            key = self.mask_key.key() if generation.rules.uses_mask_key() else b""
            context = self._contexts[generation.number] = TransformContext(mask_key=key)
        return context

    # ------------------------------------------------------------------ offered config

    def apply_config(self, response: pb.ConfigResponse, now: dt.datetime) -> ConfigApplied:
        """Check every offered rule; switch when the set of active versions changes.

        Per rule: a valid candidate becomes active, a failed one leaves its last good version
        active. Raises SchemaUnavailable (nothing is stored then: the config is asked again)."""
        version = response.config_version[:MAX_CONFIG_VERSION]
        checked = self._checked(response.rules[:MAX_OFFERED_RULES], now.isoformat())
        active = self._next_active(checked)
        checked = _refuse_overlaps(checked, active)
        active = self._next_active(checked)
        current = {rule.rule_id: rule.version for rule in self.current.rules.rules}
        wanted = {rule.rule_id: rule.version for rule in active}
        switch_to = None if wanted == current else [rule.canonical() for rule in active]
        if switch_to is not None and RuleSet(active).uses_mask_key():
            self.mask_key.key()  # created (or found unreadable) before any rule needs it
        stored = self.store.apply(version, [item.snapshot for item in checked], switch_to)
        self.config_version = version
        self.offered = self.store.offered()
        if stored is not None:
            self.generations.append(_generation(stored))
            log.info("sync rules switched to generation %d (%s)", stored.generation,
                     ", ".join(f"{rule_id}@{v}" for rule_id, v in sorted(wanted.items()))
                     or "no rules")
        self._snapshot_activated(now)
        failed = sum(1 for item in checked if not item.valid)
        if failed:
            log.warning("%d of %d offered rules failed their checks on this ship", failed,
                        len(checked))
        return ConfigApplied(version, len(checked), failed,
                             self.generations[-1] if stored is not None else None)

    def _snapshot_activated(self, now: dt.datetime) -> None:
        """Only after the switch is stored: the snapshot's records then come after the switch
        in every partition, so they are shaped by the version that asked for them. Asked on
        every applied config, so a crash right after the switch only delays the request."""
        wanted = [rule for rule in self.current.rules.rules
                  if rule.snapshot is SnapshotWhen.ON_ACTIVATION]
        if not wanted:
            return
        if self.activated is not None:
            self.activated(wanted, now)
        elif not self._told_no_capture:
            self._told_no_capture = True
            log.warning("rule(s) %s ask for a snapshot on activation, but this ship has no"
                        " built-in binlog capture ([capture] source = \"mysql\"): none is"
                        " taken", ", ".join(f"{rule.rule_id}@{rule.version}" for rule in wanted))

    def _checked(self, snapshots: Sequence[pb.RuleSnapshot], now: str) -> list[CheckedRule]:
        checked: list[CheckedRule] = []
        seen: set[str] = set()
        for snapshot in snapshots:
            item = check_snapshot(snapshot, self.schema, now)
            if snapshot.rule_id in seen:
                item = _failed(item, ["offered twice in one config"])
            seen.add(snapshot.rule_id)
            checked.append(item)
        return checked

    def _next_active(self, checked: Sequence[CheckedRule]) -> list[SyncRule]:
        """Per offered rule: the valid candidate, else the version active now (if any)."""
        running = {rule.rule_id: rule for rule in self.current.rules.rules}
        active: list[SyncRule] = []
        for item in checked:
            rule = item.rule if item.valid else running.get(item.snapshot.rule_id)
            if rule is not None:
                active.append(rule)
        return active

    def prune(self, watermarks: Iterable[Watermark]) -> None:
        done = prunable(self.generations, watermarks)
        if done:
            self.store.prune(done)
            self.generations = [g for g in self.generations if g.number not in set(done)]
            for number in done:
                self._contexts.pop(number, None)

    # ------------------------------------------------------------------ reporting

    def activations(self) -> list[pb.RuleActivation]:
        """One RuleActivation per offered rule: names and versions, never a value."""
        active = {rule.rule_id: rule.version for rule in self.current.rules.rules}
        return [pb.RuleActivation(
            rule_id=snapshot.rule_id, active_version=active.get(snapshot.rule_id, 0),
            candidate_version=snapshot.version,
            validation=pb.RULE_VALID if snapshot.valid else pb.RULE_FAILED,
            problems=list(snapshot.problems),
            activated_at_micros=self._activated_at(snapshot.rule_id,
                                                   active.get(snapshot.rule_id)))
            for snapshot in self.offered]

    def _activated_at(self, rule_id: str, version: int | None) -> int:
        """When the running version of a rule took effect (the oldest kept switch to it)."""
        if version is None:
            return 0
        since = ""
        for generation in reversed(self.generations):
            if generation.rules.versions().get(rule_id) != version:
                break
            since = generation.switched_at
        return _micros(since)


def _refuse_overlaps(checked: Sequence[CheckedRule],
                     active: Sequence[SyncRule]) -> list[CheckedRule]:
    """A candidate whose table another active rule already covers uplink fails."""
    conflicts = covering_conflicts(active)
    return [_failed(item, [f"{item.snapshot.rule_id}: its source table is already covered by "
                           f"rule {conflicts[item.snapshot.rule_id]}"])
            if item.valid and item.snapshot.rule_id in conflicts else item
            for item in checked]


def _failed(item: CheckedRule, problems: list[str]) -> CheckedRule:
    snapshot = item.snapshot
    stored = StoredSnapshot(snapshot.rule_id, snapshot.version, snapshot.status,
                            snapshot.content, snapshot.checksum, False,
                            _bounded([*snapshot.problems, *problems]), False, "",
                            snapshot.received_at)
    return CheckedRule(stored, None)


def _micros(text: str) -> int:
    if not text:
        return 0
    return (dt.datetime.fromisoformat(text) - _EPOCH) // dt.timedelta(microseconds=1)


def rules_report(store: SQLiteRules) -> dict[str, object]:
    """What `ship status` shows of the rules: per rule the active and the candidate version
    and the candidate's problems (names only)."""
    generations = store.generations()
    active: dict[str, int] = {}
    if generations:
        for content in generations[-1].contents:
            document = json.loads(content)
            active[str(document["id"])] = int(document["version"])
    rules = {}
    for snapshot in store.offered():
        rules[snapshot.rule_id] = {
            "active_version": active.get(snapshot.rule_id),
            "candidate_version": snapshot.version,
            "validation": "RULE_VALID" if snapshot.valid else "RULE_FAILED",
            "problems": list(snapshot.problems)}
    for rule_id, version in active.items():
        rules.setdefault(rule_id, {"active_version": version, "candidate_version": None,
                                   "validation": None, "problems": []})
    return {"config_version": store.config_version(),
            "generation": generations[-1].generation if generations else 0,
            "mode": "rules" if generations else "implicit (each table its own rule)",
            "rules": dict(sorted(rules.items()))}
