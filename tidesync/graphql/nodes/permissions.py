"""Node permissions: only node managers see a signing secret, even in an answer they got."""

from __future__ import annotations

from tidesync.graphql.permissions import CanManageNodes


class CanSeeNodeSecret(CanManageNodes):
    message = "only node managers may see a node secret"
