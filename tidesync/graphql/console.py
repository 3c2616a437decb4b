"""The console's long-lived parts: the read-model pool, the event-sourced applications it
reads and commands, and the services over them. One per server; requests share it.

Applications open on first use, so the server starts while PostgreSQL is down (requests
then answer UNAVAILABLE until it is back).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
from eventsourcing.application import Application
from eventsourcing.persistence import ApplicationRecorder, PersistenceError
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.apps.apply_jobs import ApplyJobsApplication
from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.apps.conflicts import CommandIssuer, ConflictService, RevisionReader
from tidesync.apps.jobs import JobQueue
from tidesync.apps.master_key import SecretBox
from tidesync.apps.nodes import NodesApplication, NodeService
from tidesync.apps.rules import RuleReleasesApplication, SchemaLookup
from tidesync.apps.users import UsersApplication, UserService
from tidesync.domain.clock import Clock, utc_now
from tidesync.domain.errors import TidesyncError, Unavailable
from tidesync.domain.operator_action import OperatorAction
from tidesync.domain.rules.release import RuleActivationReports
from tidesync.graphql.accounts import TokenAuthenticator
from tidesync.graphql.digests import Digests
from tidesync.graphql.limits import QueryLimits
from tidesync.graphql.positions import FollowedProjection, ReadModelWaits
from tidesync.graphql.settings import ConsoleSettings
from tidesync.graphql.waits import WaitGate
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.registry import Catalogue, OpenApplications

log = logging.getLogger(__name__)

Pool = ConnectionPool[psycopg.Connection[TupleRow]]



READ_REASON = "console query"


@dataclass(frozen=True)
class PrivilegedRead:
    """A query that showed business values or audit data: what was read, of which object."""

    what: str
    target: str


class ConsoleUnavailable(Unavailable):
    """A store the console needs cannot be reached right now."""


class ClosingRevisionReader(RevisionReader, Protocol):
    def close(self) -> None: ...


@dataclass(frozen=True)
class ConsoleStores:
    """Where the console's data lives and the adapters it works through, each made by the
    composition root: the event store (`eventsourcing` env), the read-model database and its
    schema, the current revisions on the shore target, the apply work index, the downlink and
    the node secret sealing key."""

    event_store_env: dict[str, str]
    conninfo: str
    migrate: Callable[[], None]
    open_revisions: Callable[[Pool], ClosingRevisionReader]
    open_queue: Callable[[Pool], JobQueue]
    open_downlink: Callable[[Application[Any]], CommandIssuer]
    open_box: Callable[[], SecretBox]
    digest_key: Callable[[], bytes]
    pool_size: int = 4
    pool_timeout: float = 5.0
    rule_schemas: Callable[[], AbstractContextManager[SchemaLookup]] | None = None
    """The shore target's table schemas rule validation checks (None: static checks only)."""
    rule_activations: Callable[[Pool], RuleActivationReports] | None = None
    """What nodes report running of each rule (None: nothing reported)."""


@dataclass
class ConsoleApps:
    """The event-sourced applications the console reads and commands; `every` also holds the
    read side's other applications (the audit view follows them all)."""

    conflict_cases: ConflictCasesApplication
    apply_jobs: ApplyJobsApplication
    nodes: NodesApplication
    users: UsersApplication
    every: OpenApplications

    def by_name(self) -> dict[str, Application[Any]]:
        return {**dict(self.every), self.users.name: self.users}

    def close(self) -> None:
        self.every.close()
        if self.users.name not in set(self.every):
            self.users.close()


@dataclass
class Console:
    settings: ConsoleSettings
    stores: ConsoleStores
    clock: Clock = utc_now
    catalogue: Catalogue = field(default_factory=default_catalogue)
    pool: Pool = field(init=False)
    authenticator: TokenAuthenticator = field(init=False)
    _apps: ConsoleApps | None = field(default=None, init=False)
    _followed: tuple[FollowedProjection, ...] | None = field(default=None, init=False)
    _revisions: ClosingRevisionReader | None = field(default=None, init=False)
    _digests: Digests | None = field(default=None, init=False)
    wait_gate: WaitGate = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.pool = self._new_pool()
        self.wait_gate = WaitGate(self.settings.max_waits_per_user,
                                  self.settings.max_waits_total)
        self.authenticator = TokenAuthenticator(
            lambda: self.apps().users, ttl=self.settings.auth_cache_ms / 1000,
            token_lifetime=dt.timedelta(hours=self.settings.token_lifetime_hours),
            clock=self.clock)

    def sensitive_column(self, database: str, table: str, column: str) -> bool:
        """Whether a column's evidence values are shown only to READ_SENSITIVE_COLUMNS."""
        name = f"{database}.{table}.{column}"
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self._sensitive_patterns)

    @property
    def _sensitive_patterns(self) -> list[str]:
        return list(self.settings.sensitive_columns)

    @property
    def limits(self) -> QueryLimits:
        s = self.settings
        return QueryLimits(s.max_depth, s.max_aliases, s.max_cost, s.default_page_size,
                           s.max_page_size)

    def _new_pool(self) -> Pool:
        return ConnectionPool(
            self.stores.conninfo, min_size=1, max_size=self.stores.pool_size,
            timeout=self.stores.pool_timeout, open=False, name="tidesync-console",
            kwargs={"autocommit": True}, reconnect_timeout=24 * 3600,
        )

    def start(self) -> None:
        """Open the pool and bring the schema up to date (blocking); failures are logged and
        requests answer UNAVAILABLE until PostgreSQL is back. Starting again after `close`
        opens everything anew."""
        if self.pool.closed:
            self.pool = self._new_pool()
        self.wait_gate = WaitGate(self.settings.max_waits_per_user,
                                  self.settings.max_waits_total)
        self.pool.open(wait=False)
        try:
            self.stores.migrate()
            self.apps()
        except (psycopg.OperationalError, TidesyncError) as error:
            log.warning("console not ready at startup: %s", type(error).__name__)

    def close(self) -> None:
        with self._lock:
            if self._revisions is not None:
                self._revisions.close()
                self._revisions = None
            if self._apps is not None:
                self._apps.close()
                self._apps = None
        self.pool.close()

    def apps(self) -> ConsoleApps:
        """The applications, opened on first use (blocking). Opening creates their tables if
        needed, which can collide with another process doing the same: tried twice."""
        with self._lock:
            for attempt in (1, 2):
                if self._apps is not None:
                    break
                try:
                    self._apps = self._open_apps()
                except PersistenceError as error:
                    log.warning("opening the console applications failed (%d): %s", attempt,
                                type(error).__name__)
                    if attempt == 2:
                        raise ConsoleUnavailable(type(error).__name__) from error
            assert self._apps is not None
            return self._apps

    def _open_apps(self) -> ConsoleApps:
        # The console reads and commands lightly: one connection per application, more only
        # while busy (the library's default keeps five open for each).
        env = {**self.stores.event_store_env, "POSTGRES_POOL_SIZE": "1",
               "POSTGRES_MAX_OVERFLOW": str(max(self.stores.pool_size - 1, 0))}
        every = self.catalogue.open_applications(env)
        try:
            conflict_cases, apply_jobs = every["conflict_cases"], every["apply_jobs"]
            nodes = every["nodes"]
            assert isinstance(conflict_cases, ConflictCasesApplication)
            assert isinstance(apply_jobs, ApplyJobsApplication)
            assert isinstance(nodes, NodesApplication)
            users = every[UsersApplication.name] if UsersApplication.name in set(every) else (
                UsersApplication(env=env))
            assert isinstance(users, UsersApplication)
        except BaseException:
            every.close()
            raise
        return ConsoleApps(conflict_cases, apply_jobs, nodes, users, every)

    def followed(self) -> tuple[FollowedProjection, ...]:
        """Every projection feed the shore runs: what a read may wait for."""
        if self._followed is None:
            runners = self.catalogue.runners(self.apps().every, self.pool)
            self._followed = tuple(
                FollowedProjection(feed.tracking_name, feed.app.name,
                                   tuple(feed.projection.topics))
                for runner in runners for feed in runner.feeds)
        return self._followed

    # ------------------------------------------------------------------ services

    def conflict_service(self) -> ConflictService:
        with self._lock:
            if self._revisions is None:
                self._revisions = self.stores.open_revisions(self.pool)
            revisions = self._revisions
        return ConflictService(self.apps().conflict_cases, revisions)

    def downlink_service(self) -> CommandIssuer:
        """Over the console's own downlink application (closed with the console)."""
        return self.stores.open_downlink(self.apps().every["downlink"])

    def work_queue(self) -> JobQueue:
        """The apply work index, over the console's pool."""
        return self.stores.open_queue(self.pool)

    def node_service(self, sealing: bool) -> NodeService:
        return NodeService(self.apps().nodes, self.stores.open_box() if sealing else None)

    def digests(self) -> Digests:
        """Keyed digests for values a role may not see (the key is read on first use)."""
        if self._digests is None:
            self._digests = Digests(self.stores.digest_key())
        return self._digests

    def rule_releases(self) -> RuleReleasesApplication:
        app = self.apps().every[RuleReleasesApplication.name]
        assert isinstance(app, RuleReleasesApplication)
        return app

    def rule_activations(self) -> RuleActivationReports | None:
        opener = self.stores.rule_activations
        return None if opener is None else opener(self.pool)

    def user_service(self) -> UserService:
        return UserService(self.apps().users, clock=self.clock)

    def record_reads(self, reads: Sequence[PrivilegedRead], actor: str, trace_id: str) -> None:
        """Record privileged reads (§17.3) as operator actions, all in one save."""
        operations = self.apps().every["operations"]
        actions = []
        for read in reads:
            action = OperatorAction.request(uuid.uuid4(), read.what, read.target, self.clock(),
                                            actor, READ_REASON, trace_id)
            action.complete(self.clock(), {}, actor, READ_REASON, trace_id)
            actions.append(action)
        operations.save(*actions)

    def waits(self) -> ReadModelWaits:
        recorders: dict[str, ApplicationRecorder] = {}
        for name, app in self.apps().by_name().items():
            recorder = app.recorder
            assert isinstance(recorder, ApplicationRecorder)
            recorders[name] = recorder
        return ReadModelWaits(self.pool, recorders, self.followed())
