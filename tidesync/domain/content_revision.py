"""Content-derived revisions: the revision a row gets when a table that already holds data is
enabled, derived from the row itself so that identical rows on a ship and on the shore carry
identical revisions (§16, onboarding).

revision = the first 16 bytes of HMAC-SHA256(fleet revision key, canonical text of the primary
key + canonical text of the business columns by name). Column order does not matter (the
business columns are sorted by name); the key's order does. Without the key nobody can tell
from a revision what a row holds, and the key is the same file on every node of the fleet.

Values are normalised first the way the database drivers hand them over: a naive datetime is
UTC (MySQL DATETIME), a bytearray is bytes, a duration (MySQL TIME through pymysql) is its
text. Two databases of the same kind holding the same values give the same revisions; a MySQL
ship and a SQLite shore agree for integers, text, bytes and NULL, not necessarily for
decimals and times (SQLite stores them as it pleases).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path

from tidesync.domain.change_event import Revision
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.values import BitString, JsonText, Value, canonical_text

MIN_KEY_BYTES = 32
MAX_KEY_FILE_BYTES = 4096


class RevisionKeyError(TidesyncError):
    """The fleet revision key file is missing, unreadable or too short."""

    code = ErrorCode.CONFIG_INVALID


def normalised(value: object) -> Value:
    """A driver's value as a `Value` (see the module text); unknown types become their text."""
    if value is None or isinstance(value, bool | int | float | str | bytes | JsonText
                                   | BitString):
        return value
    if isinstance(value, dt.datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date | dt.time):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dt.timedelta):
        return f"timedelta:{value.total_seconds()!r}"
    if isinstance(value, Decimal):
        return value
    return f"{type(value).__name__}:{value}"


def content_revision(key: bytes, primary_key: Iterable[tuple[str, object]],
                     business: Iterable[tuple[str, object]]) -> Revision:
    """The content-derived revision of one row (see the module text)."""
    key_text = canonical_text((name, normalised(value)) for name, value in primary_key)
    body_text = canonical_text(sorted(((name, normalised(value)) for name, value in business),
                                     key=lambda pair: pair[0]))
    message = f"{len(key_text)}:{key_text};{body_text}".encode()
    return Revision(hmac.new(key, message, hashlib.sha256).digest()[:16])


def read_revision_key(path: str) -> bytes:
    """The fleet revision key: the file's bytes (surrounding whitespace dropped), at least
    MIN_KEY_BYTES of them. The same file must be installed on the shore and every ship."""
    file = Path(path)
    try:
        with file.open("rb") as handle:
            raw = handle.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as error:
        raise RevisionKeyError(f"cannot read the revision key file {file.absolute()}:"
                               f" {error.strerror}") from error
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise RevisionKeyError(f"the revision key file {file.absolute()} is larger than"
                               f" {MAX_KEY_FILE_BYTES} bytes: is it the right file?")
    key = raw.strip()
    if len(key) < MIN_KEY_BYTES:
        raise RevisionKeyError(f"the revision key file {file.absolute()} holds {len(key)}"
                               f" bytes; at least {MIN_KEY_BYTES} are needed")
    return key
