"""Rule activation reports (§8.2): what each node's heartbeat says about the rules it was offered,
checked against the input limits, kept per node and rule, and read back per rule.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.rules.release import NodeActivation
from tidesync.ingress.database import Connection, transaction
from tidesync.wire import sync_pb2 as pb

MAX_RULE_REPORTS = 1000
"""Rules one heartbeat may report on."""
MAX_RULE_PROBLEMS = 20
"""Problems one rule's report may carry."""
MAX_PROBLEM_CHARS = 300
"""Characters of one problem."""
_RULE_ID = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_INT64 = 1 << 63
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_VALIDATIONS = frozenset(pb.RuleValidation.values())

_UPSERT = (
    "INSERT INTO rule_activation (node_id, rule_id, active_version, candidate_version,"
    " validation, problems, activated_at, sent_at, reported_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (node_id, rule_id) DO UPDATE SET active_version = EXCLUDED.active_version,"
    " candidate_version = EXCLUDED.candidate_version, validation = EXCLUDED.validation,"
    " problems = EXCLUDED.problems, activated_at = EXCLUDED.activated_at,"
    " sent_at = EXCLUDED.sent_at, reported_at = EXCLUDED.reported_at"
)
_FORGET_UNREPORTED = (
    "DELETE FROM rule_activation WHERE node_id = %s AND NOT (rule_id = ANY(%s))"
)
_BY_RULE = (
    "SELECT node_id, active_version, candidate_version, validation, problems, reported_at"
    " FROM rule_activation WHERE rule_id = %s ORDER BY node_id"
)


class BadRuleReport(TidesyncError, ValueError):
    """A heartbeat's rule reports that break a limit or cannot be stored; `reason` is the
    stable code the refusal carries, `status` its HTTP status."""

    code = ErrorCode.INVALID_INPUT
    reason = "BAD_RULE_REPORT"
    status = 400


class TooManyRuleReports(BadRuleReport):
    code = ErrorCode.LIMIT_EXCEEDED
    reason = "TOO_MANY_RULE_REPORTS"
    status = 413


@dataclass(frozen=True, slots=True)
class ActivationRow:
    """One checked report, ready to store."""

    rule_id: str
    active_version: int
    candidate_version: int
    validation: str
    problems: tuple[str, ...]
    activated_at: dt.datetime | None


def checked_reports(reports: Sequence[pb.RuleActivation]) -> list[ActivationRow]:
    """The heartbeat's reports, each checked; raises BadRuleReport naming the first one that
    breaks a limit (the whole heartbeat is refused: nothing of it is stored)."""
    if len(reports) > MAX_RULE_REPORTS:
        raise TooManyRuleReports(f"a heartbeat reports on at most {MAX_RULE_REPORTS} rules")
    rows = [_checked(index, report) for index, report in enumerate(reports)]
    if len({row.rule_id for row in rows}) != len(rows):
        raise BadRuleReport("a heartbeat reports on each rule once")
    return rows


def _checked(index: int, report: pb.RuleActivation) -> ActivationRow:
    where = f"rules[{index}]"
    if _RULE_ID.fullmatch(report.rule_id) is None:
        raise BadRuleReport(f"{where}.rule_id is not a rule id")
    if not (0 <= report.active_version < _INT64 and 0 <= report.candidate_version < _INT64):
        raise BadRuleReport(f"{where}: versions are 0 or more")
    if report.validation not in _VALIDATIONS:
        raise BadRuleReport(f"{where}.validation is not a known value")
    if len(report.problems) > MAX_RULE_PROBLEMS:
        raise TooManyRuleReports(f"{where}: at most {MAX_RULE_PROBLEMS} problems per rule")
    for problem in report.problems:
        _check_problem(where, problem)
    return ActivationRow(report.rule_id, report.active_version, report.candidate_version,
                         pb.RuleValidation.Name(report.validation), tuple(report.problems),
                         reported_moment(f"{where}.activated_at_micros",
                                         report.activated_at_micros))


def _check_problem(where: str, problem: str) -> None:
    if len(problem) > MAX_PROBLEM_CHARS:
        raise TooManyRuleReports(
            f"{where}: a problem has at most {MAX_PROBLEM_CHARS} characters")
    if "\x00" in problem:
        raise BadRuleReport(f"{where}: a problem holds a NUL character")


def reported_moment(where: str, micros: int,
                    refused: type[BadRuleReport] = BadRuleReport) -> dt.datetime | None:
    """A report's optional time (0: none); raises `refused` naming `where` when out of
    range."""
    if micros == 0:
        return None
    try:
        return _EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError:
        raise refused(f"{where} is out of range") from None


def store_reports(conn: Connection, node_id: str, rows: Sequence[ActivationRow],
                  sent_at: dt.datetime, now: dt.datetime) -> None:
    """Make `rows` the node's reports: upsert each, forget the rules it no longer reports.
    Call only for the node's newest heartbeat."""
    if rows:
        with conn.cursor() as cursor:
            cursor.executemany(_UPSERT, [
                (node_id, row.rule_id, row.active_version, row.candidate_version,
                 row.validation, Jsonb(list(row.problems)), row.activated_at, sent_at, now)
                for row in rows
            ])
    conn.execute(_FORGET_UNREPORTED, (node_id, [row.rule_id for row in rows]))


class PostgresRuleActivations:
    """Each node's latest report on a rule (the `RuleActivationReports` of the release
    commands and of the activation step)."""

    def __init__(self, pool: ConnectionPool[Connection]) -> None:
        self.pool = pool

    def activations(self, rule_id: str) -> list[NodeActivation]:
        """Every node's latest report on `rule_id`, by node id; raises StoreUnavailable."""
        with transaction(self.pool) as conn:
            rows = conn.execute(_BY_RULE, (rule_id,)).fetchall()
        return [_activation(row) for row in rows]

    def close(self) -> None:
        self.pool.close()


def _activation(row: Sequence[Any]) -> NodeActivation:
    node_id, active, candidate, validation, problems, reported_at = row
    return NodeActivation(node_id=node_id, active_version=active, candidate_version=candidate,
                          validation=validation, problems=tuple(problems),
                          reported_at=reported_at)
