"""One actor format: a person is `user:NAME` whichever way they act, a process `system:NAME`."""

from __future__ import annotations

import argparse

import pytest

from tidesync.domain.actor import InvalidActor, is_system, system_actor, user_actor
from tidesync.domain.user import Role
from tidesync.entrypoints.operator import actor_of, add_audit_arguments
from tidesync.graphql.accounts import Principal


def test_a_person_is_user_colon_name_once() -> None:
    assert user_actor("alice") == "user:alice"
    assert user_actor("user:alice") == "user:alice"
    assert system_actor("arbiter") == "system:arbiter"
    assert is_system("system:arbiter") and not is_system("user:system:x")


@pytest.mark.parametrize("name", ["", "  ", "user:", "a\nb", "tab\there", "x" * 129, "\x7f"])
def test_names_that_cannot_be_shown_are_refused(name: str) -> None:
    with pytest.raises(InvalidActor):
        user_actor(name)


def test_command_line_and_console_name_a_person_the_same_way(monkeypatch) -> None:
    parser = argparse.ArgumentParser()
    add_audit_arguments(parser, default_reason=None)
    given = parser.parse_args(["--actor", "alice", "--reason", "fix"])
    assert actor_of(given) == "user:alice"
    monkeypatch.setattr("getpass.getuser", lambda: "oscar")
    assert actor_of(parser.parse_args(["--reason", "fix"])) == "user:oscar"
    console = Principal("alice", Role.OPERATOR, frozenset())
    assert console.actor == actor_of(given)
