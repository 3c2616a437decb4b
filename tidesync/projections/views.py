"""Listing views and their status: the functions `tidesync projections` and the console call.

`view_status` reads only: tracking positions, the applications' heads and pending counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eventsourcing.application import Application

from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.engine import Pool, ProjectionStatus
from tidesync.projections.failures import ViewFailure, read_failure
from tidesync.projections.registry import REBUILD_SUFFIX, Catalogue


@dataclass(frozen=True)
class ViewInfo:
    name: str
    description: str
    tables: tuple[str, ...]
    applications: tuple[str, ...]


@dataclass(frozen=True)
class ViewStatus:
    """A view's feeds (one per application it follows) and, while a rebuild runs, its
    shadow feeds."""

    name: str
    feeds: tuple[ProjectionStatus, ...]
    rebuilding: tuple[ProjectionStatus, ...] = ()
    failure: ViewFailure | None = None
    """Why the view stopped (None while it runs)."""

    @property
    def state(self) -> str:
        """RUNNING, or FAILED once it stopped on an error (until a rebuild replaces it)."""
        return "RUNNING" if self.failure is None else "FAILED"

    @property
    def behind(self) -> int:
        return sum(feed.behind for feed in self.feeds)

    @property
    def rate_per_second(self) -> float:
        return sum(feed.rate_per_second for feed in self.feeds)


def _catalogue(catalogue: Catalogue | None) -> Catalogue:
    if catalogue is not None:
        return catalogue
    return default_catalogue()


def list_views(catalogue: Catalogue | None = None) -> list[ViewInfo]:
    """Every registered view with its tables and the applications it follows."""
    catalogue = _catalogue(catalogue)
    infos = []
    for view in catalogue.views:
        applications = view.applications or tuple(spec.name for spec in catalogue.applications)
        infos.append(ViewInfo(view.name, view.description, view.tables, applications))
    return infos


def view_status(apps: Mapping[str, Application[Any]], pool: Pool, name: str | None = None,
                catalogue: Catalogue | None = None) -> list[ViewStatus]:
    """Position, head, events behind and rate of each view's feeds (of `name` only, if
    given); raises RegistryError for an unknown name."""
    catalogue = _catalogue(catalogue)
    names = [name] if name is not None else [view.name for view in catalogue.views]
    statuses = []
    for view_name in names:
        live = catalogue.runner(view_name, apps, pool)
        shadow = catalogue.runner(view_name, apps, pool, suffix=REBUILD_SUFFIX)
        rebuilding = tuple(feed.status() for feed in shadow.feeds if feed.tracking().updated_at)
        statuses.append(ViewStatus(view_name, tuple(live.status()), rebuilding,
                                   read_failure(pool, view_name)))
    return statuses
