"""Where a claim's events are cut into target transactions: never inside a source transaction.

A partition's events arrive in source order; with transaction metadata (Debezium's
`provide.transaction.metadata`, the built-in capture's GTID or binlog position) the changes of
one source transaction are a contiguous run with one transaction id. A run is applied in one
target transaction; runs are packed into chunks of about `size` events, and a run longer than
`size` is a chunk of its own (a claim holds at most `max_events_per_job` events, so a source
transaction longer than that is applied in consecutive target transactions, still in order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkPlan:
    """The chunks as (start, end) index ranges of the events, in order, covering
    `[0, applied_until)`; the events from `applied_until` on wait for the next claim."""

    chunks: tuple[tuple[int, int], ...]
    applied_until: int


def transaction_runs(transactions: Sequence[str | None]) -> list[tuple[int, int]]:
    """The (start, end) runs of consecutive events of one transaction; an event without a
    transaction id is a run of its own."""
    runs: list[tuple[int, int]] = []
    start = 0
    while start < len(transactions):
        end = start + 1
        current = transactions[start]
        if current is not None:
            while end < len(transactions) and transactions[end] == current:
                end += 1
        runs.append((start, end))
        start = end
    return runs


def plan_chunks(transactions: Sequence[str | None], size: int, *,
                tail_may_continue: bool) -> ChunkPlan:
    """Cut events (given by their transaction ids, in source order) into chunks of at most
    `size` events that never split a transaction, except one longer than `size`, which is a
    chunk of its own.

    `tail_may_continue`: more events of the last transaction may follow after these (the
    claim was full); unless that transaction is all there is, it waits for the next claim,
    which then holds it whole.
    """
    if size < 1:
        raise ValueError("size must be >= 1")
    runs = transaction_runs(transactions)
    if tail_may_continue and len(runs) > 1 and transactions[runs[-1][0]] is not None:
        runs.pop()
    chunks: list[tuple[int, int]] = []
    start = end = 0
    for run_start, run_end in runs:
        if end > start and end - start + run_end - run_start > size:
            chunks.append((start, end))
            start = run_start
        end = run_end
    if end > start:
        chunks.append((start, end))
    return ChunkPlan(tuple(chunks), end)
