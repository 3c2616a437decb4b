"""Incremental snapshot requests of the built-in capture, kept in its position file.

`tidesync snapshot start DB.TABLE` stores a request here; the running binlog capture carries it
out chunk by chunk (`tidesync.capture.snapshot`) and records after each chunk, once its records
are acknowledged by the queue, where the next chunk starts. A killed capture therefore resumes
with the chunk it was working on. Only keys, counts, offsets, actors and reasons are stored.
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from tidesync.capture.errors import CaptureError, CaptureErrorReason
from tidesync.domain.values import Value

MAX_KEYS = 1_000_000
"""The most keys one request may list (`--keys`)."""
MAX_CHUNK_ROWS = 100_000

Key = tuple[Value, ...]


class SnapshotState(enum.StrEnum):
    """Where a request is on the capture side."""

    QUEUED = "QUEUED"
    SNAPSHOTTING = "SNAPSHOTTING"
    EMITTED = "EMITTED"
    """Every chunk is on the queue; the ship and the shore may still be working on it."""
    FAILED = "FAILED"


class SnapshotPhase(enum.StrEnum):
    """What an operator sees (`tidesync snapshot status`)."""

    QUEUED = "QUEUED"
    SNAPSHOTTING = "SNAPSHOTTING"
    CATCHING_UP = "CATCHING_UP"
    IN_SYNC = "IN_SYNC"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """One request and its progress. `cursor` is the last key of the last chunk done (a
    range snapshot) or how many listed keys are done (a `--keys` snapshot); `barrier` holds,
    per (topic, partition), the highest queue offset a snapshot record got."""

    id: int
    capture: str
    database: str
    table: str
    keys: tuple[Key, ...] | None
    chunk_rows: int
    reason: str
    actor: str
    requested_at: str
    state: SnapshotState
    cursor: Key | int | None
    chunks_done: int
    chunks_total: int
    rows_total: int
    rows_emitted: int
    barrier: Mapping[tuple[str, int], int]
    error: str
    rule_id: str = ""
    """The rule whose activation asked for the snapshot ("" when an operator did)."""
    rule_version: int = 0
    started_at: str = ""
    """When the capture began reading ("" until then)."""
    finished_at: str = ""
    """When the last chunk was on the queue, or the request failed ("" until then)."""


def snapshot_phase(request: SnapshotRequest,
                   terminal: Mapping[tuple[str, int], int] | None) -> tuple[SnapshotPhase, int]:
    """The phase of a request and its lag (queue records not yet answered by the shore).

    `terminal` is, per (topic, partition), the offset up to which the ship holds a terminal
    answer for every record (None: the ship state cannot be read, so not IN_SYNC yet). A
    request is IN_SYNC once every partition it wrote to is answered up to its last record."""
    if request.state is SnapshotState.FAILED:
        return SnapshotPhase.FAILED, 0
    if request.state is SnapshotState.QUEUED:
        return SnapshotPhase.QUEUED, 0
    if request.state is SnapshotState.SNAPSHOTTING:
        return SnapshotPhase.SNAPSHOTTING, 0
    if terminal is None:
        return SnapshotPhase.CATCHING_UP, sum(offset + 1 for offset in request.barrier.values())
    lag = sum(max(0, offset - terminal.get(partition, -1))
              for partition, offset in request.barrier.items())
    return (SnapshotPhase.IN_SYNC, 0) if lag == 0 else (SnapshotPhase.CATCHING_UP, lag)


_DDL = (
    "CREATE TABLE IF NOT EXISTS snapshot_request ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, capture TEXT NOT NULL, database_name TEXT NOT NULL,"
    " table_name TEXT NOT NULL, keys_json TEXT, chunk_rows INTEGER NOT NULL,"
    " reason TEXT NOT NULL, actor TEXT NOT NULL, requested_at TEXT NOT NULL,"
    " state TEXT NOT NULL, cursor_json TEXT, chunks_done INTEGER NOT NULL DEFAULT 0,"
    " chunks_total INTEGER NOT NULL DEFAULT 0, rows_total INTEGER NOT NULL DEFAULT 0,"
    " rows_emitted INTEGER NOT NULL DEFAULT 0, barrier_json TEXT NOT NULL DEFAULT '[]',"
    " error TEXT NOT NULL DEFAULT '', updated_at TEXT NOT NULL,"
    " rule_id TEXT NOT NULL DEFAULT '', rule_version INTEGER NOT NULL DEFAULT 0,"
    " started_at TEXT NOT NULL DEFAULT '', finished_at TEXT NOT NULL DEFAULT '')"
)
_ADDED_COLUMNS = {"rule_id": "TEXT NOT NULL DEFAULT ''",
                  "rule_version": "INTEGER NOT NULL DEFAULT 0",
                  "started_at": "TEXT NOT NULL DEFAULT ''",
                  "finished_at": "TEXT NOT NULL DEFAULT ''"}
"""Columns position files written before they existed lack; added when opened."""
_COLUMNS = ("id, capture, database_name, table_name, keys_json, chunk_rows, reason, actor,"
            " requested_at, state, cursor_json, chunks_done, chunks_total, rows_total,"
            " rows_emitted, barrier_json, error, rule_id, rule_version, started_at,"
            " finished_at")


class SnapshotStore:
    """The snapshot requests in the capture's position file (WAL, synchronous=FULL)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.execute(_DDL)
        present = {str(row[1]) for row in self._db.execute("PRAGMA table_info(snapshot_request)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in present:
                try:
                    self._db.execute(f"ALTER TABLE snapshot_request ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as error:
                    # The capture and `ship run` may open an old file at the same time.
                    if "duplicate column" not in str(error):
                        raise

    def close(self) -> None:
        self._db.close()

    def request(self, capture: str, database: str, table: str, *, keys: Sequence[Key] | None,
                chunk_rows: int, reason: str, actor: str, now: dt.datetime,
                rule: tuple[str, int] | None = None) -> int:
        if not 1 <= chunk_rows <= MAX_CHUNK_ROWS:
            raise CaptureError(CaptureErrorReason.CONFIGURATION,
                               f"--chunk-rows must be 1..{MAX_CHUNK_ROWS}")
        if keys is not None and len(keys) > MAX_KEYS:
            raise CaptureError(CaptureErrorReason.CONFIGURATION,
                               f"at most {MAX_KEYS} keys per snapshot")
        if not reason.strip():
            raise CaptureError(CaptureErrorReason.CONFIGURATION, "a snapshot needs a reason")
        keys_json = None if keys is None else json.dumps([encode_key(key) for key in keys])
        rule_id, rule_version = rule or ("", 0)
        cursor = self._db.execute(
            "INSERT INTO snapshot_request (capture, database_name, table_name, keys_json,"
            " chunk_rows, reason, actor, requested_at, state, updated_at, rule_id,"
            " rule_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (capture, database, table, keys_json, chunk_rows, reason[:500], actor[:200],
             now.isoformat(), SnapshotState.QUEUED.value, now.isoformat(), rule_id,
             rule_version))
        assert cursor.lastrowid is not None
        return int(cursor.lastrowid)

    def request_once_for_rule(self, capture: str, database: str, table: str,
                              rule: tuple[str, int], *, chunk_rows: int, actor: str,
                              now: dt.datetime) -> int | None:
        """A whole-table snapshot for the activation of rule `rule` (id, version), unless one
        was asked for already (whatever became of it): its id, or None. Asking again after a
        crash, or on every offered config, therefore asks once."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            known = self._db.execute(
                "SELECT id FROM snapshot_request WHERE capture = ? AND rule_id = ?"
                " AND rule_version = ?", (capture, *rule)).fetchone()
            created = None if known is not None else self.request(
                capture, database, table, keys=None, chunk_rows=chunk_rows,
                reason=f"rule {rule[0]}@{rule[1]} activated", actor=actor, now=now, rule=rule)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return created

    def requests(self, capture: str | None = None, *,
                 with_keys: bool = True) -> list[SnapshotRequest]:
        """Every request (of `capture`), in id order; without `with_keys` a `--keys`
        request's keys are not read (its `keys` is an empty tuple), for progress reports."""
        where, params = ("WHERE capture = ?", (capture,)) if capture else ("", ())
        columns = _COLUMNS if with_keys else _COLUMNS.replace(
            "keys_json", "CASE WHEN keys_json IS NULL THEN NULL ELSE '[]' END", 1)
        rows = self._db.execute(f"SELECT {columns} FROM snapshot_request {where}"  # noqa: S608
                                " ORDER BY id", params).fetchall()
        return [_request(row) for row in rows]

    def active(self, capture: str) -> SnapshotRequest | None:
        """The oldest request of this capture that is not done."""
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM snapshot_request WHERE capture = ?"  # noqa: S608
            " AND state IN (?, ?) ORDER BY id LIMIT 1",
            (capture, SnapshotState.QUEUED.value, SnapshotState.SNAPSHOTTING.value)).fetchone()
        return None if row is None else _request(row)

    def start(self, request_id: int, rows_total: int, chunks_total: int,
              now: dt.datetime) -> None:
        self._db.execute(
            "UPDATE snapshot_request SET state = ?, rows_total = ?, chunks_total = ?,"
            " updated_at = ?, started_at = ? WHERE id = ? AND state = ?",
            (SnapshotState.SNAPSHOTTING.value, rows_total, chunks_total, now.isoformat(),
             now.isoformat(), request_id, SnapshotState.QUEUED.value))

    def chunk_done(self, request_id: int, cursor: Key | int, rows: int,
                   offsets: Mapping[tuple[str, int], int], now: dt.datetime, *,
                   last: bool) -> None:
        """Record a chunk whose records the queue acknowledged (one transaction)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute("SELECT barrier_json, chunks_total, chunks_done"
                                   " FROM snapshot_request WHERE id = ?",
                                   (request_id,)).fetchone()
            barrier = _barrier(row[0])
            for partition, offset in offsets.items():
                barrier[partition] = max(offset, barrier.get(partition, -1))
            done = int(row[2]) + 1
            self._db.execute(
                "UPDATE snapshot_request SET cursor_json = ?, chunks_done = ?,"
                " chunks_total = ?, rows_emitted = rows_emitted + ?, barrier_json = ?,"
                " state = ?, updated_at = ?, finished_at = ? WHERE id = ?",
                (json.dumps(cursor if isinstance(cursor, int) else encode_key(cursor)), done,
                 done if last else max(int(row[1]), done + 1), rows,
                 json.dumps([[topic, partition, offset]
                             for (topic, partition), offset in sorted(barrier.items())]),
                 (SnapshotState.EMITTED if last else SnapshotState.SNAPSHOTTING).value,
                 now.isoformat(), now.isoformat() if last else "", request_id))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def fail(self, request_id: int, error: str, now: dt.datetime) -> None:
        self._db.execute("UPDATE snapshot_request SET state = ?, error = ?, updated_at = ?,"
                         " finished_at = ? WHERE id = ?",
                         (SnapshotState.FAILED.value, error[:500], now.isoformat(),
                          now.isoformat(), request_id))


def _request(row: Sequence[object]) -> SnapshotRequest:
    keys_json, cursor_json = row[4], row[10]
    keys = None if keys_json is None else tuple(decode_key(key)
                                                for key in json.loads(str(keys_json)))
    cursor: Key | int | None = None
    if cursor_json is not None:
        raw = json.loads(str(cursor_json))
        cursor = raw if isinstance(raw, int) else decode_key(raw)
    return SnapshotRequest(
        id=int(str(row[0])), capture=str(row[1]), database=str(row[2]), table=str(row[3]),
        keys=keys, chunk_rows=int(str(row[5])), reason=str(row[6]), actor=str(row[7]),
        requested_at=str(row[8]), state=SnapshotState(str(row[9])), cursor=cursor,
        chunks_done=int(str(row[11])), chunks_total=int(str(row[12])),
        rows_total=int(str(row[13])), rows_emitted=int(str(row[14])),
        barrier=_barrier(str(row[15])), error=str(row[16]), rule_id=str(row[17]),
        rule_version=int(str(row[18])), started_at=str(row[19]), finished_at=str(row[20]))


def _barrier(text: str) -> dict[tuple[str, int], int]:
    return {(str(topic), int(partition)): int(offset)
            for topic, partition, offset in json.loads(text)}


def encode_key(key: Sequence[Value]) -> list[object]:
    """A primary key as JSON: integers and text as they are, other types tagged."""
    encoded: list[object] = []
    for value in key:
        if value is None or isinstance(value, bool | int | str):
            encoded.append(value)
        elif isinstance(value, bytes):
            encoded.append({"b64": base64.b64encode(value).decode("ascii")})
        elif isinstance(value, Decimal):
            encoded.append({"dec": str(value)})
        elif isinstance(value, dt.datetime):
            encoded.append({"ts": value.isoformat()})
        elif isinstance(value, dt.date):
            encoded.append({"date": value.isoformat()})
        else:
            raise CaptureError(CaptureErrorReason.UNMAPPABLE_COLUMN,
                               f"a key value of type {type(value).__name__} cannot be stored")
    return encoded


def decode_key(raw: object) -> Key:
    """The inverse of `encode_key`; a bare value is a one-column key."""
    items = raw if isinstance(raw, list) else [raw]
    decoded: list[Value] = []
    for item in items:
        if isinstance(item, dict) and len(item) == 1 and next(iter(item)) in _TAGS:
            (tag, text), = item.items()
            try:
                decoded.append(_TAGS[tag](str(text)))
            except (ValueError, ArithmeticError) as error:
                raise CaptureError(CaptureErrorReason.CONFIGURATION,
                                   f"a {tag} key value does not parse") from error
        elif item is None or isinstance(item, bool | int | str):
            decoded.append(item)
        else:
            raise CaptureError(CaptureErrorReason.CONFIGURATION,
                               "a key must be a JSON array of numbers and strings")
    return tuple(decoded)


_TAGS: dict[str, Callable[[str], Value]] = {
    "b64": lambda text: base64.b64decode(text),
    "dec": Decimal,
    "ts": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
}
