"""Blocking store calls run in the thread pool, never on the event loop. Driver errors become
client errors here, at the single boundary: an unreachable store UNAVAILABLE, a value the
database refuses BAD_USER_INPUT."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from eventsourcing.persistence import PersistenceError
from psycopg_pool import PoolTimeout
from starlette.concurrency import run_in_threadpool

from tidesync.apps.nodes import NodeStoreUnavailable
from tidesync.apps.users import UserStoreUnavailable
from tidesync.graphql.console import ConsoleUnavailable
from tidesync.graphql.errors import BadUserInput, Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

STORE_ERRORS = (ConsoleUnavailable, psycopg.OperationalError, PoolTimeout, PersistenceError,
                NodeStoreUnavailable, UserStoreUnavailable)


async def blocking(fn: Callable[..., T], *args: Any) -> T:
    try:
        return await run_in_threadpool(fn, *args)
    except STORE_ERRORS as error:
        # Our own "unavailable" errors carry only the driver error's type name.
        detail = error.args[0] if isinstance(error.args[0:1], tuple) and error.args and (
            isinstance(error, ConsoleUnavailable | NodeStoreUnavailable | UserStoreUnavailable)
        ) else ""
        log.warning("a console store is unavailable: %s %s", type(error).__name__, detail)
        raise Unavailable("a store is unavailable; retry shortly", retryAfterSeconds=5) from None
    except psycopg.DataError:
        # The database refused a value the request carried (a NUL character, a number out of
        # range); its message may quote the value, so it is not passed on.
        raise BadUserInput("a value in the request cannot be used (e.g. a NUL character)",
                           reason="INVALID_VALUE") from None
