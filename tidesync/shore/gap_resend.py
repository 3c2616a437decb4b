"""Asking a ship to upload a partition's events again when a source_sequence gap stalls (§10.4).

A gap open past `[apply].gap_deadline_seconds` becomes one RESEND downlink command for the
partition's node. Its id follows from node, topic, partition, replay epoch and the missing
sequence, so the recheck that finds the same gap stalled again meets the command it issued.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from tidesync.domain.actor import system_actor
from tidesync.domain.downlink_command import CommandKind, NewCommand, ResendPayload
from tidesync.shore.downlink import DownlinkService
from tidesync.shore.work_queue import SourcePartition

ACTOR = system_actor("apply-processor")


class GapResends(Protocol):
    """Where the apply processor asks for the events behind a stalled gap."""

    def request(self, partition: SourcePartition, missing_sequence: int) -> uuid.UUID:
        """Ask the partition's node to resend from `missing_sequence` on (idempotent);
        returns the command's id."""
        ...


def resend_command(partition: SourcePartition, missing_sequence: int) -> NewCommand:
    """The one RESEND command of this partition, epoch and missing sequence."""
    payload = ResendPayload(partition.topic, partition.partition, partition.replay_epoch,
                            missing_sequence)
    return NewCommand(partition.origin_node_id, CommandKind.RESEND, payload.source_id, payload,
                      actor=ACTOR,
                      reason=f"source_sequence {missing_sequence} missing past the gap deadline")


class DownlinkGapResends:
    """Issues resend requests as downlink commands (PostgreSQL event store)."""

    def __init__(self, downlink: DownlinkService) -> None:
        self.downlink = downlink

    def request(self, partition: SourcePartition, missing_sequence: int) -> uuid.UUID:
        command = resend_command(partition, missing_sequence)
        self.downlink.issue([command])
        return command.command_id

    def close(self) -> None:
        self.downlink.close()
