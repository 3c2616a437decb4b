"""Connections to a business database (`[target]` on the shore, `[ship_target]` on a ship)
for reconciliation, through SQLAlchemy, which is loaded by the first connection: a `tidesync
ship run` that is never asked to reconcile does not load it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tidesync.config import TargetConfig

if TYPE_CHECKING:
    import sqlalchemy as sa

    from tidesync.ship.reconcile import BusinessConnection


def business_connection(target: TargetConfig) -> BusinessConnection:
    """Opens a SQLAlchemy connection to a business database (MySQL, or `sqlite_path`)."""

    @contextlib.contextmanager
    def connect() -> Iterator[sa.Connection]:
        import sqlalchemy as sa  # loaded by the first reconciliation

        from tidesync.target import digests  # needs SQLAlchemy

        if target.sqlite_path:
            url = sa.URL.create("sqlite", database=target.sqlite_path)
        else:
            url = sa.URL.create("mysql+pymysql", username=target.user,
                                password=target.password, host=target.host, port=target.port,
                                database=target.database or None,
                                query={"charset": "utf8mb4",
                                       "connect_timeout": str(target.connect_timeout_seconds)})
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        try:
            with engine.connect() as connection:
                digests.prepare_connection(connection)
                yield connection
        finally:
            engine.dispose()
    return connect
