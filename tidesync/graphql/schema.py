"""The console schema: every area's queries and mutations merged into one Query and one
Mutation, with the request limits and (unless configured) no introspection."""

from __future__ import annotations

from collections.abc import Callable

import strawberry
from graphql import GraphQLError
from strawberry.extensions import (
    AddValidationRules,
    DisableIntrospection,
    MaxTokensLimiter,
    SchemaExtension,
)
from strawberry.schema.config import StrawberryConfig
from strawberry.tools import merge_types
from strawberry.types.execution import ExecutionContext

from tidesync.graphql.audit.queries import AuditQueries, HistoryQueries
from tidesync.graphql.backlogs.queries import BacklogQueries
from tidesync.graphql.common import LONG_SCALAR, Long
from tidesync.graphql.conflicts.mutations import ConflictMutations
from tidesync.graphql.conflicts.queries import ConflictQueries
from tidesync.graphql.jobs.mutations import JobMutations
from tidesync.graphql.jobs.queries import JobQueries
from tidesync.graphql.limits import QueryLimits, limits_rule
from tidesync.graphql.nodes.mutations import NodeMutations
from tidesync.graphql.nodes.queries import NodeQueries
from tidesync.graphql.projections.mutations import ProjectionMutations
from tidesync.graphql.projections.queries import ProjectionQueries
from tidesync.graphql.receipts.queries import ReceiptQueries
from tidesync.graphql.reconcile.queries import ReconcileQueries
from tidesync.graphql.records.queries import RecordQueries
from tidesync.graphql.rules.mutations import RuleMutations
from tidesync.graphql.rules.queries import RuleQueries
from tidesync.graphql.settings import ConsoleSettings
from tidesync.graphql.sync_states.queries import SyncStateQueries
from tidesync.graphql.text import UnstorableTextRule
from tidesync.graphql.users.mutations import UserMutations
from tidesync.graphql.users.queries import UserQueries

Query = merge_types("Query", (
    UserQueries, NodeQueries, BacklogQueries, ReceiptQueries, ConflictQueries, RecordQueries,
    AuditQueries, HistoryQueries, ProjectionQueries, JobQueries, RuleQueries, ReconcileQueries,
    SyncStateQueries,
))
Mutation = merge_types("Mutation", (
    ConflictMutations, NodeMutations, JobMutations, ProjectionMutations, UserMutations,
    RuleMutations,
))


class ConsoleSchema(strawberry.Schema):
    def process_errors(self, errors: list[GraphQLError],
                       execution_context: ExecutionContext | None = None) -> None:
        """Nothing here: the HTTP view masks errors and logs the unexpected ones, without
        their messages (which may quote values)."""


def build_schema(settings: ConsoleSettings) -> ConsoleSchema:
    limits = QueryLimits(settings.max_depth, settings.max_aliases, settings.max_cost,
                         settings.default_page_size, settings.max_page_size)
    extensions: list[Callable[[], SchemaExtension]] = [
        lambda: MaxTokensLimiter(settings.max_tokens),
        lambda: AddValidationRules([limits_rule(limits), UnstorableTextRule]),
    ]
    if not settings.introspection:
        extensions.append(DisableIntrospection)
    return ConsoleSchema(query=Query, mutation=Mutation, extensions=extensions,
                         config=StrawberryConfig(scalar_map={Long: LONG_SCALAR}))


def schema_sdl(settings: ConsoleSettings | None = None) -> str:
    """The schema in SDL (for documentation and clients)."""
    return build_schema(settings or ConsoleSettings()).as_str()


__all__ = ["ConsoleSchema", "Mutation", "Query", "build_schema", "schema_sdl"]
