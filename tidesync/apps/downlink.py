"""The `downlink` application: one DownlinkCommand stream per shore-to-ship command."""

from __future__ import annotations

from typing import Any

from eventsourcing.application import Application

from tidesync.domain.downlink_command import DownlinkCommand


class DownlinkApplication(Application[Any]):
    """DownlinkCommand streams: every shore-to-ship command and the ship's answer to it."""

    name = "downlink"

    def get_command(self, command_id: object) -> DownlinkCommand:
        command: object = self.repository.get(command_id)
        assert isinstance(command, DownlinkCommand)
        return command
