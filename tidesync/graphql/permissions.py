"""Permission classes for fields: each checks one capability of the signed-in user's role.

`allow(...)` puts them on a field; with `hide=True` a nullable field answers null instead of
an error (how masked values are shown).
"""

from __future__ import annotations

from typing import Any, ClassVar

from strawberry.extensions.field_extension import FieldExtension
from strawberry.permission import BasePermission, PermissionExtension

from tidesync.domain.user import Permission
from tidesync.graphql.errors import Forbidden


class RequiresPermission(BasePermission):
    permission: ClassVar[Permission]
    error_class = Forbidden

    def has_permission(self, source: Any, info: Any, **kwargs: Any) -> bool:
        return bool(info.context.principal.may(self.permission))


class CanView(RequiresPermission):
    permission = Permission.VIEW
    message = "your role may not view the console"


class CanReadEvidenceValues(RequiresPermission):
    permission = Permission.READ_EVIDENCE_VALUES
    message = "your role may not see evidence values or record keys"


class CanReadAudit(RequiresPermission):
    permission = Permission.READ_AUDIT
    message = "your role may not read audit events or aggregate history"


class CanReplayJobs(RequiresPermission):
    permission = Permission.REPLAY_JOBS
    message = "your role may not replay apply jobs"


class CanRebuildProjections(RequiresPermission):
    permission = Permission.REBUILD_PROJECTIONS
    message = "your role may not rebuild projections"


class CanCancelConflicts(RequiresPermission):
    permission = Permission.CANCEL_CONFLICTS
    message = "your role may not cancel conflicts"


class CanRedispatchConflicts(RequiresPermission):
    permission = Permission.REDISPATCH_CONFLICTS
    message = "your role may not send decisions again"


class CanDecideConflicts(RequiresPermission):
    permission = Permission.DECIDE_CONFLICTS
    message = "your role may not decide conflicts"


class CanManageNodes(RequiresPermission):
    permission = Permission.MANAGE_NODES
    message = "your role may not manage nodes"


class CanManageUsers(RequiresPermission):
    permission = Permission.MANAGE_USERS
    message = "your role may not manage users"


def allow(*permissions: type[BasePermission], hide: bool = False) -> list[FieldExtension]:
    """Field extensions requiring every one of `permissions`."""
    return [PermissionExtension([p() for p in permissions], fail_silently=hide)]
