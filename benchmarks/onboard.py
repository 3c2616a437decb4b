"""Onboarding: bytes over the link per row to bring a table that already exists on both sides into
sync, digest-first, against sending the whole table as Debezium snapshot records.

Two SQLite databases hold the same `parts` table (content-derived revisions under one fleet
key, as `tidesync target enable` gives them). Digest-first: the sides exchange key-range
digests (`tidesync.target.reconciliation`, each message zstd-3 compressed as the `.zst` message
files are) until the differing keys are known; the ship then sends its rows of those keys as
SNAPSHOT events in upload batches exactly as the client cuts and compresses them. Baseline:
every row as a Debezium `op=r` snapshot record (payload-only JSON key and value, the smaller of
Debezium's two JSON forms), zstd-3 over each batch of 500 newline-joined records.

Measured for sides already identical and for 1 % of rows changed on one side. The ratio is the
identical case's digest-first bytes over the baseline's (goal <= 0.05).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import random
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
import zstandard

from benchmarks.harness import Report, timed
from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    DebeziumRecord,
    EnvelopeOp,
    SnapshotMarker,
    SourceInfo,
    TableDefinition,
)
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.outcomes import Normalized
from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.content_revision import content_revision
from tidesync.ship.batcher import BatchLimits, build_batch
from tidesync.target import digests, reconciliation

ROWS = 100_000
QUICK_ROWS = 5_000
BATCH = 500
FLEET_KEY = b"onboarding-benchmark-fleet-key-0"
SNAPSHOT_AT = dt.datetime(2025, 3, 2, tzinfo=dt.UTC)
_COLUMNS = (("id", "int"), ("name", "varchar(40)"), ("qty", "int"), ("price", "decimal(10,2)"),
            ("location", "varchar(20)"), ("note", "varchar(200)"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=None,
                        help=f"rows in the table (default {ROWS:,}; --quick {QUICK_ROWS:,})")
    parser.add_argument("--different", type=float, default=1.0,
                        help="percent of rows changed on one side (default 1)")


def run(report: Report, quick: bool = False, rows: int | None = None,
        different: float = 1.0) -> None:
    count = rows or (QUICK_ROWS if quick else ROWS)
    table = _table_definition()
    ship_rows = _rows(count)
    changed = _changed(ship_rows, different)
    shore_rows = [dict(row, qty=int(row["qty"]) + 1) if row["id"] in changed else row
                  for row in ship_rows]
    baseline = _debezium_snapshot_bytes(table, ship_rows)
    report.add("rows", count)
    report.add("Debezium op=r snapshot, payload-only JSON, zstd-3", baseline / count, "B/row")

    ship = _database(ship_rows)
    identical = _digest_first(report, "identical", ship, _database(ship_rows), table,
                              ship_rows, count)
    label = f"{different:g} % different"
    differing = _digest_first(report, label, ship, _database(shore_rows), table, ship_rows,
                              count, expect=len(changed))
    per_row = baseline / count
    ratio = identical / per_row
    report.add("[identical] ratio digest-first / Debezium snapshot", f"{ratio:.4f}")
    report.add(f"[{label}] ratio digest-first / Debezium snapshot",
               f"{differing / per_row:.4f}")
    report.set_ratio(ratio, "digest-first link bytes / zstd-3 Debezium snapshot records, sides"
                            " identical (goal <= 0.05)")


# ----------------------------------------------------------------------------- the table


def _table_definition() -> TableDefinition:
    columns = [ColumnDefinition.parse(name, kind, nullable=name == "note")
               for name, kind in _COLUMNS]
    return TableDefinition("erp", "parts", tuple(columns), ("id",))


def _rows(count: int) -> list[dict[str, Any]]:
    draw = random.Random(16)
    places = ["engine room", "bridge", "galley", "store 2", "deck", "hold 1"]
    return [{"id": key, "name": f"part {key:07d} {draw.choice(['valve', 'seal', 'pump'])}",
             "qty": draw.randrange(0, 500), "price": Decimal(draw.randrange(100, 99_999)) / 100,
             "location": draw.choice(places),
             "note": None if key % 3 else f"checked at survey {draw.randrange(1, 40)}"}
            for key in range(1, count + 1)]


def _changed(rows: Sequence[dict[str, Any]], percent: float) -> set[int]:
    draw = random.Random(17)
    return {row["id"] for row in draw.sample(list(rows), int(len(rows) * percent / 100))}


def _revision(row: dict[str, Any]) -> str:
    business = [(name, row[name]) for name, _ in _COLUMNS if name != "id"]
    return content_revision(FLEET_KEY, [("id", row["id"])], business).text


def _database(rows: Sequence[dict[str, Any]]) -> sa.Engine:
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TABLE parts (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER NOT"
            " NULL, price TEXT NOT NULL, location TEXT NOT NULL, note TEXT,"
            " _sync_revision TEXT NOT NULL)")
        conn.exec_driver_sql(
            "INSERT INTO parts VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(r["id"], r["name"], r["qty"], str(r["price"]), r["location"], r["note"],
              _revision(r)) for r in rows])
    return engine


# ----------------------------------------------------------------------------- the baseline


def _snapshot_records(table: TableDefinition, rows: Sequence[dict[str, Any]]
                      ) -> list[DebeziumRecord]:
    writer = DebeziumEnvelopeWriter("sync.cdc")
    out = []
    for index, row in enumerate(rows):
        marker = (SnapshotMarker.FIRST if index == 0 else SnapshotMarker.LAST
                  if index == len(rows) - 1 else SnapshotMarker.TRUE)
        source = SourceInfo(server_id=0, file="mysql-bin.000003", pos=154,
                            ts_ms=int(SNAPSHOT_AT.timestamp() * 1000), snapshot=marker)
        out.append(writer.change(table, EnvelopeOp.READ, before=None,
                                 after={**row, "_sync_revision": _revision(row)},
                                 source=source, processed_at=SNAPSHOT_AT))
    return out


def _debezium_snapshot_bytes(table: TableDefinition, rows: Sequence[dict[str, Any]]) -> int:
    compressor = zstandard.ZstdCompressor(level=3)
    total = 0
    records = _snapshot_records(table, rows)
    for start in range(0, len(records), BATCH):
        lines = []
        for record in records[start:start + BATCH]:
            assert record.key is not None and record.value is not None
            lines += [_compact(record.key["payload"]), _compact(record.value["payload"])]
        total += len(compressor.compress(b"\n".join(lines)))
    return total


def _compact(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":"), default=str).encode()


# ----------------------------------------------------------------------------- digest-first


def _digest_first(report: Report, label: str, ship: sa.Engine, shore: sa.Engine,
                  table: TableDefinition, ship_rows: Sequence[dict[str, Any]], count: int,
                  expect: int = 0) -> float:
    """Report the exchange's and the differing rows' link bytes; returns bytes per row."""
    with timed() as timing, ship.connect() as ship_conn, shore.connect() as shore_conn:
        exchange, messages, compressed = _exchange(ship_conn, shore_conn)
    differing = {int(str(key[0])) for key in exchange.differing}
    assert len(differing) == expect, (len(differing), expect)
    rows = [row for row in ship_rows if row["id"] in differing]
    sent = _snapshot_event_bytes(table, rows)
    total = compressed + sent
    report.add(f"[{label}] digest messages / rounds", f"{messages} / {exchange.round}")
    report.add(f"[{label}] digest exchange, zstd-3", compressed, "B")
    report.add(f"[{label}] digest exchange, plain JSON", exchange.link_bytes, "B")
    report.add(f"[{label}] differing rows sent as SNAPSHOT events", len(rows))
    report.add(f"[{label}] their upload batches (as the ship sends)", sent, "B")
    report.add(f"[{label}] link bytes per row", total / count, "B/row")
    report.add(f"[{label}] digest exchange time (both sides, one machine)", timing.seconds,
               "s")
    return total / count


def _exchange(ship: sa.Connection, shore: sa.Connection
              ) -> tuple[reconciliation.Exchange, int, int]:
    """A whole exchange started by the shore; (last message, messages, zstd-3 bytes)."""
    sides = []
    for conn in (shore, ship):
        digests.prepare_connection(conn)
        sides.append((conn, digests.digest_table(conn, "parts")))
    compressor = zstandard.ZstdCompressor(level=3)
    message = reconciliation.start(*sides[0], "erp.parts", SNAPSHOT_AT)
    raw = reconciliation.encode(message)
    message = dataclasses.replace(message, link_bytes=len(raw))
    compressed, messages = len(compressor.compress(raw)), 1
    while not message.done:
        message = reconciliation.answer(*sides[message.round % 2], message)
        raw = reconciliation.encode(message)
        message = dataclasses.replace(message, link_bytes=message.link_bytes + len(raw))
        compressed += len(compressor.compress(raw))
        messages += 1
    return message, messages, compressed


def _snapshot_event_bytes(table: TableDefinition, rows: Sequence[dict[str, Any]]) -> int:
    """The rows as SNAPSHOT events (the real normalizer on op=r records) in upload batches."""
    if not rows:
        return 0
    normalizer = DebeziumNormalizer(NormalizerSettings("ship-0042", "tidesync-capture"))
    events: list[ChangeEvent] = []
    for offset, record in enumerate(_snapshot_records(table, rows)):
        outcome = normalizer.normalize(KafkaRecord(record.topic, 0, offset, record.key_bytes(),
                                                   record.value_bytes()))
        assert isinstance(outcome, Normalized), outcome
        events.append(outcome.event)
    limits = BatchLimits(max_events=BATCH)
    total = 0
    pending = events
    while pending:
        batch, left = build_batch(pending[:BATCH], "ship-0042", SNAPSHOT_AT, limits)
        total += len(batch.body)
        pending = left + pending[BATCH:]
    return total
