"""The console's own application on the read side: `users` streams reach the audit view, and
auditors can replay a user's history (its token digest shown only as a digest of it).

Listed in `tidesync.projections.catalogue.EXTENSION_MODULES` to take effect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventsourcing.application import Application

from tidesync.projections.registry import AggregateKind, ApplicationSpec, Catalogue

USERS = "users"


def _open_users(env: Mapping[str, str]) -> Application[Any]:
    from tidesync.graphql.accounts import UsersApplication

    return UsersApplication(env=dict(env))


def register_read_side(catalogue: Catalogue) -> None:
    catalogue.add_application(ApplicationSpec(USERS, _open_users))
    catalogue.add_kind(AggregateKind("user", USERS, "tidesync.domain.user:User",
                                     sensitive=frozenset({"token_digest"})))
