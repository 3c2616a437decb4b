"""What the shore keeps of uploads cut off mid-body: a few parts per node, none too small, a bound
on all of them, an age limit, and resume points read strictly."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from starlette.requests import Request

from tidesync.ingress.upload_bodies import (
    BodyStalled,
    PartialUploads,
    ResumePoint,
    ResumeRefused,
    body_digest,
    read_body,
    resume_point,
)

A, B, C = (hashlib.sha256(text).hexdigest() for text in (b"a", b"b", b"c"))


def test_a_kept_part_is_given_once_and_only_at_its_length() -> None:
    parts = PartialUploads(min_bytes=10)
    parts.keep("ship-1", A, b"x" * 100, now=0.0)
    assert parts.held("ship-1", A, now=1.0) == b"x" * 100
    assert parts.held("ship-2", A, now=1.0) == b""  # another node's body is not this one's
    assert parts.take("ship-1", A, 99, now=1.0) is None  # not the part the rest continues
    assert parts.take("ship-1", A, 100, now=1.0) == b"x" * 100
    assert parts.take("ship-1", A, 100, now=1.0) is None and parts.size == 0


def test_a_node_keeps_its_latest_parts_only_and_small_parts_are_not_kept() -> None:
    parts = PartialUploads(min_bytes=10, per_node=2)
    parts.keep("ship-1", A, b"x" * 50, now=0.0)
    parts.keep("ship-1", B, b"y" * 60, now=1.0)
    parts.keep("ship-2", A, b"w" * 70, now=1.5)
    parts.keep("ship-1", C, b"v" * 40, now=2.0)  # a third cut upload: the oldest part goes
    assert parts.held("ship-1", A, now=2.0) == b""
    assert len(parts.held("ship-1", B, 2.0)) == 60 and len(parts.held("ship-1", C, 2.0)) == 40
    assert len(parts.held("ship-2", A, 2.0)) == 70  # another node's part stays
    parts.keep("ship-1", B, b"y" * 90, now=3.0)  # the same body cut again, further on
    assert len(parts.held("ship-1", B, 3.0)) == 90 and parts.size == 90 + 40 + 70
    parts.keep("ship-1", C, b"z" * 5, now=4.0)  # too little to be worth a round trip
    assert parts.held("ship-1", C, now=4.0) == b"" and parts.size == 90 + 70


def test_parts_are_bounded_in_all_and_in_age() -> None:
    parts = PartialUploads(max_bytes=250, min_bytes=10, ttl_seconds=60.0)
    for number in range(4):
        parts.keep(f"ship-{number}", A, b"x" * 100, now=float(number))
    assert parts.size <= 250
    assert parts.held("ship-0", A, now=4.0) == b""  # the oldest went first
    assert parts.held("ship-3", A, now=4.0) == b"x" * 100
    assert parts.held("ship-3", A, now=100.0) == b""  # too old


def test_resume_points_and_digests_are_read_strictly() -> None:
    assert resume_point(None) is None
    assert resume_point(f"4096.{A}") == ResumePoint(4096, A)
    for bad in ("4096", f"0.{A}", f"-1.{A}", f"4096.{A.upper()}", f"4096.{A}x", "1." + "0" * 63):
        with pytest.raises(ResumeRefused) as refused:
            resume_point(bad)
        assert (refused.value.status, refused.value.reason) == (400, "BAD_RESUME")
    assert body_digest(A) == A
    assert body_digest("nope") is None and body_digest(None) is None


def _request(chunks: list[bytes], then_stall: bool) -> Request:
    """A request whose body arrives as `chunks`, then ends, or stops arriving."""
    queue = list(chunks)

    async def receive() -> dict[str, object]:
        if queue:
            return {"type": "http.request", "body": queue.pop(0), "more_body": True}
        if then_stall:
            await asyncio.Event().wait()  # the client went silent
        return {"type": "http.request", "body": b"", "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)


def test_a_body_that_stops_arriving_is_given_up_and_what_arrived_is_kept() -> None:
    kept: list[bytes] = []
    with pytest.raises(BodyStalled) as stalled:
        asyncio.run(read_body(_request([b"abc", b"def"], then_stall=True), 1 << 20,
                              on_cut=kept.append, idle_seconds=0.2))
    assert kept == [b"abcdef"]
    assert (stalled.value.status, stalled.value.reason) == (408, "BODY_STALLED")


def test_a_body_that_keeps_arriving_is_read_whole() -> None:
    body = asyncio.run(read_body(_request([b"abc", b"def"], then_stall=False), 1 << 20,
                                 idle_seconds=0.2))
    assert body == b"abcdef"
