"""Conflict permissions, checked per value: evidence values need READ_EVIDENCE_VALUES, and
values of columns configured as sensitive also READ_SENSITIVE_COLUMNS."""

from __future__ import annotations

from typing import Any

from tidesync.domain.user import Permission
from tidesync.graphql.permissions import RequiresPermission


class CanSeeEvidenceValue(RequiresPermission):
    permission = Permission.READ_EVIDENCE_VALUES
    message = "your role may not see this evidence value"

    def has_permission(self, source: Any, info: Any, **kwargs: Any) -> bool:
        return value_visible(info.context.principal, bool(getattr(source, "sensitive", True)))


def value_visible(principal: Any, sensitive: bool) -> bool:
    if not principal.may(Permission.READ_EVIDENCE_VALUES):
        return False
    return not sensitive or bool(principal.may(Permission.READ_SENSITIVE_COLUMNS))
