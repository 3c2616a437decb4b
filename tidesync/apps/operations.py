"""Operator actions that change no other aggregate (a projection rebuild): an `OperatorAction`
stream each, in the `operations` application, so they reach the audit view with actor and reason.
"""

from __future__ import annotations

import uuid
from typing import Any

from eventsourcing.application import Application
from eventsourcing.utils import register_topic

from tidesync.domain.operator_action import OperatorAction

# Streams written before OperatorAction moved to the domain name it by its old module.
register_topic("tidesync.projections.operations:OperatorAction", OperatorAction)


class OperationsApplication(Application[Any]):
    """OperatorAction streams, in their own events table."""

    name = "operations"

    def action(self, action_id: uuid.UUID) -> OperatorAction:
        action: object = self.repository.get(action_id)
        assert isinstance(action, OperatorAction)
        return action
