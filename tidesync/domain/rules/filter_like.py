"""LIKE patterns matched without backtracking: the pattern is split at its `%` wildcards and
each piece is searched for once, left to right, never with a regular expression.

Greedy leftmost search is exact for such patterns: if the pieces can be placed in order at all,
placing each one as early as possible leaves the most room for the rest. So a match takes at most
(text length) × (pattern length) character comparisons, whatever the pattern.
"""

from __future__ import annotations

from dataclasses import dataclass


class StepMeter:
    """Counts the character comparisons a match makes (for tests of the worst case)."""

    def __init__(self) -> None:
        self.steps = 0


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of a pattern between `%` wildcards: `text`, where the positions in `any_char`
    stand for any one character (a `_` of the pattern)."""

    text: str
    any_char: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.text)

    def matches_at(self, text: str, start: int, meter: StepMeter | None = None) -> bool:
        """Whether the segment matches `text` beginning at `start`."""
        if start < 0 or start + len(self.text) > len(text):
            return False
        if meter is not None:
            meter.steps += len(self.text)
        if not self.any_char:
            return text.startswith(self.text, start)
        wild = self.any_char
        return all(index in wild or char == text[start + index]
                   for index, char in enumerate(self.text))

    def find(self, text: str, start: int, stop: int, meter: StepMeter | None = None) -> int:
        """The first position ≥ `start` where the segment matches and ends by `stop`, or -1."""
        width = len(self.text)
        if not self.any_char:
            found = text.find(self.text, start, stop)
            if meter is not None:
                meter.steps += (stop - start) if found < 0 else (found - start + width)
            return found
        anchor, offset = self._anchor()
        if not anchor:  # only `_`: any place with room will do
            return start if start + width <= stop else -1
        search_from = start + offset
        while True:
            # The segment's longest literal run finds the candidates; the rest is checked there.
            hit = text.find(anchor, search_from, stop - (width - offset - len(anchor)))
            if meter is not None:
                meter.steps += (stop - search_from) if hit < 0 else (hit - search_from + 1)
            if hit < 0:
                return -1
            if self.matches_at(text, hit - offset, meter):
                return hit - offset
            search_from = hit + 1

    def _anchor(self) -> tuple[str, int]:
        """The longest run of literal characters and where it starts in the segment."""
        best, best_at, run_at = "", 0, 0
        for index in (*self.any_char, len(self.text)):
            if index - run_at > len(best):
                best, best_at = self.text[run_at:index], run_at
            run_at = index + 1
        return best, best_at


@dataclass(frozen=True, slots=True)
class LikePattern:
    """A LIKE pattern as written (`text`) and split at its `%` wildcards (`segments`, one more
    than there are `%`)."""

    text: str
    segments: tuple[Segment, ...]

    @classmethod
    def parse(cls, text: str) -> LikePattern:
        """`%` is any run of characters, `_` any one character, everything else itself."""
        segments = []
        for piece in text.split("%"):
            wild = tuple(index for index, char in enumerate(piece) if char == "_")
            segments.append(Segment(piece, wild))
        return cls(text, tuple(segments))

    def matches(self, text: str, meter: StepMeter | None = None) -> bool:
        if len(self.segments) == 1:
            only = self.segments[0]
            return len(text) == len(only) and only.matches_at(text, 0, meter)
        first, *middle, last = self.segments
        end = len(text) - len(last)
        if end < len(first) or not first.matches_at(text, 0, meter):
            return False
        if not last.matches_at(text, end, meter):
            return False
        position = len(first)
        for segment in middle:
            found = segment.find(text, position, end, meter)
            if found < 0:
                return False
            position = found + len(segment)
        return True
