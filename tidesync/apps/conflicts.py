"""Manual conflict decisions, evidence refreshes, cancellations and redispatches (§11.3,
§11.5): the one service the console and the CLI share.

Each command loads the case, re-reads the record's current row and revision on the shore
target, lets the aggregate decide, and saves; the answer carries the position to wait on.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError

from tidesync.apps.conflict_capture import DUE_AT_ONCE, decided_revision_statements
from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.domain.conflict_case import (
    ConflictCase,
    ConflictRefusal,
    ConflictRefused,
    DecisionSide,
)
from tidesync.domain.downlink_command import (
    CommandKind,
    NewCommand,
    Payload,
)
from tidesync.domain.errors import ErrorCode, TidesyncError, Unavailable
from tidesync.domain.evidence import EvidenceValueError, parse_display

DECISION_NAMESPACE = uuid.UUID("b4d07c2e-5a19-5e83-9f6b-1c3e7a2d4f80")
REDISPATCH_NAMESPACE = uuid.UUID("0d6e9a47-31b2-5c8f-a7e4-95b1c3f2d806")

# How often a command without an expected version reads a case again after it moved on.
_SAVE_ATTEMPTS = 3


class SentCommand(Protocol):
    @property
    def payload(self) -> Payload: ...


class CommandIssuer(Protocol):
    """What a redispatch needs of the downlink: the command a decision went out as, and
    issuing a new one."""

    def command(self, command_id: uuid.UUID) -> SentCommand | None: ...

    def issue(self, commands: Sequence[NewCommand]) -> object: ...


class ConflictCommandError(TidesyncError):
    """A conflict command that could not be carried out; `code` is stable."""

    code = ErrorCode.REFUSED

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message


class ConflictNotFound(ConflictCommandError):
    def __init__(self) -> None:
        super().__init__("NOT_FOUND", "no such conflict")


class CaseChanged(ConflictCommandError):
    """The case moved on since the caller looked (new evidence or another decision)."""

    def __init__(self) -> None:
        super().__init__("CASE_CHANGED", "the conflict changed meanwhile; reload and retry")


class RevisionUnavailable(ConflictCommandError, Unavailable):
    """The record's current revision could not be read, so nothing is decided blind."""

    def __init__(self, why: str) -> None:
        super().__init__("REVISION_UNAVAILABLE", f"the current revision cannot be read: {why}")


class RevisionReader(Protocol):
    """Reads the record's current revision on the shore (None: the row does not exist), or
    its whole row with it (type-tagged image with the sync columns, None: no row).

    Raises RevisionUnavailable when it cannot tell.
    """

    def current_revision(self, case: ConflictCase) -> str | None: ...

    def current_row(self, case: ConflictCase) -> tuple[list[list[object]] | None, str | None]: ...


@dataclass(frozen=True)
class ConflictOutcome:
    """A saved (or already recorded) command: the case as it now stands, and the position of
    its newest event in the conflict_cases application."""

    conflict_id: uuid.UUID
    state: str
    version: int
    decision_id: str | None
    position: int
    recorded: bool = True
    """False when the command found nothing to record (an evidence refresh of a row that had
    not changed)."""


@dataclass(frozen=True)
class Decision:
    """What an approver asks for. `replacement` is the full new row (type-tagged values) for
    REPLACEMENT; `decision_key` makes a retried request answer with the first one's result;
    `expected_version` is the case version the approver looked at."""

    conflict_id: uuid.UUID
    side: DecisionSide
    reason: str
    actor: str
    replacement: list[list[object]] | None = None
    expected_version: int | None = None
    decision_key: str | None = None
    trace_id: str = ""


class ConflictService:
    def __init__(self, app: ConflictCasesApplication, revisions: RevisionReader,
                 new_uuid: Callable[[], uuid.UUID] = uuid.uuid4) -> None:
        self.app = app
        self.revisions = revisions
        self.new_uuid = new_uuid

    def case(self, conflict_id: uuid.UUID) -> ConflictCase:
        try:
            return self.app.get_case(conflict_id)
        except AggregateNotFoundError:
            raise ConflictNotFound() from None

    def decide(self, decision: Decision) -> ConflictOutcome:
        """Raises ConflictRefused (the case's rules) or ConflictCommandError."""
        decision_id = self._decision_id(decision)

        def attempt() -> ConflictOutcome:
            case = self.case(decision.conflict_id)
            if case.decision is not None and case.decision.get("decision_id") == decision_id:
                return self._outcome(case, None)  # The same request again: already recorded.
            _check_version(case, decision.expected_version)
            row, current = self.revisions.current_row(case)
            case.decide(decision_id, decision.side, decision.replacement, current,
                        str(self.new_uuid()), decision.actor, decision.reason,
                        decision.trace_id, current_row=row)
            # The arbiter in `shore work` applies and dispatches it next.
            return self._save(case, [("UPDATE active_conflict SET due_at = %s"
                                      " WHERE conflict_id = %s", (DUE_AT_ONCE, case.id)),
                                     *decided_revision_statements(case)])

        return _again_if_moved_on(attempt, decision.expected_version)

    def refresh(self, conflict_id: uuid.UUID, actor: str, reason: str,
                expected_version: int | None = None, trace_id: str = "") -> ConflictOutcome:
        """Read the shore's row again and record it as the case's newest evidence (the ship's
        side as the latest evidence shows it), so a decision refused as stale can be made.
        Nothing is recorded when the evidence already shows the shore's row as it is."""

        def attempt() -> ConflictOutcome:
            case = self.case(conflict_id)
            _check_version(case, expected_version)
            row, current = self.revisions.current_row(case)
            if not case.refresh_evidence(str(self.new_uuid()), row, current, actor, reason,
                                         trace_id):
                return dataclasses.replace(self._outcome(case, None), recorded=False)
            return self._save(case)

        return _again_if_moved_on(attempt, expected_version)

    def cancel(self, conflict_id: uuid.UUID, actor: str, reason: str,
               expected_version: int | None = None, trace_id: str = "") -> ConflictOutcome:
        """Cancel the case and free its rule + record key for a new active conflict."""

        def attempt() -> ConflictOutcome:
            case = self.case(conflict_id)
            _check_version(case, expected_version)
            case.cancel(actor, reason, trace_id)
            return self._save(case, [("DELETE FROM active_conflict WHERE conflict_id = %s",
                                      (case.id,))])

        return _again_if_moved_on(attempt, expected_version)

    def redispatch(self, conflict_id: uuid.UUID, node_id: str, actor: str, reason: str,
                   downlink: CommandIssuer, expected_version: int | None = None,
                   trace_id: str = "") -> ConflictOutcome:
        """Send a decision again, as the command it went out as, to a node that rejected it.

        The new command's id follows from the case, the node and how often the decision went
        to it again, so asking again after a failure between issuing the command and saving
        the case (or after the case moved on meanwhile) issues nothing twice."""
        def attempt() -> ConflictOutcome:
            case = self.case(conflict_id)
            _check_version(case, expected_version)
            case.check_redispatch(node_id, reason)  # before anything is issued
            previous = case.command_of(node_id)
            sent = None if previous is None else downlink.command(uuid.UUID(previous))
            if sent is None:
                raise ConflictCommandError("NOT_FOUND", "the decision's command to this node"
                                                        " is not on record")
            source_id = uuid.uuid5(REDISPATCH_NAMESPACE, f"{case.id}\x1f{node_id}\x1f"
                                                         f"{case.redispatches_to(node_id)}")
            command = NewCommand(node_id, CommandKind.CONFLICT_DECISION, source_id,
                                 sent.payload, conflict_id=case.id, actor=actor, reason=reason,
                                 trace_id=trace_id)
            downlink.issue([command])
            case.redispatch(node_id, str(command.command_id), actor, reason, trace_id)
            return self._save(case)

        return _again_if_moved_on(attempt, expected_version)

    def _decision_id(self, decision: Decision) -> str:
        if decision.decision_key is None:
            return str(self.new_uuid())
        name = f"{decision.conflict_id}\x1f{decision.decision_key}"
        return str(uuid.uuid5(DECISION_NAMESPACE, name))

    def _save(self, case: ConflictCase,
              statements: Sequence[tuple[str, Sequence[object]]] = ()) -> ConflictOutcome:
        try:
            recordings = self.app.save(case, extra_statements=list(statements))
        except IntegrityError:
            raise CaseChanged() from None
        return self._outcome(case, recordings[-1].notification.id)

    def _outcome(self, case: ConflictCase, position: int | None) -> ConflictOutcome:
        if position is None:
            position = self.app.recorder.max_notification_id() or 0
        decision_id = None if case.decision is None else str(case.decision["decision_id"])
        return ConflictOutcome(case.id, case.state.value, case.version, decision_id, position)


def replacement_from_text(case: ConflictCase,
                          entries: Sequence[tuple[str, str | None]]) -> list[list[object]]:
    """A replacement value from (column, text or None for NULL) pairs, each text read in the
    column's type as the case's evidence shows it. The case itself checks, when deciding,
    that every column is named once."""
    columns = case.evidence_columns()
    values: list[list[object]] = []
    for column, text in entries:
        sample = columns.get(column)
        if sample is None:
            raise ConflictCommandError("REPLACEMENT_COLUMNS",
                                       f"the record has no column {column[:64]!r}")
        if sample == ["null"] and text is not None:
            raise ConflictCommandError(
                "REPLACEMENT_TYPE", f"column {column} is NULL in all evidence, so its type "
                                    "is unknown; it can only stay NULL")
        try:
            values.append([column, parse_display(sample, text)])
        except EvidenceValueError as error:
            raise ConflictCommandError("INVALID_VALUE", f"column {column}: {error}") from None
    return values


def _again_if_moved_on(attempt: Callable[[], ConflictOutcome],
                       expected_version: int | None) -> ConflictOutcome:
    """Run a command on the case. With `expected_version` the case must still be the one the
    approver looked at. Without it, a case that moved on between reading and saving (a ship's
    report joined it) is read again and the command re-checked; only a case that keeps moving
    is refused with CASE_CHANGED."""
    for _ in range(_SAVE_ATTEMPTS - 1):
        try:
            return attempt()
        except CaseChanged:
            if expected_version is not None:
                raise
    return attempt()


def _check_version(case: ConflictCase, expected: int | None) -> None:
    if expected is not None and expected != case.version:
        raise CaseChanged()


__all__ = [
    "CaseChanged", "CommandIssuer", "ConflictCommandError", "ConflictNotFound", "ConflictOutcome",
    "ConflictRefusal", "ConflictRefused", "ConflictService", "Decision", "RevisionReader",
    "RevisionUnavailable", "replacement_from_text",
]
