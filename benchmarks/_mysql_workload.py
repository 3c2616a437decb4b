"""A seeded, realistic stream of MySQL row changes on a ship: tables, rows and changes.

Every change comes twice: as the ChangeEvent tidesync carries and as the Debezium record.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal

from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    DebeziumRecord,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
    tombstone_revision,
)
from tidesync.domain.values import JsonText, Value

NODE_ID = "ship-0042"
CONNECTOR_ID = "ship-0042-mysql"
TOPIC_PREFIX = "sync.cdc.ship0042"
DATABASE = "fleet_erp"
RULE_ID = "erp-bidirectional"
RULE_VERSION = 7
PARTITIONS = 3
METADATA_COLUMNS = ("_sync_revision", "_sync_origin", "_sync_event_id", "_sync_updated_at")

_TABLES = (
    "crew_members", "crew_certificates", "voyages", "port_calls", "fuel_bunkering",
    "fuel_consumption", "maintenance_jobs", "maintenance_tasks", "spare_parts", "inventory_items",
    "stock_movements", "purchase_orders", "purchase_order_lines", "requisitions", "suppliers",
    "cargo_manifests", "cargo_items", "noon_reports", "incident_reports", "safety_drills",
    "permits_to_work", "running_hours", "equipment", "certificates", "inspections",
    "defects", "provisions", "waste_records", "ballast_operations", "crew_payroll",
)
_WORDS = (
    "pump", "valve", "seal", "filter", "gasket", "bearing", "engine", "boiler", "winch", "crane",
    "hatch", "deck", "hull", "propeller", "rudder", "generator", "compressor", "purifier",
    "starboard", "port", "aft", "forward", "main", "auxiliary", "emergency", "inspection",
    "replaced", "checked", "leak", "pressure", "temperature", "overhaul", "routine", "spare",
)
_NAMES = (
    "Anders", "Maria", "Chen", "Ivan", "Sofia", "Rahul", "Kofi", "Elena", "Tomasz", "Aiko",
    "Mateo", "Fatima", "Lars", "Nadia", "Jonas", "Priya", "Oleg", "Grace", "Diego", "Yuki",
)
_STATUSES = ("DRAFT", "OPEN", "IN_PROGRESS", "ON_HOLD", "DONE", "CANCELLED")
_EPOCH = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class Change:
    """One row change as tidesync's event and as Debezium's key/value record."""

    event: ChangeEvent
    record: DebeziumRecord


# A business column kind: (names to use in turn, COLUMN_TYPE, nullable, value maker).
ValueMaker = Callable[[random.Random, dt.datetime], Value]
_STATUS_TYPE = "enum(" + ",".join(f"'{status}'" for status in _STATUSES) + ")"
_KINDS: tuple[tuple[tuple[str, ...], str, bool, ValueMaker], ...] = (
    (("name", "contact_name", "master_name", "supplier_name", "location"),
     "varchar(64)", False, lambda r, _: f"{r.choice(_NAMES)} {r.choice(_NAMES)}son"),
    (("code", "part_number", "reference", "serial_number", "imo_code"),
     "varchar(32)", False, lambda r, _: f"{r.choice('ABCDEFGH')}{r.randrange(10**6):06d}"),
    (("description", "remarks", "title", "comment"),
     "varchar(255)", True, lambda r, _: " ".join(r.choices(_WORDS, k=r.randint(2, 8)))),
    (("amount", "total_cost", "discount", "tax_amount", "freight_cost"),
     "decimal(12,2)", False, lambda r, _: Decimal(r.randrange(5_000_000)).scaleb(-2)),
    (("unit_price", "rate", "exchange_rate"),
     "decimal(14,4)", True, lambda r, _: Decimal(r.randrange(90_000_000)).scaleb(-4)),
    (("quantity", "received_qty", "min_stock", "hours", "counter"),
     "int", False, lambda r, _: r.randrange(500)),
    (("priority", "severity", "category"),
     "tinyint", False, lambda r, _: r.randrange(1, 6)),
    (("supplier_id", "port_id", "vessel_id", "department_id", "owner_id"),
     "int unsigned", True, lambda r, _: r.randrange(1, 20_000)),
    (("external_id", "erp_id"),
     "bigint", True, lambda r, _: r.randrange(10**12, 10**13)),
    (("is_active", "is_urgent", "approved", "is_critical", "closed"),
     "tinyint(1)", False, lambda r, _: r.randrange(2)),
    (("status", "approval_status", "stage"),
     _STATUS_TYPE, False, lambda r, _: r.choice(_STATUSES)),
    (("notes", "findings", "actions_taken"),
     "text", True, lambda r, _: None if r.random() < 0.3 else
     " ".join(r.choices(_WORDS, k=r.randint(4, 30)))),
    (("created_at",),
     "datetime", False, lambda r, now: (now - dt.timedelta(seconds=r.randrange(86400 * 90))
                                        ).replace(microsecond=0)),
    (("due_at", "started_at", "completed_at", "reported_at"),
     "datetime(3)", True, lambda r, now: (now + dt.timedelta(seconds=r.randrange(86400 * 30))
                                          ).replace(microsecond=r.randrange(1000) * 1000)),
    (("modified_at", "synced_at"),
     "timestamp", True, lambda r, now: now.replace(microsecond=0)),
    (("planned_date", "expiry_date", "delivery_date", "issue_date"),
     "date", True, lambda r, now: (now + dt.timedelta(days=r.randrange(-30, 120))).date()),
    (("reading", "latitude", "longitude", "rob_mt"),
     "double", True, lambda r, _: round(r.uniform(0, 1000), 3)),
    (("attributes",),
     "json", True, lambda r, _: JsonText(
         f'{{"deck": {r.randrange(1, 8)}, "zone": "{r.choice("ABCDE")}"}}')),
)
_KIND_WEIGHTS = (10, 8, 6, 7, 3, 6, 3, 6, 2, 6, 6, 4, 4, 3, 3, 3, 2, 1)


@dataclass
class _Table:
    definition: TableDefinition
    makers: dict[str, ValueMaker]
    mutable: tuple[str, ...]
    rows: dict[tuple[Value, ...], dict[str, Value]]
    next_id: int
    weight: float


class _Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = _EPOCH
        self.writer = DebeziumEnvelopeWriter(TOPIC_PREFIX)
        self.tables = [self._table(name, rank) for rank, name in enumerate(_TABLES)]
        self.offsets: dict[tuple[str, int], int] = {}
        self.binlog_pos = 4
        self.gtid = 1_000_000
        self.row_in_event = 0

    def _table(self, name: str, rank: int) -> _Table:
        rng = self.rng
        composite = name.endswith(("_lines", "_items", "_tasks"))
        key_columns = [ColumnDefinition.parse("id", "bigint" if rank % 3 else "int",
                                              nullable=False)]
        if composite:
            key_columns.append(ColumnDefinition.parse("line_no", "smallint", nullable=False))
        total = rng.randint(5 + len(key_columns), 40)
        business, makers = self._business_columns(total - 4 - len(key_columns))
        metadata = [
            ColumnDefinition.parse("_sync_revision", "char(36)", nullable=False),
            ColumnDefinition.parse("_sync_origin", "varchar(64)", nullable=False),
            ColumnDefinition.parse("_sync_event_id", "char(36)"),
            ColumnDefinition.parse("_sync_updated_at", "datetime(6)", nullable=False),
        ]
        definition = TableDefinition(
            DATABASE, name, tuple(key_columns + business + metadata),
            tuple(column.name for column in key_columns),
        )
        mutable = tuple(c.name for c in business if c.name != "created_at")
        table = _Table(definition, makers, mutable, {}, 1, 1.0 / (rank + 1) ** 0.8)
        for _ in range(rng.randint(50, 400)):
            key, row = self._new_row(table)
            table.rows[key] = row
        return table

    def _business_columns(
        self, count: int,
    ) -> tuple[list[ColumnDefinition], dict[str, ValueMaker]]:
        columns: list[ColumnDefinition] = []
        makers: dict[str, ValueMaker] = {}
        for names, column_type, nullable, maker in self.rng.choices(_KINDS, _KIND_WEIGHTS, k=count):
            free = [name for name in names if name not in makers]
            name = free[0] if free else f"{names[0]}_{len(makers)}"
            columns.append(ColumnDefinition.parse(name, column_type, nullable=nullable))
            makers[name] = maker
        return columns, makers

    def _new_row(self, table: _Table) -> tuple[tuple[Value, ...], dict[str, Value]]:
        row: dict[str, Value] = {"id": table.next_id}
        if "line_no" in table.definition.primary_key:
            row["line_no"] = self.rng.randint(1, 40)
        table.next_id += 1
        for name, maker in table.makers.items():
            row[name] = maker(self.rng, self.now)
        row.update(self._metadata())
        return tuple(row[name] for name in table.definition.primary_key), row

    def _metadata(self) -> dict[str, Value]:
        return {
            "_sync_revision": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            "_sync_origin": NODE_ID,
            "_sync_event_id": None,
            "_sync_updated_at": self.now,
        }

    def changes(self, count: int) -> Iterator[Change]:
        weights = [table.weight for table in self.tables]
        for _ in range(count):
            self.now += dt.timedelta(microseconds=int(self.rng.expovariate(1 / 400_000)))
            table = self.rng.choices(self.tables, weights)[0]
            yield self._change(table)

    def _change(self, table: _Table) -> Change:
        draw = self.rng.random()
        if draw < 0.2 or len(table.rows) < 10:
            key, after = self._new_row(table)
            table.rows[key] = after
            return self._emit(table, Operation.INSERT, None, after)
        key = self.rng.choice(list(table.rows))
        before = table.rows[key]
        if draw < 0.3:
            del table.rows[key]
            return self._emit(table, Operation.DELETE, before, None)
        after = dict(before)
        touched = self.rng.sample(table.mutable, min(len(table.mutable), self.rng.randint(1, 3)))
        for name in touched:
            after[name] = table.makers[name](self.rng, self.now)
        after.update(self._metadata())
        table.rows[key] = after
        return self._emit(table, Operation.UPDATE, before, after)

    def _emit(
        self, table: _Table, operation: Operation, before: dict[str, Value] | None,
        after: dict[str, Value] | None,
    ) -> Change:
        image = after if after is not None else before
        assert image is not None
        definition = table.definition
        source = self._source_info()
        record = self.writer.change(
            definition, _ENVELOPE_OPS[operation], before=before, after=after, source=source,
            processed_at=self.now + dt.timedelta(milliseconds=self.rng.randint(5, 900)),
        )
        key = RecordKey.of(DATABASE, definition.table,
                           [(name, image[name]) for name in definition.primary_key])
        partition = zlib.crc32(key.key_text().encode()) % PARTITIONS
        offset = self.offsets.setdefault((record.topic, partition), self.rng.randrange(10**6))
        self.offsets[(record.topic, partition)] = offset + 1
        coordinates = SourceCoordinates(NODE_ID, 0, record.topic, partition, offset)
        event_id = event_id_for(coordinates, key, operation)
        event = ChangeEvent(
            event_id=event_id, origin_node_id=NODE_ID, source_connector_id=CONNECTOR_ID,
            source_topic=record.topic, source_partition=partition, source_position=offset,
            record=key, operation=operation,
            captured_at=self.now + dt.timedelta(milliseconds=3),
            before=before, after=after,
            base_revision=_revision(before),
            result_revision=_revision(after) or tombstone_revision(event_id),
            source_sequence=offset, rule_id=RULE_ID, rule_version=RULE_VERSION,
            source_details={"server_id": source.server_id, "file": source.file,
                            "pos": source.pos, "row": source.row, "gtid": source.gtid},
        )
        return Change(event, record)

    def _source_info(self) -> SourceInfo:
        # Most transactions write one row; some write a few (same gtid/pos, rising `row`).
        if self.rng.random() < 0.7:
            self.gtid += 1
            self.binlog_pos += self.rng.randint(300, 1500)
            self.row_in_event = 0
        else:
            self.row_in_event += 1
        return SourceInfo(
            server_id=1001, file="mysql-bin.000173", pos=self.binlog_pos,
            ts_ms=int(self.now.timestamp()) * 1000, row=self.row_in_event,
            gtid=f"3e11fa47-71ca-11e1-9e33-c80aa9429562:{self.gtid}", thread=3100 + self.gtid % 7,
        )


_ENVELOPE_OPS = {
    Operation.INSERT: EnvelopeOp.CREATE,
    Operation.UPDATE: EnvelopeOp.UPDATE,
    Operation.DELETE: EnvelopeOp.DELETE,
    Operation.SNAPSHOT: EnvelopeOp.READ,
}


def _revision(image: dict[str, Value] | None) -> Revision | None:
    if image is None:
        return None
    text = image["_sync_revision"]
    assert isinstance(text, str)
    return Revision.parse(text)


def generate(count: int, seed: int = 20250301) -> list[Change]:
    """`count` changes: about 70% updates of 1-3 columns, 20% inserts, 10% deletes."""
    return list(_Generator(seed).changes(count))
