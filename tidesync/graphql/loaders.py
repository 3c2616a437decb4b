"""Per-request DataLoaders: rows that several objects of one answer share are read once, in
one batch, off the event loop."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from strawberry.dataloader import DataLoader

from tidesync.domain.conflict_case import ConflictCase
from tidesync.graphql.backlogs.loaders import BacklogRow, fetch_backlogs_by_node
from tidesync.graphql.conflicts.loaders import load_cases
from tidesync.graphql.console import Console, PrivilegedRead
from tidesync.graphql.nodes.loaders import NodeRow, fetch_nodes_by_id
from tidesync.graphql.threads import blocking

K = TypeVar("K")
V = TypeVar("V")


@dataclass
class Loaders:
    node: DataLoader[str, NodeRow | None]
    backlogs_of_node: DataLoader[str, list[BacklogRow]]
    conflict_case: DataLoader[uuid.UUID, ConflictCase | None]
    privileged_read: DataLoader[PrivilegedRead, None]
    """Records the privileged reads of one answer together (one save)."""


def make_loaders(console: Console, actor: Callable[[], str],
                 trace_id: Callable[[], str]) -> Loaders:
    def record(reads: Sequence[PrivilegedRead]) -> list[None]:
        console.record_reads(reads, actor(), trace_id())
        return [None] * len(reads)

    return Loaders(
        node=_loader(lambda ids: fetch_nodes_by_id(console.pool, ids)),
        backlogs_of_node=_loader(lambda ids: fetch_backlogs_by_node(console.pool, ids)),
        conflict_case=_loader(lambda ids: load_cases(console.apps().conflict_cases, ids)),
        privileged_read=_loader(record),
    )


def _loader(fetch: Callable[[Sequence[K]], Sequence[V]]) -> DataLoader[K, V]:
    async def load(keys: list[K]) -> Sequence[V]:
        return await blocking(fetch, keys)

    loader: DataLoader[K, V] = DataLoader(load_fn=load, max_batch_size=500)
    return loader


__all__ = ["Loaders", "make_loaders"]
