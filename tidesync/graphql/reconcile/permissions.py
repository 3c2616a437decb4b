"""Reconciliation permissions: every console role reads the sentinel; the differing keys
themselves (record keys are business data) only a role that may see evidence values."""

from __future__ import annotations

from tidesync.domain.user import Permission
from tidesync.graphql.permissions import RequiresPermission


class CanSeeDifferingKeys(RequiresPermission):
    permission = Permission.READ_EVIDENCE_VALUES
    message = "your role may not see the differing keys of a reconciliation"
