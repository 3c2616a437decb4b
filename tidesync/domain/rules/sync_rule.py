"""A sync rule (§8.1): which nodes sync which table, in which direction, which rows and columns,
in what shape, and how its conflicts are decided.

A rule is written by an operator as a TOML file (`docs/rules_releases.md`), drafted as a new
version of its id and released through the RuleRelease lifecycle. This module holds the value
object, its parsing, its canonical JSON (what is signed, checksummed and sent to ships) and the
checks that need no database: `problems()` before a release is validated, `schema_problems()`
against the columns a ship or the shore actually has.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tidesync.domain.arbitration import PolicyName
from tidesync.domain.column_kinds import ColumnKind, ColumnType
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.rules.filter import FilterError, RowFilter, parse_filter
from tidesync.domain.rules.schedule import ScheduleError, TransferSchedule
from tidesync.domain.rules.transforms import (
    REGISTRY,
    TransformError,
    TransformSpec,
    validate_transform,
)

RULE_ID = re.compile(r"[a-z][a-z0-9_-]{0,62}")
"""Rule ids: short lower-case slugs; they appear in events, topics of logs and audit."""
MAX_NAME = 64
MAX_COLUMNS = 512
MAX_TRANSFORMS = 64
MAX_SELECTOR = 1000
MAX_TEXT = 2000
ANY_NODE = "*"


class RuleError(TidesyncError, ValueError):
    """A rule document cannot be read, or a rule is not valid."""

    code = ErrorCode.RULE_INVALID


class Direction(enum.StrEnum):
    """Which way a rule's changes travel (§5.3): one way needs no revision metadata."""

    UPLINK = "UPLINK"
    DOWNLINK = "DOWNLINK"
    BIDIRECTIONAL = "BIDIRECTIONAL"

    @property
    def uplink(self) -> bool:
        return self is not Direction.DOWNLINK

    @property
    def downlink(self) -> bool:
        return self is not Direction.UPLINK


class SnapshotWhen(enum.StrEnum):
    """When a ship sends the rows its source table already holds as a snapshot."""

    NEVER = ""
    ON_ACTIVATION = "ON_ACTIVATION"
    """Each time a version of the rule becomes active on a ship (its first activation included)."""


class PriorityClass(enum.StrEnum):
    CRITICAL = "CRITICAL"
    HIGH = "HIGH"
    NORMAL = "NORMAL"
    BULK = "BULK"


@dataclass(frozen=True, slots=True)
class Selector:
    """The nodes a rule applies to: named node ids (`*` for every node), groups or tags."""

    nodes: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()

    def matches(self, node_id: str, groups: Iterable[str] = (),
                tags: Iterable[str] = ()) -> bool:
        return (ANY_NODE in self.nodes or node_id in self.nodes
                or not self.groups.isdisjoint(groups) or not self.tags.isdisjoint(tags))

    @property
    def empty(self) -> bool:
        return not (self.nodes or self.groups or self.tags)


@dataclass(frozen=True, slots=True)
class SyncRule:
    """One version of one rule. `version` is 0 until the shore drafts it as a release."""

    rule_id: str
    source_database: str
    source_table: str
    direction: Direction
    selector: Selector
    version: int = 0
    description: str = ""
    target_database: str = ""
    target_table: str = ""
    key_columns: tuple[str, ...] = ()
    row_filter: str = ""
    include_columns: tuple[str, ...] = ()
    exclude_columns: tuple[str, ...] = ()
    sensitive_columns: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    transforms: tuple[TransformSpec, ...] = ()
    conflict_policy: PolicyName = PolicyName.MANUAL
    conflict_time_column: str = ""
    business_time_column: str = ""
    priority: PriorityClass = PriorityClass.NORMAL
    rate_class: str = ""
    schedule: str = ""
    window: str = ""
    quota_bytes_per_day: int = 0
    retention_days: int = 0
    snapshot: SnapshotWhen = SnapshotWhen.NEVER

    # ----------------------------------------------------------------- naming

    @property
    def source(self) -> tuple[str, str]:
        return self.source_database, self.source_table

    @property
    def target(self) -> tuple[str, str]:
        return (self.target_database or self.source_database,
                self.target_table or self.source_table)

    def with_version(self, version: int) -> SyncRule:
        return dataclasses.replace(self, version=version)

    # ----------------------------------------------------------------- columns

    def dropped(self) -> frozenset[str]:
        """Columns (lower-case) that never leave the ship: excluded and sensitive ones."""
        return frozenset(name.lower() for name in (*self.exclude_columns,
                                                    *self.sensitive_columns))

    def keeps(self, column: str) -> bool:
        """Whether a source column is synced (key columns always are)."""
        lowered = column.lower()
        if lowered in {name.lower() for name in self.key_columns}:
            return True
        if lowered in self.dropped():
            return False
        return not self.include_columns or lowered in {name.lower()
                                                       for name in self.include_columns}

    def target_column(self, column: str) -> str:
        """The shore's name of a source column (the rename map, matched case-insensitively)."""
        for source, target in self.rename.items():
            if source.lower() == column.lower():
                return target
        return column

    def pinned(self) -> SyncRule:
        """This rule with each transform's implementation fingerprint recorded, so a later
        change of a transform's behaviour fails validation instead of changing data."""
        specs = tuple(dataclasses.replace(spec, fingerprint=REGISTRY[spec.name, spec.version]
                                          .fingerprint)
                      if spec.fingerprint is None and (spec.name, spec.version) in REGISTRY
                      else spec for spec in self.transforms)
        return dataclasses.replace(self, transforms=specs)

    def parsed_filter(self) -> RowFilter | None:
        return parse_filter(self.row_filter) if self.row_filter.strip() else None

    # ----------------------------------------------------------------- documents

    def document(self) -> dict[str, Any]:
        """The rule as plain JSON values: what is checksummed, stored and sent to ships."""
        return {
            "id": self.rule_id,
            "version": self.version,
            "description": self.description,
            "direction": self.direction.value,
            "source": f"{self.source_database}.{self.source_table}",
            "target": "{}.{}".format(*self.target),
            "key": list(self.key_columns),
            "filter": self.row_filter,
            "select": {"nodes": sorted(self.selector.nodes),
                       "groups": sorted(self.selector.groups),
                       "tags": sorted(self.selector.tags)},
            "columns": {"include": list(self.include_columns),
                        "exclude": list(self.exclude_columns),
                        "sensitive": list(self.sensitive_columns),
                        "rename": dict(sorted(self.rename.items()))},
            "transforms": [{"column": spec.column, "transform": spec.ref(),
                            "args": dict(sorted(spec.args.items())),
                            **({"fingerprint": spec.fingerprint} if spec.fingerprint else {})}
                           for spec in self.transforms],
            "conflicts": {"policy": self.conflict_policy.value,
                          "time_column": self.conflict_time_column},
            "business_time": self.business_time_column,
            "priority": self.priority.value,
            "rate_class": self.rate_class,
            "schedule": self.schedule,
            "window": self.window,
            "quota_bytes_per_day": self.quota_bytes_per_day,
            "retention_days": self.retention_days,
            # Only when set: rules without it keep the canonical JSON (and checksum) they had.
            **({"snapshot": self.snapshot.value} if self.snapshot is not SnapshotWhen.NEVER
               else {}),
        }

    def canonical(self) -> bytes:
        """Canonical JSON (sorted keys, no spaces, UTF-8) of `document()`."""
        return json.dumps(self.document(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()

    def checksum(self) -> bytes:
        return hashlib.sha256(self.canonical()).digest()

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> SyncRule:
        """Read a rule from its document (a parsed TOML file or `document()` JSON).

        Raises `RuleError` naming the first field that is missing or of the wrong shape.
        """
        return _read_rule(document)

    @classmethod
    def from_json(cls, content: bytes) -> SyncRule:
        try:
            document = json.loads(content.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RuleError(f"a rule's content is not JSON: {exc.__class__.__name__}") from None
        if not isinstance(document, dict):
            raise RuleError("a rule's content is not a JSON object")
        return _read_rule(document)

    # ----------------------------------------------------------------- checks

    def problems(self) -> list[str]:
        """What makes this rule invalid whatever the database holds; empty when none."""
        return _static_problems(self)

    def schema_problems(self, columns: Mapping[str, ColumnType] | None,
                        primary_key: Sequence[str] = ()) -> list[str]:
        """What does not fit a table with these columns (None: the table does not exist)."""
        return _schema_problems(self, columns, primary_key)


# --------------------------------------------------------------------------- reading


def _read_rule(document: Mapping[str, Any]) -> SyncRule:
    reader = _Reader(document, "")
    unknown = set(document) - _TOP_FIELDS
    if unknown:
        raise RuleError(f"unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    source_database, source_table = _table(reader.text("source", required=True), "source")
    target = reader.text("target")
    target_database, target_table = (_table(target, "target") if target
                                     else (source_database, source_table))
    select = _Reader(reader.table("select"), "select.")
    columns = _Reader(reader.table("columns"), "columns.")
    conflicts = _Reader(reader.table("conflicts"), "conflicts.")
    for section, allowed in (("select", {"nodes", "groups", "tags"}),
                             ("columns", {"include", "exclude", "sensitive", "rename"}),
                             ("conflicts", {"policy", "time_column"})):
        extra = set(reader.table(section)) - allowed
        if extra:
            raise RuleError(f"{section}: unknown field(s): {', '.join(sorted(map(str, extra)))}")
    return SyncRule(
        rule_id=reader.text("id", required=True),
        version=reader.integer("version"),
        description=reader.text("description", limit=MAX_TEXT),
        direction=reader.choice("direction", Direction, required=True),
        source_database=source_database,
        source_table=source_table,
        target_database=target_database,
        target_table=target_table,
        key_columns=reader.names("key"),
        row_filter=reader.text("filter", limit=MAX_TEXT),
        selector=Selector(frozenset(select.names("nodes", MAX_SELECTOR)),
                          frozenset(select.names("groups", MAX_SELECTOR)),
                          frozenset(select.names("tags", MAX_SELECTOR))),
        include_columns=columns.names("include"),
        exclude_columns=columns.names("exclude"),
        sensitive_columns=columns.names("sensitive"),
        rename=MappingProxyType(columns.mapping("rename")),
        transforms=tuple(_transform(item, index)
                         for index, item in enumerate(reader.items("transforms"))),
        conflict_policy=conflicts.choice("policy", PolicyName) or PolicyName.MANUAL,
        conflict_time_column=conflicts.text("time_column"),
        business_time_column=reader.text("business_time"),
        priority=reader.choice("priority", PriorityClass) or PriorityClass.NORMAL,
        rate_class=reader.text("rate_class"),
        schedule=reader.text("schedule"),
        window=reader.text("window"),
        quota_bytes_per_day=reader.integer("quota_bytes_per_day"),
        retention_days=reader.integer("retention_days"),
        snapshot=reader.choice("snapshot", SnapshotWhen) or SnapshotWhen.NEVER,
    )


_TOP_FIELDS = {"id", "version", "description", "direction", "source", "target", "key", "filter",
               "select", "columns", "transforms", "conflicts", "business_time", "priority",
               "rate_class", "schedule", "window", "quota_bytes_per_day", "retention_days",
               "snapshot"}


def _table(text: str, name: str) -> tuple[str, str]:
    database, dot, table = text.partition(".")
    if not dot or not database or not table or "." in table:
        raise RuleError(f"{name}: {text!r} is not database.table")
    return database, table


def _transform(item: object, index: int) -> TransformSpec:
    if not isinstance(item, Mapping):
        raise RuleError(f"transforms[{index}]: not a table")
    reader = _Reader(item, f"transforms[{index}].")
    extra = set(item) - {"column", "transform", "args", "fingerprint"}
    if extra:
        raise RuleError(f"transforms[{index}]: unknown field(s): "
                        f"{', '.join(sorted(map(str, extra)))}")
    args = item.get("args") or {}
    if not isinstance(args, Mapping):
        raise RuleError(f"transforms[{index}].args: not a table")
    try:
        return TransformSpec.parse(reader.text("column", required=True),
                                   reader.text("transform", required=True), args,
                                   fingerprint=reader.text("fingerprint") or None)
    except TransformError as exc:
        raise RuleError(f"transforms[{index}]: {exc}") from None


class _Reader:
    """Typed access to one table of a rule document, with messages that name the field."""

    def __init__(self, document: Mapping[str, Any], prefix: str) -> None:
        self.document = document
        self.prefix = prefix

    def _value(self, name: str) -> Any:
        return self.document.get(name)

    def text(self, name: str, *, required: bool = False, limit: int = MAX_NAME * 2) -> str:
        value = self._value(name)
        if value is None or value == "":
            if required:
                raise RuleError(f"{self.prefix}{name}: required")
            return ""
        if not isinstance(value, str):
            raise RuleError(f"{self.prefix}{name}: must be text")
        if len(value) > limit:
            raise RuleError(f"{self.prefix}{name}: longer than {limit} characters")
        if "\x00" in value or any(0xD800 <= ord(char) <= 0xDFFF for char in value):
            raise RuleError(f"{self.prefix}{name}: holds a NUL or an unpaired surrogate")
        return value

    def integer(self, name: str) -> int:
        value = self._value(name)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise RuleError(f"{self.prefix}{name}: must be an integer")
        if not 0 <= value < 2**63:
            raise RuleError(f"{self.prefix}{name}: out of range")
        return value

    def choice(self, name: str, kind: type[Any], *, required: bool = False) -> Any:
        text = self.text(name, required=required)
        if not text:
            return None
        try:
            return kind(text.upper())
        except ValueError:
            raise RuleError(f"{self.prefix}{name}: {text!r} is not one of "
                            f"{', '.join(member.value for member in kind)}") from None

    def names(self, name: str, limit: int = MAX_COLUMNS) -> tuple[str, ...]:
        value = self._value(name)
        if value is None:
            return ()
        if not isinstance(value, list | tuple) or not all(isinstance(item, str)
                                                          for item in value):
            raise RuleError(f"{self.prefix}{name}: must be a list of names")
        if len(value) > limit:
            raise RuleError(f"{self.prefix}{name}: more than {limit} entries")
        for item in value:
            _check_name(item, f"{self.prefix}{name}")
        return tuple(value)

    def mapping(self, name: str) -> dict[str, str]:
        value = self._value(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(
                isinstance(key, str) and isinstance(item, str) for key, item in value.items()):
            raise RuleError(f"{self.prefix}{name}: must be a table of name = name")
        if len(value) > MAX_COLUMNS:
            raise RuleError(f"{self.prefix}{name}: more than {MAX_COLUMNS} entries")
        for key, item in value.items():
            _check_name(key, f"{self.prefix}{name}")
            _check_name(item, f"{self.prefix}{name}")
        return dict(value)

    def table(self, name: str) -> Mapping[str, Any]:
        value = self._value(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise RuleError(f"{self.prefix}{name}: must be a table")
        return value

    def items(self, name: str) -> list[object]:
        value = self._value(name)
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            raise RuleError(f"{self.prefix}{name}: must be a list")
        if len(value) > MAX_TRANSFORMS:
            raise RuleError(f"{self.prefix}{name}: more than {MAX_TRANSFORMS} entries")
        return list(value)


def _check_name(name: str, where: str) -> None:
    if not name or len(name) > MAX_NAME or "\x00" in name or "`" in name:
        raise RuleError(f"{where}: {name[:MAX_NAME]!r} is not a column or node name")


# --------------------------------------------------------------------------- checks


def _lowered(names: Iterable[str]) -> set[str]:
    return {name.lower() for name in names}


def _static_problems(rule: SyncRule) -> list[str]:
    problems: list[str] = []
    if not RULE_ID.fullmatch(rule.rule_id):
        problems.append(f"id: {rule.rule_id[:80]!r} must be lower-case letters, digits, _ or -,"
                        " starting with a letter, at most 63 characters")
    for where, name in (("source", rule.source_database), ("source", rule.source_table),
                        ("target", rule.target[0]), ("target", rule.target[1])):
        if len(name) > MAX_NAME or "\x00" in name or "`" in name:
            problems.append(f"{where}: {name[:MAX_NAME]!r} is not a database or table name")
    if rule.selector.empty:
        problems.append("select: names no node, group or tag (use nodes = [\"*\"] for all)")
    include, exclude = _lowered(rule.include_columns), _lowered(rule.exclude_columns)
    sensitive, key = _lowered(rule.sensitive_columns), _lowered(rule.key_columns)
    if include & exclude:
        problems.append(f"columns: {', '.join(sorted(include & exclude))} both included "
                        "and excluded")
    if include & sensitive:
        problems.append(f"columns: sensitive {', '.join(sorted(include & sensitive))} cannot "
                        "be included: sensitive columns never leave the ship")
    if key & (exclude | sensitive):
        problems.append(f"key: {', '.join(sorted(key & (exclude | sensitive)))} cannot be "
                        "excluded or sensitive")
    targets = [target.lower() for target in rule.rename.values()]
    if len(set(targets)) != len(targets):
        problems.append("columns.rename: two columns are renamed to the same name")
    for spec in rule.transforms:
        if spec.column.lower() in exclude | sensitive:
            problems.append(f"transforms: {spec.column} is excluded, so it is never transformed")
        if spec.column.lower() in key:
            problems.append(f"transforms: {spec.column} is a key column; a transform would "
                            "change which row an event names")
        problems.extend(f"transforms: {problem}" for problem in validate_transform(spec, None)
                        if "column" not in problem)
    if len({spec.column.lower() for spec in rule.transforms}) != len(rule.transforms):
        problems.append("transforms: a column has more than one transform")
    if rule.row_filter.strip():
        try:
            parse_filter(rule.row_filter)
        except FilterError as exc:
            problems.append(f"filter: {exc}")
    if (rule.conflict_policy is PolicyName.LAST_WRITER_WINS) != bool(rule.conflict_time_column):
        problems.append("conflicts: LAST_WRITER_WINS takes a time_column, the other policies none")
    if rule.conflict_time_column.lower() in exclude | sensitive:
        problems.append("conflicts.time_column: an excluded column cannot decide conflicts")
    if rule.direction is not Direction.BIDIRECTIONAL and rule.conflict_policy is not \
            PolicyName.MANUAL:
        problems.append("conflicts: a one-way rule has no conflicts, so it takes no policy")
    if rule.snapshot is not SnapshotWhen.NEVER and not rule.direction.uplink:
        problems.append("snapshot: a ship sends snapshots of its rows, so a DOWNLINK rule"
                        " takes none")
    if rule.schedule.strip():
        try:
            TransferSchedule.parse(rule.schedule)
        except ScheduleError as exc:
            problems.append(f"schedule: {exc}")
        if not rule.direction.uplink:
            problems.append("schedule: it holds a ship's uploads, so a DOWNLINK rule takes"
                            " none")
    return problems


def _schema_problems(rule: SyncRule, columns: Mapping[str, ColumnType] | None,
                     primary_key: Sequence[str]) -> list[str]:
    database, table = rule.source
    if columns is None:
        return [f"table {database}.{table} does not exist"]
    kinds = {name.lower(): column.kind for name, column in columns.items()}
    problems: list[str] = []

    def missing(names: Iterable[str], where: str) -> None:
        absent = sorted({name for name in names if name.lower() not in kinds})
        if absent:
            problems.append(f"{where}: no column {', '.join(absent)} in {database}.{table}")

    missing(rule.key_columns, "key")
    if not rule.key_columns and not primary_key:
        problems.append(f"key: {database}.{table} has no primary key; name the key columns")
    missing(rule.include_columns, "columns.include")
    missing(rule.exclude_columns, "columns.exclude")
    missing(rule.sensitive_columns, "columns.sensitive")
    missing(rule.rename, "columns.rename")
    for where, name in (("conflicts.time_column", rule.conflict_time_column),
                        ("business_time", rule.business_time_column)):
        if name:
            kind = kinds.get(name.lower())
            if kind is None:
                missing([name], where)
            elif kind not in (ColumnKind.DATETIME, ColumnKind.DATE):
                problems.append(f"{where}: {name} is not a date or time column")
    for spec in rule.transforms:
        problems.extend(f"transforms: {problem}"
                        for problem in validate_transform(spec, kinds.get(spec.column.lower())))
    if rule.row_filter.strip():
        try:
            row_filter = parse_filter(rule.row_filter)
        except FilterError as exc:
            problems.append(f"filter: {exc}")
        else:
            problems.extend(f"filter: {problem}"
                            for problem in row_filter.type_problems(
                                {name: column.kind for name, column in columns.items()}))
    return problems
