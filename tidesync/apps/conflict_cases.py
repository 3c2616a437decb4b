"""The `conflict_cases` application: one ConflictCase stream per detected conflict."""

from __future__ import annotations

from typing import Any

from eventsourcing.application import Application

from tidesync.domain.conflict_case import ConflictCase


class ConflictCasesApplication(Application[Any]):
    """ConflictCase streams: evidence and, later, arbitration of concurrent updates."""

    name = "conflict_cases"

    def get_case(self, conflict_id: object) -> ConflictCase:
        case: object = self.repository.get(conflict_id)
        assert isinstance(case, ConflictCase)
        return case
