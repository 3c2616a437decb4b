"""Types every area shares: pages with opaque cursors, write positions, the JSON scalar.

Cursors are base64url JSON of the row's sort key; clients treat them as opaque.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any, Generic, NewType, TypeVar, cast

import strawberry
from strawberry.extensions.field_extension import FieldExtension
from strawberry.scalars import JSON

from tidesync.graphql.errors import BadUserInput
from tidesync.graphql.positions import Position

T = TypeVar("T")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["JSON", "LONG_SCALAR", "Long", "Page", "PageInfo", "WritePosition", "decode_cursor",
           "encode_cursor", "field", "long_or_none", "mutation", "page_of"]

LONG_LIMIT = 2**63


def long_or_none(value: int | None) -> Long | None:
    return None if value is None else Long(value)


def _parse_long(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("Long takes an integer")
    number = int(value)
    if not -LONG_LIMIT <= number < LONG_LIMIT:
        raise ValueError("Long takes a 64-bit integer")
    return number


Long = NewType("Long", int)
"""A 64-bit integer (GraphQL's Int holds 32 bits); the schema maps it with LONG_SCALAR."""

LONG_SCALAR = strawberry.scalar(
    name="Long", serialize=int, parse_value=_parse_long,
    description="A 64-bit integer (counts, bytes, positions), as a JSON number.")


def field(*, description: str | None = None,
          extensions: list[FieldExtension] | None = None) -> Callable[[F], F]:
    """`strawberry.field` as a typed decorator (strawberry's own returns Any)."""
    return cast("Callable[[F], F]",
                strawberry.field(description=description, extensions=extensions))


def mutation(*, description: str | None = None,
             extensions: list[FieldExtension] | None = None) -> Callable[[F], F]:
    """`strawberry.mutation` as a typed decorator."""
    return cast("Callable[[F], F]",
                strawberry.mutation(description=description, extensions=extensions))


@strawberry.type(description="Where a page ends and whether more rows follow.")
class PageInfo:
    end_cursor: str | None
    has_next_page: bool


@strawberry.type(description="One page of rows; pass `pageInfo.endCursor` as `after`.")
class Page(Generic[T]):
    items: list[T]
    page_info: PageInfo


@strawberry.type(description="The position of a command's last event. Send `token` in the "
                             "X-Tidesync-Wait-For header (or a `waitFor` argument) to read "
                             "your own write.")
class WritePosition:
    application: str
    notification_id: Long
    token: str

    @classmethod
    def of(cls, position: Position) -> WritePosition:
        return cls(application=position.application,
                   notification_id=Long(position.notification_id), token=position.token)


def encode_cursor(key: Sequence[object]) -> str:
    text = json.dumps([_plain(part) for part in key], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode("ascii").rstrip("=")


def decode_cursor(cursor: str | None, arity: int) -> list[object] | None:
    """The sort key a cursor holds, or None for the first page; BadUserInput if foreign."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError):
        raise BadUserInput("not a cursor from this list") from None
    if not isinstance(key, list) or len(key) != arity:
        raise BadUserInput("not a cursor from this list")
    return key


def page_of(rows: Sequence[R], size: int, key: Callable[[R], Sequence[object]],
            convert: Callable[[R], T]) -> Page[T]:
    """A page from up to size + 1 fetched rows (the extra one only says more follow)."""
    shown = rows[:size]
    end = encode_cursor(key(shown[-1])) if shown else None
    return Page(items=[convert(row) for row in shown],
                page_info=PageInfo(end_cursor=end, has_next_page=len(rows) > size))


def _plain(part: object) -> object:
    if isinstance(part, dt.datetime):
        return part.isoformat()
    if isinstance(part, str | int | float | bool) or part is None:
        return part
    return str(part)
