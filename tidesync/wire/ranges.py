"""Compact acknowledgements: events named by their queue coordinates as offset ranges per
source partition and replay epoch (PartitionRanges), names sent once per message.

A ship's events of one partition are contiguous in offset, so a batch answer or a receipts page
of thousands of events acknowledges them in a few bytes; what does not fit a range (refusals,
conflicts, results with a reason) stays a per-event entry beside the ranges.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tidesync.wire import sync_pb2 as pb
from tidesync.wire.protocol import MalformedPayload

MAX_OFFSET = (1 << 63) - 1
MAX_RANGE_GROUPS = 4096
"""Most PartitionRanges one message may hold (a ship has far fewer partitions)."""
MAX_RANGES = 1 << 16
"""Most ranges over all groups of one message."""


@dataclass(frozen=True, slots=True, order=True)
class Stream:
    """One source partition of one replay epoch."""

    topic: str
    partition: int
    replay_epoch: int


@dataclass
class OffsetRanges:
    """Offsets per stream as sorted, disjoint, inclusive (first, last) ranges."""

    streams: dict[Stream, list[tuple[int, int]]] = field(default_factory=dict)

    def contains(self, stream: Stream, offset: int) -> bool:
        return within(self.streams.get(stream) or (), offset)

    def __len__(self) -> int:
        return sum(last - first + 1 for ranges in self.streams.values()
                   for first, last in ranges)


def within(ranges: Sequence[tuple[int, int]], offset: int) -> bool:
    """Whether sorted, disjoint, inclusive (first, last) ranges hold `offset`."""
    index = bisect.bisect_right(ranges, (offset, MAX_OFFSET + 1)) - 1
    return index >= 0 and ranges[index][0] <= offset <= ranges[index][1]


def encode_ranges(coordinates: Iterable[tuple[Stream, int]]
                  ) -> tuple[list[str], list[pb.PartitionRanges]]:
    """The names table and the PartitionRanges naming every (stream, offset) given."""
    by_stream: dict[Stream, list[int]] = {}
    for stream, offset in coordinates:
        by_stream.setdefault(stream, []).append(offset)
    names: dict[str, int] = {}
    groups: list[pb.PartitionRanges] = []
    for stream in sorted(by_stream):
        ref = names.setdefault(stream.topic, len(names))
        group = pb.PartitionRanges(topic_ref=ref, partition=stream.partition,
                                   replay_epoch=stream.replay_epoch)
        end = 0  # the offset after the previous range
        for first, last in _runs(sorted(set(by_stream[stream]))):
            group.ranges.extend((first - end, last - first + 1))
            end = last + 1
        groups.append(group)
    return list(names), groups


def _runs(offsets: Sequence[int]) -> Iterable[tuple[int, int]]:
    start = previous = offsets[0]
    for offset in offsets[1:]:
        if offset != previous + 1:
            yield start, previous
            start = offset
        previous = offset
    yield start, previous


def decode_ranges(strings: Sequence[str], groups: Sequence[pb.PartitionRanges]
                  ) -> OffsetRanges:
    """The ranges a message names; raises MalformedPayload for one that cannot be read."""
    if len(groups) > MAX_RANGE_GROUPS:
        raise MalformedPayload(f"more than {MAX_RANGE_GROUPS} partition ranges")
    if sum(len(group.ranges) for group in groups) > 2 * MAX_RANGES:
        raise MalformedPayload(f"more than {MAX_RANGES} ranges")
    out = OffsetRanges()
    for group in groups:
        if group.topic_ref >= len(strings) or len(group.ranges) % 2:
            raise MalformedPayload("a partition range names no topic or is cut short")
        stream = Stream(strings[group.topic_ref], group.partition, group.replay_epoch)
        ranges = out.streams.setdefault(stream, [])
        end = ranges[-1][1] + 1 if ranges else 0
        for gap, length in zip(group.ranges[::2], group.ranges[1::2], strict=True):
            first = end + gap
            last = first + length - 1
            if length < 1 or last > MAX_OFFSET:
                raise MalformedPayload("a partition range is empty or past the last offset")
            ranges.append((first, last))
            end = last + 1
    return out
