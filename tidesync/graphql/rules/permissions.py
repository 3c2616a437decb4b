"""Rule release permissions: who drafts and validates, who approves, who publishes and rolls
back (§17.2: approval is its own role's capability)."""

from __future__ import annotations

from tidesync.domain.user import Permission
from tidesync.graphql.permissions import RequiresPermission


class CanAuthorRules(RequiresPermission):
    permission = Permission.AUTHOR_RULES
    message = "your role may not draft or validate sync rules"


class CanApproveRules(RequiresPermission):
    permission = Permission.APPROVE_RULES
    message = "your role may not approve sync rules"


class CanPublishRules(RequiresPermission):
    permission = Permission.PUBLISH_RULES
    message = "your role may not publish or roll back sync rules"
