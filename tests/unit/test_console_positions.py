"""Position tokens a read may wait for: `application:notification id`, known applications
only, a bounded number per request."""

from __future__ import annotations

import pytest

from tidesync.graphql.positions import MAX_TOKENS, BadPosition, Position, parse_positions

APPS = ("conflict_cases", "nodes")


def test_tokens_are_parsed_from_commas_or_spaces():
    assert parse_positions("conflict_cases:12, nodes:3 nodes:4", APPS) == [
        Position("conflict_cases", 12), Position("nodes", 3), Position("nodes", 4)]
    assert parse_positions("  ", APPS) == []
    assert Position("nodes", 9).token == "nodes:9"


@pytest.mark.parametrize("text", ["users:1", "nodes", "nodes:-1", "nodes:1x", ":5",
                                  "nodes:" + "9" * 19, ",".join(["nodes:1"] * (MAX_TOKENS + 1))])
def test_foreign_or_too_many_tokens_are_refused(text):
    with pytest.raises(BadPosition):
        parse_positions(text, APPS)
