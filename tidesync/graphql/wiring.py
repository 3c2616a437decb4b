"""Builds the console from a Config: the event store, the read-model database, the shore
target (for current revisions) and the master key (for node secrets)."""

from __future__ import annotations

from tidesync.bootstrap import build_target_applier, event_store_env, postgres_conninfo
from tidesync.config import Config
from tidesync.graphql.console import Console, ConsoleStores
from tidesync.ingress.master_key import SecretBox, load_master_key
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.registry import ViewSettings
from tidesync.target.contract import TargetApplier


def build_console(config: Config) -> Console:
    """The console over the configured stores."""

    def open_target() -> TargetApplier:
        # The same applier `shore work` and `tidesync conflicts decide` use (MySQL or SQLite).
        return build_target_applier(config.target)

    def open_box() -> SecretBox:
        return SecretBox(load_master_key(config.shore, create=True))

    stores = ConsoleStores(
        event_store_env=event_store_env(config.event_store),
        conninfo=postgres_conninfo(config.event_store), open_target=open_target,
        open_box=open_box, pool_size=config.event_store.postgres_pool_size,
    )
    return Console(config.console, stores,
                   catalogue=default_catalogue(ViewSettings.from_config(config)))
