"""The registry of what the read side knows: event-sourced applications, the aggregate kinds
they hold (for the audit view and history), and the views with the projections that feed them.

`tidesync.projections.catalogue.default_catalogue()` fills one with everything tidesync has.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eventsourcing.application import Application

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.projections.engine import (
    Pool,
    PostgresProjectionRunner,
    PostgresViewRunner,
    Projection,
    Refresher,
)
from tidesync.projections.states import digest

REBUILD_SUFFIX = "__rebuild"

AppFactory = Callable[[Mapping[str, str]], Application[Any]]
FieldRenderer = Callable[[object], object]


class RegistryError(TidesyncError, LookupError):
    """An unknown view, application or aggregate kind; `code` is stable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message


@dataclass(frozen=True)
class ApplicationSpec:
    """An event-sourced application: its pinned name and how to open it on an event store
    environment (the `eventsourcing` settings that `tidesync.bootstrap.event_store` makes)."""

    name: str
    open: AppFactory


@dataclass(frozen=True)
class AggregateKind:
    """A kind of aggregate as auditors name it (`apply_job`), where its streams live, and how
    fields that may hold business data are shown: each renderer turns the field's value into
    something without values (fields listed in `sensitive` become a digest)."""

    name: str
    application: str
    aggregate_topic: str
    """`module:Class` of the aggregate class."""
    renderers: Mapping[str, FieldRenderer] = field(default_factory=dict)
    sensitive: frozenset[str] = frozenset()

    def render(self, name: str, value: object) -> object:
        """A field's value as it may be shown (already plain data, see states.plain)."""
        renderer = self.renderers.get(name)
        if renderer is not None:
            return renderer(value)
        if name in self.sensitive:
            return {"sha256": digest(value)}
        return value


@dataclass(frozen=True)
class ViewSettings:
    """Settings of the views: the conflict SLA (from opening, unless the case carries its own
    due time), how often non-event inputs are copied, and notifications per batch."""

    conflict_sla: dt.timedelta = dt.timedelta(hours=24)
    refresh_seconds: float = 5.0
    batch_size: int = 50


@dataclass(frozen=True)
class ViewContext:
    """What a view's factories get: physical table names (shadow copies during a rebuild), the
    open applications, the catalogue and settings."""

    suffix: str
    apps: Mapping[str, Application[Any]]
    catalogue: Catalogue
    settings: ViewSettings

    def table(self, name: str) -> str:
        return f"{name}{self.suffix}"


FeedsFactory = Callable[[ViewContext], Sequence[tuple[str, Projection]]]
RefresherFactory = Callable[[ViewContext], Refresher]


@dataclass(frozen=True)
class ViewSpec:
    """A view: the tables it owns (renamed together by a rebuild), the projections that feed
    it as (application name, projection) pairs, and an optional refresher."""

    name: str
    tables: tuple[str, ...]
    feeds: FeedsFactory
    refresher: RefresherFactory | None = None
    description: str = ""
    applications: tuple[str, ...] = ()
    """The applications it follows; empty: every registered one."""
    primary: str = ""
    """The application whose feed keeps the view's own tracking name when others join it
    (so a view that gains a feed does not start its first one over)."""


def tracking_name(view: str, application: str, feeds: int, suffix: str = "",
                  primary: str = "") -> str:
    """A feed's row in projection_tracking: the view's name when one application (or the
    primary one) feeds it, else `view.application`."""
    base = view if feeds == 1 or application == primary else f"{view}.{application}"
    return f"{base}{suffix}"


class OpenApplications(Mapping[str, Application[Any]]):
    """Applications by name, closing those it opened itself."""

    def __init__(self, apps: dict[str, Application[Any]], owned: set[str]) -> None:
        self._apps = apps
        self._owned = owned

    def __getitem__(self, name: str) -> Application[Any]:
        try:
            return self._apps[name]
        except KeyError:
            raise RegistryError("UNKNOWN_APPLICATION", f"no application {name!r}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._apps)

    def __len__(self) -> int:
        return len(self._apps)

    def close(self) -> None:
        for name in self._owned:
            self._apps[name].close()
        self._owned.clear()


class Catalogue:
    """Applications, aggregate kinds and views, by name; add to it at start-up."""

    def __init__(self, settings: ViewSettings | None = None) -> None:
        self.settings = settings or ViewSettings()
        self._applications: dict[str, ApplicationSpec] = {}
        self._kinds: dict[str, AggregateKind] = {}
        self._views: dict[str, ViewSpec] = {}

    def add_application(self, spec: ApplicationSpec) -> None:
        self._applications[spec.name] = spec

    def add_kind(self, kind: AggregateKind) -> None:
        self._kinds[kind.name] = kind

    def add_view(self, view: ViewSpec) -> None:
        self._views[view.name] = view

    @property
    def applications(self) -> list[ApplicationSpec]:
        return list(self._applications.values())

    @property
    def kinds(self) -> list[AggregateKind]:
        return list(self._kinds.values())

    @property
    def views(self) -> list[ViewSpec]:
        return list(self._views.values())

    def view(self, name: str) -> ViewSpec:
        try:
            return self._views[name]
        except KeyError:
            known = ", ".join(sorted(self._views))
            raise RegistryError("UNKNOWN_VIEW",
                                f"no view {name!r} (known: {known})") from None

    def kind(self, name: str) -> AggregateKind:
        try:
            return self._kinds[name]
        except KeyError:
            known = ", ".join(sorted(self._kinds))
            raise RegistryError("UNKNOWN_KIND",
                                f"no aggregate kind {name!r} (known: {known})") from None

    def kind_name(self, aggregate_topic: str) -> str:
        """The kind of an aggregate class (`module:Class`); unregistered classes are named
        after the class (`ApplyJob` → `apply_job`)."""
        for kind in self._kinds.values():
            if kind.aggregate_topic == aggregate_topic:
                return kind.name
        class_name = aggregate_topic.rpartition(":")[2].rpartition(".")[2]
        return re.sub(r"(?<!^)(?=[A-Z])", "_", class_name).lower()

    def open_applications(self, env: Mapping[str, str],
                          existing: Mapping[str, Application[Any]] | None = None,
                          ) -> OpenApplications:
        """Every registered application on the event store `env`, reusing `existing` ones."""
        apps = dict(existing or {})
        owned: set[str] = set()
        try:
            for spec in self._applications.values():
                if spec.name not in apps:
                    apps[spec.name] = spec.open(env)
                    owned.add(spec.name)
        except BaseException:
            OpenApplications(apps, owned).close()
            raise
        return OpenApplications(apps, owned)

    def runner(self, name: str, apps: Mapping[str, Application[Any]], pool: Pool,
               suffix: str = "", batch_size: int | None = None) -> PostgresViewRunner:
        """A runner of the view `name`; with `suffix`, over its shadow tables and tracking."""
        spec = self.view(name)
        context = ViewContext(suffix, apps, self, self.settings)
        feeds = spec.feeds(context)
        lock_key = f"{spec.name}{suffix}"
        runners = [
            PostgresProjectionRunner(
                projection, apps[application], pool,
                batch_size=batch_size or self.settings.batch_size,
                tracking_name=tracking_name(spec.name, application, len(feeds), suffix,
                                            spec.primary),
                lock_key=lock_key)
            for application, projection in feeds
        ]
        refresher = None if spec.refresher is None else spec.refresher(context)
        return PostgresViewRunner(spec.name, runners, pool, refresher,
                                  self.settings.refresh_seconds, lock_key)

    def runners(self, apps: Mapping[str, Application[Any]],
                pool: Pool) -> list[PostgresViewRunner]:
        """A runner of every view (what `shore work` keeps current)."""
        return [self.runner(view.name, apps, pool) for view in self.views]
