"""Who did something, as every event, audit record and operator action names it: a person is
`user:NAME` (from the console or any command line), a tidesync process `system:COMPONENT`."""

from __future__ import annotations

from tidesync.domain.errors import ErrorCode, TidesyncError

USER_PREFIX = "user:"
SYSTEM_PREFIX = "system:"
MAX_NAME_LENGTH = 128


class InvalidActor(TidesyncError, ValueError):
    """An actor name that is empty, too long or holds control characters."""

    code = ErrorCode.INVALID_INPUT


def user_actor(name: str) -> str:
    """The actor of a person called `name` (a name already written `user:NAME` stays as is)."""
    name = name.removeprefix(USER_PREFIX)
    _check(name)
    return USER_PREFIX + name


def system_actor(component: str) -> str:
    """The actor of a tidesync process (the arbiter, the apply processor, ...)."""
    _check(component)
    return SYSTEM_PREFIX + component


def is_system(actor: str) -> bool:
    return actor.startswith(SYSTEM_PREFIX)


def _check(name: str) -> None:
    if not name.strip():
        raise InvalidActor("an actor needs a name")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidActor(f"an actor name has at most {MAX_NAME_LENGTH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidActor("an actor name holds no control characters")
