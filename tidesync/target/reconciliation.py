"""Reconciliation: do a ship and the shore hold the same rows of a table (or of a rule)? The two
sides exchange key-range digests, splitting the ranges that differ, until the differing keys
are known; only counts, digests, keys and row hashes ever cross, never a business value.

The exchange is a series of messages, each side answering the last one of the other:

* the first message holds the digest of the whole table (or of the rule's rows);
* a side answering compares each range digest it was sent with its own: equal ranges are
  done; for a differing range it sends its rows' keys and hashes when it holds at most
  `leaf_rows` rows there, and otherwise the digests of `fan_out` smaller ranges (cut at its
  own row-number boundaries);
* for a range it was sent rows of, it compares them with its own and adds the keys that are
  missing on either side or carry another hash to `differing`.

The exchange ends with a message holding neither ranges nor rows. For two identical tables that
is the second message, a few hundred bytes whatever the table's size; each differing row costs
about log_fan_out(rows / leaf_rows) digests and its share of one leaf. A message is a small JSON
document (zstd-compressed when its file name ends in `.zst`), so it can travel any way the
operator likes; the answering function is what a ship would run for a shore's request.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import sqlalchemy as sa
import zstandard

from tidesync.domain.evidence import EvidenceValueError, decode_value
from tidesync.domain.values import canonical_value
from tidesync.target.digests import (
    MAX_FAN_OUT,
    DigestTable,
    Key,
    KeyRange,
    RangeDigest,
    RowHash,
    range_digests,
    range_rows,
    split_range,
)
from tidesync.target.reconcile_messages import MAX_LINK_MESSAGE_BYTES as MAX_LINK_MESSAGE_BYTES
from tidesync.target.reconcile_messages import MessageTooLarge as MessageTooLarge
from tidesync.target.reconcile_messages import ReconcileError as ReconcileError
from tidesync.target.reconcile_messages import unpack as unpack

FORMAT = "tidesync-reconcile/1"
DEFAULT_FAN_OUT = 16
DEFAULT_LEAF_ROWS = 32
MAX_ROUNDS = 64
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
MAX_ITEMS = 5_000_000
"""Limits on a message read from outside: bytes, and ranges + rows + keys in it."""


@dataclass(frozen=True, slots=True)
class LeafRows:
    """A side's rows (key and hash) in a range it holds few rows of."""

    key_range: KeyRange
    rows: tuple[RowHash, ...]


@dataclass(frozen=True)
class Exchange:
    """One message of a reconciliation, and what the exchange has found so far."""

    subject: str
    started_at: dt.datetime
    table: str = ""
    """The table as the first side named it (DB.TABLE); the other side may name its own."""
    row_filter: str = ""
    """The rule's row filter both sides apply (empty: every row)."""
    round: int = 1
    fan_out: int = DEFAULT_FAN_OUT
    leaf_rows: int = DEFAULT_LEAF_ROWS
    ranges: tuple[RangeDigest, ...] = ()
    leaves: tuple[LeafRows, ...] = ()
    differing: tuple[Key, ...] = ()
    starter_only: tuple[Key, ...] = ()
    """Of `differing`, the keys only the side that started holds (the other side lacks them)."""
    link_bytes: int = 0
    """The bytes of every message of the exchange so far, this one included once written."""
    rows_compared: int = field(default=0)

    @property
    def done(self) -> bool:
        return not self.ranges and not self.leaves


def start(connection: sa.Connection, source: DigestTable, subject: str, now: dt.datetime, *,
          fan_out: int = DEFAULT_FAN_OUT, leaf_rows: int = DEFAULT_LEAF_ROWS,
          row_filter: str = "") -> Exchange:
    """The first message: the digest of every row of `source` (which applies `row_filter`,
    recorded in the message for the other side)."""
    if not 2 <= fan_out <= MAX_FAN_OUT or not 1 <= leaf_rows <= 10_000:
        raise ReconcileError(f"fan-out must be 2..{MAX_FAN_OUT} and leaf rows 1..10000")
    whole = range_digests(connection, source, [KeyRange()])
    return Exchange(subject, now, table=source.name, row_filter=row_filter, fan_out=fan_out,
                    leaf_rows=leaf_rows, ranges=tuple(whole), rows_compared=whole[0].count)


def answer(connection: sa.Connection, source: DigestTable, message: Exchange) -> Exchange:
    """This side's answer to the other side's message (see the module text)."""
    if message.round >= MAX_ROUNDS:
        raise ReconcileError(f"the exchange did not end within {MAX_ROUNDS} rounds")
    differing = _KeySet(message.differing)
    starter_only = _KeySet(message.starter_only)
    # Round 1 is the starter's, so the starter answers the even rounds.
    starter_answers = message.round % 2 == 0
    ranges: list[RangeDigest] = []
    leaves: list[LeafRows] = []
    mine = range_digests(connection, source, [theirs.key_range for theirs in message.ranges])
    for theirs, ours in zip(message.ranges, mine, strict=True):
        if theirs.same_rows(ours):
            continue
        if ours.count <= message.leaf_rows:
            leaves.append(LeafRows(ours.key_range,
                                   tuple(range_rows(connection, source, ours.key_range))))
            continue
        parts = split_range(connection, source, ours.key_range, ours.count, message.fan_out)
        ranges += range_digests(connection, source, parts)
    for leaf in message.leaves:
        found, only_theirs, only_ours = _differing_keys(
            leaf.rows, range_rows(connection, source, leaf.key_range))
        differing.add_all(found)
        starter_only.add_all(only_ours if starter_answers else only_theirs)
    return replace(message, round=message.round + 1, ranges=tuple(ranges),
                   leaves=tuple(leaves), differing=differing.keys(),
                   starter_only=starter_only.keys())


def reconcile_locally(first: tuple[sa.Connection, DigestTable],
                      second: tuple[sa.Connection, DigestTable], subject: str,
                      now: dt.datetime, *, fan_out: int = DEFAULT_FAN_OUT,
                      leaf_rows: int = DEFAULT_LEAF_ROWS) -> Exchange:
    """Run a whole exchange between two databases this process reaches (tests, benchmarks,
    and two sides on one site); link bytes count the messages as they would be written."""
    message = start(*first, subject, now, fan_out=fan_out, leaf_rows=leaf_rows)
    message = replace(message, link_bytes=len(encode(message)))
    sides = (second, first)
    while not message.done:
        connection, source = sides[(message.round - 1) % 2]
        message = answer(connection, source, message)
        message = replace(message, link_bytes=message.link_bytes + len(encode(message)))
    return message


def _differing_keys(theirs: Sequence[RowHash], ours: Sequence[RowHash]
                    ) -> tuple[list[Key], list[Key], list[Key]]:
    """(every differing key, those only they hold, those only we hold)."""
    mine = {_key_id(row.key): row for row in ours}
    found: list[Key] = []
    only_theirs: list[Key] = []
    for row in theirs:
        other = mine.pop(_key_id(row.key), None)
        if other is None or other.hash != row.hash:
            found.append(row.key)
        if other is None:
            only_theirs.append(row.key)
    only_ours = [row.key for row in mine.values()]
    return found + only_ours, only_theirs, only_ours


def _key_id(key: Key) -> str:
    return json.dumps([canonical_value(value) for value in key], separators=(",", ":"))


class _KeySet:
    def __init__(self, keys: Sequence[Key]) -> None:
        self._keys: dict[str, Key] = {_key_id(key): key for key in keys}

    def add_all(self, keys: Sequence[Key]) -> None:
        for key in keys:
            self._keys.setdefault(_key_id(key), key)

    def keys(self) -> tuple[Key, ...]:
        """In key order (by canonical text where values do not compare, e.g. NULL parts)."""
        try:
            return tuple(sorted(self._keys.values()))
        except TypeError:
            return tuple(self._keys[name] for name in sorted(self._keys))


# --- the message as JSON -----------------------------------------------------------------------


def encode(message: Exchange) -> bytes:
    """The message as compact JSON (the link bytes are part of it)."""
    document = {
        "format": FORMAT, "subject": message.subject,
        "started_at": message.started_at.isoformat(), "table": message.table,
        "filter": message.row_filter, "round": message.round,
        "fan_out": message.fan_out, "leaf_rows": message.leaf_rows,
        "rows_compared": message.rows_compared, "link_bytes": message.link_bytes,
        "ranges": [[_bound(r.key_range.lower), _bound(r.key_range.upper), r.count, r.digest]
                   for r in message.ranges],
        "leaves": [[_bound(leaf.key_range.lower), _bound(leaf.key_range.upper),
                    [[_bound(row.key), row.hash] for row in leaf.rows]]
                   for leaf in message.leaves],
        "differing": [_bound(key) for key in message.differing],
        "starter_only": [_bound(key) for key in message.starter_only],
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def decode(raw: bytes) -> Exchange:
    """A message read from outside: checked against the format and the limits."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ReconcileError(f"a reconciliation message is at most {MAX_MESSAGE_BYTES} bytes")
    try:
        document = json.loads(raw)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ReconcileError(f"not a {FORMAT} message")
        ranges = [RangeDigest(KeyRange(_key_or_none(lower), _key_or_none(upper)),
                              _int(count), str(digest))
                  for lower, upper, count, digest in _list(document["ranges"])]
        leaves = [LeafRows(KeyRange(_key_or_none(lower), _key_or_none(upper)),
                           tuple(RowHash(_key(key), str(hash_)) for key, hash_ in _list(rows)))
                  for lower, upper, rows in _list(document["leaves"])]
        differing = tuple(_key(key) for key in _list(document["differing"]))
        starter_only = tuple(_key(key) for key in _list(document.get("starter_only", [])))
        if (len(ranges) + sum(len(leaf.rows) for leaf in leaves) + len(differing)
                + len(starter_only) > MAX_ITEMS):
            raise ReconcileError(f"a reconciliation message holds at most {MAX_ITEMS} items")
        return Exchange(
            subject=str(document["subject"]),
            started_at=dt.datetime.fromisoformat(str(document["started_at"])),
            table=str(document["table"])[:200], row_filter=str(document["filter"])[:10_000],
            round=_int(document["round"]), fan_out=_int(document["fan_out"]),
            leaf_rows=_int(document["leaf_rows"]), ranges=tuple(ranges), leaves=tuple(leaves),
            differing=differing, starter_only=starter_only,
            link_bytes=_int(document["link_bytes"]),
            rows_compared=_int(document["rows_compared"]))
    except ReconcileError:
        raise
    except (ValueError, KeyError, TypeError, EvidenceValueError) as error:
        raise ReconcileError(f"malformed reconciliation message ({type(error).__name__})"
                             ) from error


def _bound(key: Key | None) -> list[object] | None:
    return None if key is None else [canonical_value(value) for value in key]


def _key_or_none(raw: object) -> Key | None:
    return None if raw is None else _key(raw)


def _key(raw: object) -> Key:
    values = _list(raw)
    if not 1 <= len(values) <= 64:
        raise ValueError("a key has 1..64 values")
    return tuple(decode_value(value) for value in values)


def _list(raw: object) -> list[Any]:
    if not isinstance(raw, list):
        raise TypeError("expected a list")
    return raw


def _int(raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ValueError("expected a non-negative integer")
    return raw


# --- the message over the link -----------------------------------------------------------------

def checked_size(message: Exchange) -> bytes:
    """The message as JSON, refused when over the link's limit."""
    data = encode(message)
    if len(data) > MAX_LINK_MESSAGE_BYTES:
        raise MessageTooLarge(f"the next message would be {len(data)} bytes, more than the"
                              f" link's {MAX_LINK_MESSAGE_BYTES}")
    return data


def pack(data: bytes) -> bytes:
    """A message's JSON as it crosses the link (zstd level 3)."""
    return zstandard.ZstdCompressor(level=3).compress(data)


# --- the last result per subject ---------------------------------------------------------------

RESULTS_TABLE = "_sync_reconcile"
"""In the business database beside the ledger: the last reconciliation of each table or rule."""


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    subject: str
    differing: int
    rows_compared: int
    finished_at: dt.datetime
    seconds: float
    rounds: int
    link_bytes: int


def _results_table(database: str | None) -> sa.Table:
    return sa.Table(
        RESULTS_TABLE, sa.MetaData(),
        sa.Column("subject", sa.String(200), primary_key=True),
        sa.Column("differing", sa.BigInteger, nullable=False),
        sa.Column("rows_compared", sa.BigInteger, nullable=False),
        sa.Column("finished_at", sa.String(40), nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("rounds", sa.Integer, nullable=False),
        sa.Column("link_bytes", sa.BigInteger, nullable=False),
        schema=database,
    )


def record_result(connection: sa.Connection, database: str | None, message: Exchange,
                  finished_at: dt.datetime) -> ReconcileResult:
    """Keep the outcome of a finished exchange as the subject's last result (and commit)."""
    if not message.done:
        raise ReconcileError("the exchange has not ended yet")
    result = ReconcileResult(
        message.subject, len(message.differing), message.rows_compared, finished_at,
        max(0.0, (finished_at - message.started_at).total_seconds()), message.round,
        message.link_bytes)
    table = _results_table(database)
    table.create(connection, checkfirst=True)
    connection.execute(table.delete().where(table.c.subject == result.subject))
    connection.execute(table.insert().values(
        subject=result.subject, differing=result.differing, rows_compared=result.rows_compared,
        finished_at=finished_at.astimezone(dt.UTC).isoformat(), seconds=result.seconds,
        rounds=result.rounds, link_bytes=result.link_bytes))
    connection.commit()
    return result


def last_results(connection: sa.Connection, database: str | None) -> list[ReconcileResult]:
    """Every subject's last result, by subject (none before the first reconciliation)."""
    table = _results_table(database)
    if not sa.inspect(connection).has_table(RESULTS_TABLE, schema=database):
        return []
    return [ReconcileResult(row.subject, int(row.differing), int(row.rows_compared),
                            dt.datetime.fromisoformat(row.finished_at), float(row.seconds),
                            int(row.rounds), int(row.link_bytes))
            for row in connection.execute(sa.select(table).order_by(table.c.subject))]
