"""Partition watermark math (§7.6): contiguous received and terminal offsets, the queue commit.

Pure: the state store finds the first open positions (an index lookup) and asks these functions
where the watermarks stand; offsets are inclusive "last" offsets, -1 for none.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One partition's offsets. `base_offset` is the offset just before the first record the
    state tracked; every offset above it up to `read_offset` was read. Always
    base <= terminal <= received <= read."""

    base_offset: int
    read_offset: int
    received_offset: int
    terminal_offset: int
    committed_offset: int | None = None

    @property
    def commit_offset(self) -> int:
        """The next offset to read after a restart: contiguous terminal + 1 (§7.6)."""
        return self.terminal_offset + 1

    @property
    def commit_due(self) -> bool:
        """The checkpoint moved past what the queue holds as committed."""
        floor = self.base_offset + 1 if self.committed_offset is None else self.committed_offset
        return self.commit_offset > floor

    @property
    def open_records(self) -> int:
        """Records read but not yet terminal (an upper bound: skipped ones count too)."""
        return self.read_offset - self.terminal_offset


@dataclass(frozen=True, slots=True)
class OpenPositions:
    """The lowest offsets of a partition's recorded events that are not terminal yet
    (`first_open`) and not received or terminal yet (`first_unreceived`); None for none.
    Offsets without a recorded event (skipped records) are never open."""

    first_open: int | None
    first_unreceived: int | None


def starting_offsets(first_offset: int) -> PartitionOffsets:
    """The offsets of a partition first read at `first_offset`: nothing read, nothing done."""
    base = first_offset - 1
    return PartitionOffsets(base, base, base, base)


def advance(offsets: PartitionOffsets, read_offset: int,
            open_positions: OpenPositions) -> PartitionOffsets:
    """The offsets after reading up to `read_offset`: received and terminal move up to just
    before the first gap (an open record), never past what was read, never below the base."""
    terminal = _contiguous(read_offset, open_positions.first_open)
    received = _contiguous(read_offset, open_positions.first_unreceived)
    terminal = max(terminal, offsets.base_offset)
    received = max(received, terminal)
    return PartitionOffsets(offsets.base_offset, read_offset, received, terminal,
                            offsets.committed_offset)


def _contiguous(read_offset: int, first_gap: int | None) -> int:
    return read_offset if first_gap is None else min(read_offset, first_gap - 1)
