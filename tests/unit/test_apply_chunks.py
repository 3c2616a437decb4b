"""Cutting a claim into target transactions: a source transaction is never split (unless it
is longer than a chunk, then it is a chunk of its own), order is kept, and a transaction the
claim may have cut waits for the next claim."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidesync.shore.apply_chunks import plan_chunks, transaction_runs


def test_runs_group_consecutive_events_of_one_transaction():
    assert transaction_runs(["a", "a", None, None, "b", "a"]) == [
        (0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]


def test_a_transaction_stays_in_one_chunk():
    plan = plan_chunks(["t1", "t2", "t2", "t2", "t3"], 2, tail_may_continue=False)
    assert plan.chunks == ((0, 1), (1, 4), (4, 5))
    assert plan.applied_until == 5


def test_events_without_transactions_fill_chunks_as_before():
    plan = plan_chunks([None] * 5, 2, tail_may_continue=False)
    assert plan.chunks == ((0, 2), (2, 4), (4, 5))


def test_a_full_claim_leaves_its_last_transaction_to_the_next_claim():
    plan = plan_chunks(["t1", "t2", "t2"], 10, tail_may_continue=True)
    assert plan.chunks == ((0, 1),) and plan.applied_until == 1
    # A transaction that is the whole claim is applied: no claim could hold more of it.
    alone = plan_chunks(["t2"] * 4, 2, tail_may_continue=True)
    assert alone.chunks == ((0, 4),) and alone.applied_until == 4
    # Without a transaction id nothing continues.
    assert plan_chunks(["t1", None], 10, tail_may_continue=True).applied_until == 2


def test_a_chunk_size_below_one_is_refused():
    with pytest.raises(ValueError, match="size"):
        plan_chunks(["t"], 0, tail_may_continue=False)


transactions = st.lists(st.sampled_from(["a", "b", "c", None]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(transactions, st.integers(min_value=1, max_value=8), st.booleans())
def test_chunks_cover_the_events_in_order_and_never_split_a_transaction(
        ids: list[str | None], size: int, tail_may_continue: bool) -> None:
    plan = plan_chunks(ids, size, tail_may_continue=tail_may_continue)
    # Contiguous, in order, from the first event to where the plan stops.
    covered = [index for start, end in plan.chunks for index in range(start, end)]
    assert covered == list(range(plan.applied_until))
    runs = transaction_runs(ids)
    starts = {start for start, _ in runs}
    for start, end in plan.chunks:
        # A chunk begins at a run and ends at one: no transaction is cut.
        assert start in starts and (end in starts or end == len(ids))
        inside = [run for run in runs if start <= run[0] < end]
        assert end - start <= size or len(inside) == 1
    if plan.applied_until < len(ids):
        # Only the last transaction waits, and only when more of it may follow.
        assert tail_may_continue
        assert (plan.applied_until, len(ids)) == runs[-1]
        assert ids[-1] is not None and len(runs) > 1
