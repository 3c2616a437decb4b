"""Wire size: bytes per event of an UploadBatch against Debezium's JSON for the same changes.

A seeded mixed workload (30 tables, 70% updates, 20% inserts, 10% deletes) in 500-event batches.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

import zstandard

from benchmarks._mysql_workload import NODE_ID, Change, generate
from benchmarks.harness import Report, best_of, timed
from tidesync.domain.change_event import ChangeEvent
from tidesync.wire import codec

BATCH_SIZE = 500
CREATED_AT = dt.datetime(2025, 3, 2, tzinfo=dt.UTC)
T = TypeVar("T")


def run(report: Report, quick: bool = False) -> None:
    changes = generate(2_000 if quick else 10_000)
    events = [change.event for change in changes]
    _describe_workload(report, changes)
    debezium_raw, debezium_zstd = _debezium_sizes(changes)
    report.add("Debezium JSON key+value, raw", debezium_raw, "B/event")
    report.add("Debezium JSON, 500/batch, zstd-3", debezium_zstd, "B/event")
    ours: dict[tuple[bool, str], float] = {}
    for include_before in (True, False):
        label = "with" if include_before else "without"
        sizes = _upload_batch_sizes(events, include_before)
        ours.update({(include_before, kind): size for kind, size in sizes.items()})
        for kind, size in sizes.items():
            report.add(f"UploadBatch {kind}, {label} before values", size, "B/event")
    report.add("encode+compress (zstd-3, with before)", _encode_rate(events), "events/s")
    report.add("decompress+verify+decode (zstd-3)", _decode_rate(events), "events/s")
    report.set_ratio(
        ours[(True, "zstd-3")] / debezium_zstd,
        "UploadBatch zstd-3 B/event (with before values) / Debezium JSON zstd-3 B/event "
        "(goal <= 0.5)",
    )


def _describe_workload(report: Report, changes: Sequence[Change]) -> None:
    operations = Counter(change.event.operation.value for change in changes)
    tables = {change.event.table for change in changes}
    report.add("events", len(changes))
    report.add("tables touched", len(tables))
    for operation in ("UPDATE", "INSERT", "DELETE"):
        report.add(f"{operation} share", 100.0 * operations[operation] / len(changes), "%")


def _batches(items: Sequence[T]) -> list[Sequence[T]]:
    return [items[start:start + BATCH_SIZE] for start in range(0, len(items), BATCH_SIZE)]


def _debezium_sizes(changes: Sequence[Change]) -> tuple[float, float]:
    """(raw key+value bytes, zstd-3 bytes of newline-joined key/value records) per event."""
    raw = compressed = 0
    compressor = zstandard.ZstdCompressor(level=3)
    for batch in _batches(changes):
        lines = []
        for change in batch:
            lines += [change.record.key_bytes() or b"", change.record.value_bytes() or b"null"]
        body = b"\n".join(lines)
        raw += len(body) - (len(lines) - 1)
        compressed += len(compressor.compress(body))
    return raw / len(changes), compressed / len(changes)


def _serialized_batches(events: Sequence[ChangeEvent], include_before: bool) -> list[bytes]:
    return [
        codec.serialize_batch(codec.build_batch(
            batch, node_id=NODE_ID, batch_id=uuid.UUID(int=number), created_at=CREATED_AT,
            include_before=include_before,
        ))
        for number, batch in enumerate(_batches(events))
    ]


def _upload_batch_sizes(events: Sequence[ChangeEvent], include_before: bool) -> dict[str, float]:
    bodies = _serialized_batches(events, include_before)
    sizes = {"raw": float(sum(map(len, bodies)))}
    for level in (3, 19):
        sizes[f"zstd-{level}"] = float(
            sum(len(codec.compress_bytes(body, level)) for body in bodies)
        )
    return {kind: total / len(events) for kind, total in sizes.items()}


def _encode_rate(events: Sequence[ChangeEvent]) -> float:
    def once() -> float:
        with timed() as timing:
            for number, batch in enumerate(_batches(events)):
                codec.encode_batch(batch, node_id=NODE_ID, batch_id=uuid.UUID(int=number),
                                   created_at=CREATED_AT)
        return len(events) / timing.seconds
    return best_of(3, once)


def _decode_rate(events: Sequence[ChangeEvent]) -> float:
    bodies = [
        codec.encode_batch(batch, node_id=NODE_ID, batch_id=uuid.UUID(int=number),
                           created_at=CREATED_AT)
        for number, batch in enumerate(_batches(events))
    ]

    def once() -> float:
        with timed() as timing:
            for body in bodies:
                codec.decode_batch(body, max_compressed=1 << 22, max_decompressed=1 << 24)
        return len(events) / timing.seconds
    return best_of(3, once)
