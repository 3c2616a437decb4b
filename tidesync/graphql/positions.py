"""Read your writes: a command answers with the position of its last event in its
application's notification log; a read may wait (bounded) until the read models that follow
that application have passed it.

A projection with a topic filter never tracks the events it skips, so it has passed a
position when its tracked position is at or beyond it, or when nothing it reads lies between.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psycopg
from eventsourcing.persistence import ApplicationRecorder
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.domain.errors import ErrorCode, TidesyncError

TOKEN_PATTERN = re.compile(r"([a-z_]{1,40}):(\d{1,18})")
MAX_TOKENS = 16


class BadPosition(TidesyncError, ValueError):
    """A position token that is malformed or names an unknown application."""

    code = ErrorCode.INVALID_INPUT


@dataclass(frozen=True)
class Position:
    """Where a command's last event sits: application name and notification id."""

    application: str
    notification_id: int

    @property
    def token(self) -> str:
        return f"{self.application}:{self.notification_id}"


def parse_positions(text: str, applications: Iterable[str]) -> list[Position]:
    """Positions from "app:id" tokens separated by commas or spaces."""
    known = set(applications)
    tokens = [token for token in re.split(r"[,\s]+", text.strip()) if token]
    if len(tokens) > MAX_TOKENS:
        raise BadPosition(f"at most {MAX_TOKENS} positions can be waited for at once")
    positions = []
    for token in tokens:
        match = TOKEN_PATTERN.fullmatch(token)
        if match is None or match.group(1) not in known:
            raise BadPosition(f"not a position token: {token[:60]!r}")
        positions.append(Position(match.group(1), int(match.group(2))))
    return positions


@dataclass(frozen=True)
class FollowedProjection:
    """A read model the console can wait for: its tracking name, the application it follows
    and the stored event topics it reads (empty: all)."""

    name: str
    application: str
    topics: tuple[str, ...] = ()


class ReadModelWaits:
    """Checks (blocking) whether the read models have passed given positions."""

    def __init__(self, pool: ConnectionPool[psycopg.Connection[TupleRow]],
                 recorders: Mapping[str, ApplicationRecorder],
                 followed: Sequence[FollowedProjection]) -> None:
        self.pool = pool
        self.recorders = recorders
        self.followed = followed

    @property
    def applications(self) -> list[str]:
        return sorted(self.recorders)

    def written(self, position: Position) -> bool:
        """Whether the application's log reaches the position at all (no one can wait for a
        position nothing has been written at)."""
        head = self.recorders[position.application].max_notification_id() or 0
        return position.notification_id <= head

    def passed(self, position: Position) -> bool:
        followers = [p for p in self.followed if p.application == position.application]
        if not followers:
            return True
        tracked = self._tracked([p.name for p in followers])
        recorder = self.recorders[position.application]
        for projection in followers:
            at = tracked.get(projection.name, 0)
            if at >= position.notification_id:
                continue
            pending = recorder.select_notifications(
                at, 1, stop=position.notification_id, topics=list(projection.topics),
                inclusive_of_start=False)
            if pending:
                return False
        return True

    def pending(self, positions: Sequence[Position]) -> list[Position]:
        """The positions the read models have not passed yet."""
        return [p for p in positions if not self.passed(p)]

    def _tracked(self, names: list[str]) -> dict[str, int]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT name, position FROM projection_tracking"
                                " WHERE name = ANY(%s)", (names,)).fetchall()
        return {str(name): int(position) for name, position in rows}
