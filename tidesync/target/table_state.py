"""What an enabled business table looks like: its state as `target enable` and `target status`
see it (columns, our triggers, the business triggers, the ledger), and its shape as the
appliers use it.

Also the rules both databases share: our trigger names, valid node ids, and the status lines.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tidesync.domain.column_kinds import ColumnKind, ColumnType, column_type
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.sync_columns import (
    EVENT_ID_COLUMN,
    METADATA_COLUMNS,
    ORIGIN_COLUMN,
    REVISION_COLUMN,
)
from tidesync.target.contract import LEDGER_TABLE

SQLITE_SESSION_TABLE = "_sync_session"
"""SQLite only: the one-row control table carrying the remote-apply flag (see `sqlite_schema`)."""
NODE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
"""Node ids are written into trigger text, so only these characters are allowed."""

_MAX_IDENTIFIER = 64
_OUR_TRIGGER_PREFIX = "tidesync_"
"""Every trigger tidesync creates (sync stamping, SQLite capture) is named with this prefix."""


class SchemaError(TidesyncError):
    """The table cannot be enabled as it is (missing, no primary key, clashing column types)."""

    code = ErrorCode.SCHEMA_INVALID


# --- what a table looks like ----------------------------------------------------------------


@dataclass(frozen=True)
class TableShape:
    """An enabled table as the appliers need it: columns (in order) with their types, the
    primary key in key order, and how its revisions are stored."""

    database: str
    table: str
    columns: Mapping[str, ColumnType]
    primary_key: tuple[str, ...]
    revision_as_bytes: bool = False
    generated: frozenset[str] = frozenset()
    """Generated columns: the database computes them, so no write ever names them."""
    trigger_rewrites: frozenset[str] = frozenset()
    """The writes ("INSERT", "UPDATE") after which a business trigger may have changed the
    row itself: the appliers read such rows back to find out."""
    on_update: frozenset[str] = frozenset()
    """Columns the server stamps on every UPDATE (`ON UPDATE CURRENT_TIMESTAMP`): an applied
    update that does not write one sets it to itself, so it keeps the source's value."""

    @functools.cached_property
    def key_columns(self) -> frozenset[str]:
        return frozenset(self.primary_key)

    def is_generated(self, name: str) -> bool:
        """Whether `name` is a generated column (ignoring case, as MySQL does)."""
        lowered = name.lower()
        return any(column.lower() == lowered for column in self.generated)

    def column_named(self, name: str) -> str | None:
        """The table's spelling of a column name (MySQL column names ignore case)."""
        if name in self.columns:
            return name
        lowered = name.lower()
        return next((column for column in self.columns if column.lower() == lowered), None)


@dataclass(frozen=True)
class BusinessTrigger:
    """A trigger on an enabled table that is not tidesync's own."""

    name: str
    timing: str  # BEFORE, AFTER or INSTEAD OF
    event: str  # INSERT, UPDATE or DELETE
    guarded: bool
    """Its text reads the remote-apply flag (so it can tell the shore's applies apart)."""
    changes_row: bool
    """It can change the row being written (MySQL: a BEFORE trigger; SQLite: any)."""

    def describe(self) -> str:
        note = ("reads the remote-apply flag" if self.guarded else
                "fires again when a row from another node is applied unless guarded"
                " (docs/shore.md, Business triggers)")
        return f"business trigger {self.name} ({self.timing} {self.event}): {note}"


def is_our_trigger(name: str) -> bool:
    return name.lower().startswith(_OUR_TRIGGER_PREFIX)


@dataclass
class TableState:
    """What `enable` and `status` see: the table's columns, our triggers and the ledger."""

    database: str
    table: str
    exists: bool
    columns: dict[str, str] = field(default_factory=dict)  # name → declared type
    json_columns: set[str] = field(default_factory=set)
    generated_columns: set[str] = field(default_factory=set)
    primary_key: tuple[str, ...] = ()
    triggers: dict[str, str] = field(default_factory=dict)  # our trigger name → its SQL text
    ledger: bool = False
    session_table: bool = True  # SQLite only: the control table exists
    business_triggers: list[BusinessTrigger] = field(default_factory=list)
    invisible_columns: set[str] = field(default_factory=set)
    on_update_columns: set[str] = field(default_factory=set)
    """Columns the server rewrites on every UPDATE (MySQL `ON UPDATE CURRENT_TIMESTAMP`)."""
    can_hide_columns: bool = True  # False for SQLite, which has no invisible columns

    def metadata_problems(self) -> list[str]:
        """Metadata columns whose declared type cannot hold what the applier writes."""
        problems = []
        for name in METADATA_COLUMNS:
            declared = self.columns.get(name)
            if declared is not None and not _metadata_type_ok(name, declared):
                problems.append(f"column {name} has type {declared}")
        return problems

    def missing_metadata(self) -> list[str]:
        return [name for name in METADATA_COLUMNS if name not in self.columns]

    def trigger_names(self) -> tuple[str, str]:
        return trigger_names(self.table)

    def visible_metadata(self) -> list[str]:
        """Present metadata columns that `SELECT *` and `INSERT ... VALUES` still see."""
        return [name for name in METADATA_COLUMNS
                if name in self.columns and name not in self.invisible_columns]

    def business_triggers_on(self, event: str) -> list[BusinessTrigger]:
        return [trigger for trigger in self.business_triggers if trigger.event == event]

    @property
    def enabled(self) -> bool:
        return (self.exists and bool(self.primary_key) and not self.missing_metadata()
                and not self.metadata_problems() and self.ledger and self.session_table
                and all(name in self.triggers for name in self.trigger_names()))

    def shape(self) -> TableShape:
        types = {
            name: ColumnType(ColumnKind.JSON) if name in self.json_columns else column_type(kind)
            for name, kind in self.columns.items()
        }
        revision = self.columns.get(REVISION_COLUMN, "").lower()
        rewrites = frozenset(trigger.event for trigger in self.business_triggers
                             if trigger.changes_row and trigger.event in ("INSERT", "UPDATE"))
        return TableShape(self.database, self.table, types, self.primary_key,
                          revision_as_bytes="binary" in revision,
                          generated=frozenset(self.generated_columns),
                          trigger_rewrites=rewrites,
                          on_update=frozenset(self.on_update_columns))

    def trigger_node_ids(self) -> set[str]:
        """The node ids our triggers stamp on local writes (normally exactly one)."""
        found: set[str] = set()
        for text in self.triggers.values():
            found.update(_TRIGGER_NODE.findall(text))
        return found


_TRIGGER_NODE = re.compile(rf"{ORIGIN_COLUMN}\s*=\s*'([^']*)'")


def _metadata_type_ok(name: str, declared: str) -> bool:
    kind = column_type(declared)
    lowered = declared.lower().replace(" ", "")
    if name == REVISION_COLUMN:
        return lowered.startswith(("char(36)", "binary(16)", "varchar(36)"))
    if name == EVENT_ID_COLUMN:
        return lowered.startswith(("char(36)", "varchar(36)"))
    if name == ORIGIN_COLUMN:
        return kind.kind is ColumnKind.TEXT
    return kind.kind is ColumnKind.DATETIME


def trigger_names(table: str) -> tuple[str, str]:
    """Our two trigger names for a table (kept within MySQL's 64 characters)."""
    stem = f"tidesync_{table}"
    if len(stem) + 3 > _MAX_IDENTIFIER:
        digest = hashlib.sha256(table.encode()).hexdigest()[:8]
        stem = f"{stem[:_MAX_IDENTIFIER - 3 - 9]}_{digest}"
    return f"{stem}_bi", f"{stem}_bu"


def check_node_id(node_id: str) -> str:
    if not NODE_ID_PATTERN.fullmatch(node_id):
        raise SchemaError(
            "node id must be 1-64 letters, digits, '.', '_', ':' or '-', starting alphanumeric",
        )
    return node_id


@dataclass
class EnableReport:
    """What `enable` did (or found already done), one line per step."""

    database: str
    table: str
    actions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What a person should know that enable did not change (business triggers, ...)."""

    @property
    def changed(self) -> bool:
        return any(not line.startswith("unchanged") for line in self.actions)


# --- status ---------------------------------------------------------------------------------


def status_lines(state: TableState, expected_node_id: str | None = None) -> list[str]:
    """A person's view of one table's readiness, one fact per line."""
    name = f"{state.database}.{state.table}"
    if not state.exists:
        return [f"{name}: table does not exist"]
    lines = [f"{name}: {'enabled' if state.enabled else 'NOT enabled'}"]
    lines.append(f"  primary key: {', '.join(state.primary_key) or 'MISSING'}")
    for column in METADATA_COLUMNS:
        declared = state.columns.get(column)
        lines.append(f"  column {column}: {declared if declared else 'missing'}")
    lines += [f"  problem: {problem}" for problem in state.metadata_problems()]
    if not state.missing_metadata():
        lines.append(f"  metadata columns: {_visibility(state)}")
    for trigger in state.trigger_names():
        present = "present" if trigger in state.triggers else "missing"
        lines.append(f"  trigger {trigger}: {present}")
    nodes = state.trigger_node_ids()
    if nodes:
        lines.append(f"  local writes stamped with origin: {', '.join(sorted(nodes))}")
    if expected_node_id is not None and nodes and nodes != {expected_node_id}:
        lines.append(f"  problem: triggers stamp {', '.join(sorted(nodes))},"
                     f" configured node is {expected_node_id}")
    lines.append(f"  ledger {LEDGER_TABLE}: {'present' if state.ledger else 'missing'}")
    if not state.session_table:
        lines.append(f"  control table {SQLITE_SESSION_TABLE}: missing")
    lines += [f"  {trigger.describe()}" for trigger in state.business_triggers]
    return lines


def _visibility(state: TableState) -> str:
    visible = state.visible_metadata()
    if not visible:
        return "invisible"
    if not state.can_hide_columns:
        return "visible (SQLite cannot hide columns)"
    return (f"VISIBLE ({', '.join(visible)}): SELECT * shows them and INSERT without a column"
            " list fails; run `tidesync target enable` again to hide them")
