"""The sync API's request limits and the content comparison of re-sent events."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from contextlib import AbstractContextManager
from decimal import Decimal

import pytest

from tests.clocks import rounded_now
from tidesync.config import ShoreConfig
from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.ingress.inbox import content_digest
from tidesync.ingress.limits import LimitExceeded, LimitReason, Limits, RequestLimiter
from tidesync.wire import codec

NOW = rounded_now()


class Ticks:
    def __init__(self) -> None:
        self.value = 0.0

    def __call__(self) -> float:
        return self.value


def limiter(rate: float = 1, burst: float = 2, concurrency: int = 2, in_flight: int = 3
            ) -> tuple[RequestLimiter, Ticks]:
    ticks = Ticks()
    return RequestLimiter(Limits(rate, burst, concurrency, in_flight), ticks), ticks


def refused(slot: AbstractContextManager[None]) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as caught, slot:
        pass
    return caught.value


def test_the_global_in_flight_cap() -> None:
    limits, _ = limiter(in_flight=2)
    with limits.request_slot(), limits.request_slot():
        error = refused(limits.request_slot())
        assert error.reason is LimitReason.SERVER_BUSY and error.retry_after == 1
    with limits.request_slot():
        pass


def test_concurrent_requests_per_node() -> None:
    limits, _ = limiter(rate=100, burst=100, concurrency=2)
    with limits.node_slot("a"), limits.node_slot("a"):
        error = refused(limits.node_slot("a"))
        assert error.reason is LimitReason.TOO_MANY_CONCURRENT_REQUESTS
        with limits.node_slot("b"):
            pass
    with limits.node_slot("a"):
        pass


def test_the_request_rate_per_node_with_retry_after() -> None:
    limits, ticks = limiter(rate=0.25, burst=2)
    for _ in range(2):
        with limits.node_slot("a"):
            pass
    error = refused(limits.node_slot("a"))
    assert error.reason is LimitReason.RATE_LIMITED and error.retry_after == 4
    with limits.node_slot("b"):
        pass
    ticks.value = 4.0
    with limits.node_slot("a"):
        pass


def test_a_refused_request_costs_no_token() -> None:
    limits, _ = limiter(rate=1, burst=2, concurrency=1)
    with limits.node_slot("a"):
        refused(limits.node_slot("a"))
    with limits.node_slot("a"):  # the second token is still there
        pass


def test_new_limits_keep_the_tokens_already_spent() -> None:
    limits, _ = limiter(rate=1, burst=2)
    for _ in range(2):
        with limits.node_slot("a"):
            pass
    limits.reconfigure(Limits(1, 1000, 2, 3))
    assert refused(limits.node_slot("a")).reason is LimitReason.RATE_LIMITED


# ----------------------------------------------------------------------------- content


def event(**changes: object) -> ChangeEvent:
    base = ChangeEvent(
        event_id=uuid.UUID(int=7), origin_node_id="ship-1", source_connector_id="c",
        source_topic="t", source_partition=0, source_position=5,
        record=RecordKey.of("db", "parts", {"id": 1}), operation=Operation.UPDATE,
        captured_at=NOW, before={"id": 1, "price": Decimal("1.50"), "name": "a"},
        after={"id": 1, "price": Decimal("2.50"), "name": "b"},
        base_revision=Revision(bytes(16)), result_revision=Revision(b"\x01" * 16),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_content_digest_ignores_interning_and_column_order() -> None:
    first = event()
    reordered = event(after={"name": "b", "price": Decimal("2.50"), "id": 1},
                      before={"name": "a", "id": 1, "price": Decimal("1.50")})
    assert content_digest(first) == content_digest(reordered)
    # The same event interned in another batch decodes to the same content.
    names = codec.NameTable(["zzz", "other"])
    wire = codec.event_to_wire(first, names)
    assert content_digest(codec.event_from_wire(wire, names)) == content_digest(
        codec.as_received(first))
    assert content_digest(event(schema_version="1.3")) == content_digest(first)


@pytest.mark.parametrize("changes", [
    {"after": {"id": 1, "price": Decimal("2.5"), "name": "b"}},  # scale is content
    {"after": {"id": 1, "price": 2.5, "name": "b"}},
    {"after": {"id": 1, "price": Decimal("2.50"), "name": b"b"}},
    {"trace_id": "other"}, {"source_position": 6}, {"result_revision": Revision(b"\x02" * 16)},
    {"captured_at": NOW + dt.timedelta(microseconds=1)}, {"schema_version": "2.0"},
])
def test_content_digest_sees_every_difference(changes: dict[str, object]) -> None:
    assert content_digest(event(**changes)) != content_digest(event())


def test_byte_quotas_per_minute_and_per_day_with_retry_after() -> None:
    ticks = Ticks()
    limits = RequestLimiter(Limits(100, 100, 2, 3, bytes_per_minute=6_000,
                                   bytes_per_day=10_000), ticks)
    limits.charge_bytes("a", 5_000)
    error = refused_charge(limits, "a", 2_000)
    assert error.reason is LimitReason.BYTE_QUOTA_MINUTE and error.retry_after == 10
    limits.charge_bytes("b", 5_000)  # Another node has its own quota.
    ticks.value += 60
    limits.charge_bytes("a", 4_000)
    error = refused_charge(limits, "a", 2_000)
    assert error.reason is LimitReason.BYTE_QUOTA_DAY and error.retry_after > 3600
    # A refused request spent nothing: a smaller one still fits both quotas.
    limits.charge_bytes("a", 1_000)


def refused_charge(limits: RequestLimiter, node: str, size: int) -> LimitExceeded:
    with pytest.raises(LimitExceeded) as caught:
        limits.charge_bytes(node, size)
    return caught.value


def test_the_size_caps_and_byte_quotas_are_validated() -> None:
    assert ShoreConfig().validate() == []
    assert ShoreConfig().max_decompressed_bytes <= 8 << 20  # a few MiB, not 64
    problems = [
        ShoreConfig(max_decompressed_bytes=128 << 20).validate(),
        ShoreConfig(node_bytes_per_minute=1 << 20).validate(),  # below one batch
        ShoreConfig(node_bytes_per_day=32 << 20).validate(),  # below the minute's quota
    ]
    assert [len(found) for found in problems] == [1, 1, 1]
