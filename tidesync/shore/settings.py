"""The `[conflicts]` settings of arbitration in `tidesync shore work` (§11.3–11.6), and its
`[apply]` settings: which tables each ship may write."""

from __future__ import annotations

import datetime as dt
import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field


class ConflictPolicy(enum.StrEnum):
    """How a rule's conflicts are decided (§11.4–11.5)."""

    MANUAL = "MANUAL"
    SHORE_WINS = "SHORE_WINS"
    LAST_WRITER_WINS = "LAST_WRITER_WINS"


class TieBreak(enum.StrEnum):
    """Last writer wins with equal business times: the lower or the higher node id wins."""

    LOWER_NODE_ID = "LOWER_NODE_ID"
    HIGHER_NODE_ID = "HIGHER_NODE_ID"


@dataclass(frozen=True)
class TablePolicy:
    """One rule's conflict policy; `time_column` only for LAST_WRITER_WINS."""

    policy: ConflictPolicy
    time_column: str = ""


@dataclass(frozen=True)
class ConflictsConfig:
    """Conflict arbitration in `tidesync shore work` (§11.3–11.6).

    `policies` maps tables to policies, a TOML table: `"db.table" = "SHORE_WINS"`,
    `"db.table" = "LAST_WRITER_WINS:updated_at"`, `"db.table" = "MANUAL"`; other tables use
    `default_policy`. Last writer wins compares the business time column of both versions; a
    missing or unreadable time, or two times further apart than `max_clock_skew_seconds` from
    the capture times, goes to a person instead.

    `policies` and `default_policy` decide only the cases of tables' implicit rules (an
    installation without released rules): a case of a released rule takes the policy and
    time column of its rule version. `max_clock_skew_seconds` and `tie_break` serve both.
    """

    default_policy: ConflictPolicy = ConflictPolicy.MANUAL
    policies: Mapping[str, str] = field(default_factory=dict)
    max_clock_skew_seconds: int = 300
    tie_break: TieBreak = TieBreak.LOWER_NODE_ID
    # An automatic decision holds a lease; a worker that dies mid-decision is taken over.
    auto_decide_lease_seconds: int = 60
    # Cases waiting for a person longer than this breach their SLA (conflict center).
    manual_sla_hours: int = 24
    poll_interval_ms: int = 500

    def table_policies(self) -> dict[tuple[str, str], TablePolicy]:
        out: dict[tuple[str, str], TablePolicy] = {}
        for table, spec in self.policies.items():
            database, _, name = table.partition(".")
            policy_name, _, column = spec.partition(":")
            out[(database, name)] = TablePolicy(ConflictPolicy(policy_name.strip()),
                                                column.strip())
        return out

    def policy_for(self, database: str, table: str) -> TablePolicy:
        return self.table_policies().get((database, table), TablePolicy(self.default_policy))

    def validate(self) -> list[str]:
        problems = []
        for name in ("max_clock_skew_seconds", "auto_decide_lease_seconds", "manual_sla_hours",
                     "poll_interval_ms"):
            if getattr(self, name) < 1:
                problems.append(f"conflicts.{name}: must be >= 1")
        if self.default_policy is ConflictPolicy.LAST_WRITER_WINS:
            problems.append("conflicts.default_policy: LAST_WRITER_WINS needs a time column, "
                            "so it is set per table in conflicts.policies")
        for table, spec in self.policies.items():
            item = f"{table} = {spec}"
            policy_name, _, column = spec.partition(":")
            if table.count(".") != 1 or table.startswith(".") or table.endswith("."):
                problems.append(f"conflicts.policies: {table!r} is not db.table")
                continue
            try:
                policy = ConflictPolicy(policy_name.strip())
            except ValueError:
                problems.append(f"conflicts.policies: {policy_name.strip()!r} is not one of "
                                f"{', '.join(p.value for p in ConflictPolicy)}")
                continue
            if (policy is ConflictPolicy.LAST_WRITER_WINS) != bool(column.strip()):
                problems.append(f"conflicts.policies: {item!r}: LAST_WRITER_WINS takes a time "
                                "column (POLICY:column), the other policies none")
        return problems


ANY_NODE = "*"
NOT_AUTHORIZED = "NOT_AUTHORIZED_FOR_TABLE"


@dataclass(frozen=True)
class ApplyConfig:
    """`node_tables` maps a node id (or `"*"`, every node not named) to the tables it may
    write, as the ship names them: `"ship-1" = ["fleet.items", "stores.*"]`.

    An installation without `[apply.node_tables]` keeps the behaviour it had before the
    allow-list existed (every node writes every enabled table) and says so in the worker's
    log; as soon as the table has any entry, a node neither named nor covered by `"*"` writes
    nothing.

    The list applies only while no sync rule is released: once one is, every event must name
    a released rule that selects its node and covers its table, and the list is not read.
    """

    node_tables: Mapping[str, str] = field(default_factory=dict)
    """Node → tables, TOML arrays of `database.table` or `database.*` (kept comma-joined);
    only without released rules (then the rules decide who writes what)."""
    gap_deadline_seconds: int = 3600
    """A source_sequence gap open this long is escalated to GAP_STALLED (jobs list, logs)."""
    fk_wait_seconds: int = 600
    """How long a partition whose next event breaks a foreign key waits (FK_WAITING in jobs
    list and logs, retrying with backoff) for the other row before that event ends REJECTED
    CONSTRAINT_VIOLATION."""

    @property
    def restricted(self) -> bool:
        return bool(self.node_tables)

    def allows(self, node_id: str, database: str, table: str) -> bool:
        """Whether `node_id` may write `database.table`."""
        if not self.node_tables:
            return True
        allowed = self._allowed.get(node_id, self._allowed.get(ANY_NODE))
        if allowed is None:
            return False
        return f"{database}.{table}" in allowed or f"{database}.*" in allowed

    @functools.cached_property
    def _allowed(self) -> dict[str, frozenset[str]]:
        return {node: frozenset(_split(entries)) for node, entries in self.node_tables.items()}

    def validate(self) -> list[str]:
        problems = []
        if self.gap_deadline_seconds < 1:
            problems.append("apply.gap_deadline_seconds: must be >= 1")
        if self.fk_wait_seconds < 0:
            problems.append("apply.fk_wait_seconds: must be >= 0")
        for node_id, entries in self.node_tables.items():
            if not node_id.strip():
                problems.append("apply.node_tables: a node id is empty")
            for entry in _split(entries):
                database, dot, table = entry.partition(".")
                if not dot or not database or not table or "." in table:
                    problems.append(f"apply.node_tables.{node_id}: {entry!r} is not"
                                    " database.table or database.*")
        return problems


def _split(entries: str) -> list[str]:
    return [entry.strip() for entry in entries.split(",") if entry.strip()]


@dataclass(frozen=True)
class ReconcileConfig:
    """`[reconcile]`: reconciliation over the link (docs/onboarding.md)."""

    interval_seconds: int = 0
    """`tidesync shore work` starts an exchange per (node, active rule) when the last one
    began this long ago; 0 (the default) starts none: only `tidesync reconcile` does."""

    answer_timeout_seconds: int = 86400
    """An exchange whose ship has not answered the awaited turn this long after the shore
    first heard from the ship (a heartbeat) since issuing the turn ends TIMED_OUT; time the
    ship spends offline before that does not count. 0: exchanges wait forever."""

    def validate(self) -> list[str]:
        problems = []
        if not 0 <= self.interval_seconds <= 366 * 86400:
            problems.append("reconcile.interval_seconds: must be 0 (off) .. 31622400")
        if not 0 <= self.answer_timeout_seconds <= 366 * 86400:
            problems.append("reconcile.answer_timeout_seconds: must be 0 (never) .. 31622400")
        return problems

    @property
    def answer_timeout(self) -> dt.timedelta | None:
        return (dt.timedelta(seconds=self.answer_timeout_seconds)
                if self.answer_timeout_seconds else None)
