"""A shore's resend request in the ship state store (§10.4): the events of a partition from a
source sequence on that the shore answered RECEIVED but says it does not hold.

The events themselves stay in the queue until their terminal results let the checkpoint pass
them, so sending them again needs only their rows: RECEIVED goes back to READY, and the queue
is read again from the first of them (a re-read record with a sendable row is sent again with
its stored sequence). Rows already terminal, expired or blocked are never touched, so nothing
the checkpoint passed is ever sent again.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidesync.cdc.kafka import PartitionKey
from tidesync.domain.ship_intake import EventState
from tidesync.ship.state.database import ShipStateDatabase
from tidesync.ship.state.watermarks import SQLiteWatermarks, Watermark

_EVENT_AT_SEQUENCE = (
    "SELECT state FROM event_state WHERE direction = ? AND topic = ? AND kafka_partition = ?"
    " AND replay_epoch = ? AND source_sequence = ?"
)
_FIRST_RECEIVED_FROM = (
    "SELECT min(kafka_offset) FROM event_state WHERE direction = ? AND topic = ?"
    " AND kafka_partition = ? AND replay_epoch = ? AND source_sequence >= ?"
    " AND state = 'RECEIVED'"
)
_REOPEN_FROM = (
    "UPDATE event_state SET state = 'READY', updated_at = ? WHERE direction = ? AND topic = ?"
    " AND kafka_partition = ? AND replay_epoch = ? AND source_sequence >= ?"
    " AND state = 'RECEIVED'"
)


@dataclass(frozen=True, slots=True)
class ResendStart:
    """What the state store holds for a resend request, before anything is changed.

    `state` is that of the event with the missing sequence (None: no event has it);
    `reread_from` the first offset of the RECEIVED events from that sequence on (None: none)."""

    watermark: Watermark | None
    state: EventState | None
    reread_from: int | None


class SQLiteResends:
    """Finds and reopens the events a resend request names, in one partition and epoch."""

    def __init__(self, database: ShipStateDatabase, watermarks: SQLiteWatermarks) -> None:
        self.database = database
        self.watermarks = watermarks

    def _where(self, key: PartitionKey, replay_epoch: int) -> tuple[object, ...]:
        return (self.database.direction.value, key.topic, key.partition, replay_epoch)

    def start(self, key: PartitionKey, replay_epoch: int, from_sequence: int) -> ResendStart:
        """The partition's watermark, the state of the event with `from_sequence`, and where
        its received events from that sequence on begin."""
        conn = self.database.conn
        where = (*self._where(key, replay_epoch), from_sequence)
        row = conn.execute(_EVENT_AT_SEQUENCE, where).fetchone()
        first = conn.execute(_FIRST_RECEIVED_FROM, where).fetchone()[0]
        return ResendStart(self.watermarks.watermark(key),
                           None if row is None else EventState(row[0]),
                           None if first is None else int(first))

    def reopen(self, key: PartitionKey, replay_epoch: int, from_sequence: int) -> int:
        """Make the RECEIVED events from `from_sequence` on sendable again (READY) and move
        the received watermark back with them; returns how many."""
        with self.database.transaction() as conn:
            reopened = conn.execute(_REOPEN_FROM, (
                self.database.now_text(), *self._where(key, replay_epoch), from_sequence,
            )).rowcount
            self.watermarks.recompute(conn, key, replay_epoch)
        return int(reopened)
