"""Wire size: bytes per event of upload batches against Debezium's JSON for the same changes.

Two built-in workloads: wide rows (30 ERP tables, 70% updates of 1-3 columns) and narrow ship
rows (`_ship_workload`: positions, engines, noon reports, fuel, maintenance, crew; about 75%
updates of 3-4 columns). Each is normalized by the real DebeziumNormalizer where it starts from
records, cut into 500-event batches and compared with the same records as Debezium JSON
(payload-only and with schemas), zstd-3 over each batch's newline-joined keys and values.
The ratio is the worse of the two workloads' UploadBatchV2 / payload-only JSON.

The zstd dictionary lines show what a ship's own dictionary (`tidesync.ship.dictionaries`,
the ship's default size and thresholds) does to the same batches: it is trained on the batches
of an earlier stretch of the same ship's changes (another seed of the workload, or the first
half of `--input`) and counted only if the ship would use it; sending it once costs the bytes
shown beside. The ratio itself stays without dictionaries.

`--input RECORDS.jsonl [--columns TYPES.json]` runs the comparison on records an operator
supplies instead: one JSON object per line with topic, partition, offset, key and value (key
and value as the JSON documents, or as text holding them, as `rpk topic consume` prints them;
`kcat -J` names the value `payload`, which is taken too); `--columns` as for `tidesync
inspect debezium`, needed for payload-only records. Only the records that become change events
are compared, on both sides: tombstones, transaction markers, schema changes and records the
normalizer blocks are left out of the JSON side too, and counted by outcome in the report.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import zstandard

from benchmarks import _mysql_workload, _ship_workload
from benchmarks.harness import Report, best_of, timed
from tidesync.cdc.column_types import InMemoryColumnTypes
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings
from tidesync.cdc.outcomes import BlockReason, Normalized, Skip
from tidesync.domain.change_event import ChangeEvent
from tidesync.ship.dictionaries import BatchDictionaries
from tidesync.wire import codec

BATCH_SIZE = 500
CREATED_AT = dt.datetime(2025, 3, 2, tzinfo=dt.UTC)
MAX_INPUT_LINE = 16 << 20
T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", metavar="RECORDS.jsonl", type=Path,
                        help="Debezium records, one JSON object per line (topic, partition,"
                             " offset, key, value); default: the built-in workloads")
    parser.add_argument("--columns", metavar="TYPES.json", type=Path,
                        help='MySQL column types {"db.table": {"column": "type"}}, for'
                             " payload-only records")
    parser.add_argument("--origin", default="ship-0042", help="origin node id of the records")


@dataclass(frozen=True, slots=True)
class Workload:
    """Events and the key/value JSON documents of the records they came from, in order."""

    name: str
    events: list[ChangeEvent]
    keys: list[bytes | None]       # as the records carry them (with schemas where they do)
    values: list[bytes | None]
    payload_keys: list[bytes | None]
    payload_values: list[bytes | None]
    history: list[ChangeEvent] = dataclasses.field(default_factory=list)
    """Earlier events of the same source, the batches a ship trains its dictionary on."""
    left_out: Counter[str] = dataclasses.field(default_factory=Counter)
    """Records of the input that are not in the comparison, by outcome."""


def run(report: Report, quick: bool = False, input: Path | None = None,
        columns: Path | None = None, origin: str = "ship-0042") -> None:
    if input is not None:
        workload = _from_file(input, columns, origin)
        report.set_ratio(_compare(report, workload, schemas_known=False),
                         "UploadBatchV2 zstd-3 B/event / the records' JSON zstd-3 B/event"
                         " (goal <= 0.5)")
        return
    count = 2_000 if quick else 10_000
    ratios = [_compare(report, _wide(count, HISTORY), schemas_known=True),
              _compare(report, _narrow(count, HISTORY), schemas_known=True)]
    report.set_ratio(max(ratios), "the worse of the two workloads' UploadBatchV2 zstd-3 B/event"
                     " / Debezium payload-only JSON zstd-3 B/event (goal <= 0.5)")


# ----------------------------------------------------------------------------- workloads


def _payload(document: dict[str, Any] | None) -> bytes | None:
    if document is None:
        return None
    return _json(document["payload"] if "payload" in document and "schema" in document
                 else document)


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


HISTORY = 24 * BATCH_SIZE
"""Events of the earlier stretch: as many batches as a ship samples before it trains."""


def _wide(count: int, history: int = 0) -> Workload:
    changes = _mysql_workload.generate(count)
    records = [change.record for change in changes]
    earlier = [change.event for change in _mysql_workload.generate(history, seed=7)]
    return Workload("wide rows", [change.event for change in changes],
                    [r.key_bytes() for r in records], [r.value_bytes() for r in records],
                    [_payload(r.key) for r in records], [_payload(r.value) for r in records],
                    earlier)


def _narrow(count: int, history: int = 0) -> Workload:
    workload = _narrow_events(count)
    if history:
        workload = dataclasses.replace(workload,
                                       history=_narrow_events(history, seed=7).events)
    return workload


def _narrow_events(count: int, seed: int | None = None) -> Workload:
    records = (_ship_workload.generate(count) if seed is None
               else _ship_workload.generate(count, seed=seed))
    normalizer = DebeziumNormalizer(NormalizerSettings(
        origin_node_id=_ship_workload.NODE_ID, source_connector_id="ship-0042-mysql",
        bidirectional_tables=_ship_workload.TWO_WAY_TABLES))
    kafka = [KafkaRecord(r.topic, r.partition, r.offset, r.record.key_bytes(),
                         r.record.value_bytes()) for r in records]
    events = _normalized(normalizer, kafka)
    return Workload("narrow ship rows", events, [k.key for k in kafka], [k.value for k in kafka],
                    [_payload(r.record.key) for r in records],
                    [_payload(r.record.value) for r in records])


def _normalized(normalizer: DebeziumNormalizer, records: Iterable[KafkaRecord],
                left_out: Counter[str] | None = None) -> list[ChangeEvent]:
    """Normalized events with contiguous source sequences per partition, as the ship gives.
    `left_out` counts the other records by outcome (skipped or blocked, and why)."""
    sequences: Counter[tuple[str, int]] = Counter()
    events = []
    for record in records:
        outcome = normalizer.normalize(record)
        if isinstance(outcome, Normalized):
            key = (record.topic, record.partition)
            events.append(dataclasses.replace(outcome.event, source_sequence=sequences[key]))
            sequences[key] += 1
        elif left_out is not None:
            kind = "skipped" if isinstance(outcome, Skip) else "blocked"
            left_out[f"{kind}: {outcome.reason.value}"] += 1
    return events


def _from_file(path: Path, columns: Path | None, origin: str) -> Workload:
    types = InMemoryColumnTypes.from_json_file(columns) if columns else None
    normalizer = DebeziumNormalizer(NormalizerSettings(
        origin_node_id=origin, source_connector_id=f"{origin}-connector", column_types=types))
    kafka = []
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if len(line) > MAX_INPUT_LINE:
                raise SystemExit(f"{path}:{number}: line longer than {MAX_INPUT_LINE} bytes")
            if line.strip():
                try:
                    document = json.loads(line)
                except ValueError as error:
                    raise SystemExit(f"{path}:{number}: not a JSON object ({error})") from None
                kafka.append(_input_record(document, path, number))
    left_out: Counter[str] = Counter()
    events = _normalized(normalizer, kafka, left_out)
    if not events:
        raise SystemExit(f"{path}: no record normalized to a change event"
                         f" ({_described(left_out)}){_hint(left_out, columns)}")
    # Both sides carry the same changes: records that are no change (tombstones, transaction
    # markers, schema changes) or that could not be read are left out of the JSON side too.
    places = {(e.source_topic, e.source_partition, e.source_position) for e in events}
    changes = [r for r in kafka if (r.topic, r.partition, r.offset) in places]
    keys, values = [k.key for k in changes], [k.value for k in changes]
    return Workload(path.name, events, keys, values, keys, values, events[:len(events) // 2],
                    left_out)


def _described(left_out: Counter[str]) -> str:
    return ", ".join(f"{reason} {count:,}" for reason, count in sorted(left_out.items()))


def _hint(left_out: Counter[str], columns: Path | None) -> str:
    if columns is None and left_out[f"blocked: {BlockReason.TYPE_INFO_MISSING.value}"]:
        return "; payload-only records need their column types: --columns TYPES.json"
    return ""


def _input_record(document: Any, path: Path, number: int) -> KafkaRecord:
    """One line: `value` holds the record's value (`payload`, as `kcat -J` names it, when
    there is no `value`); partition and offset default to 0 and the line's number."""
    if not isinstance(document, dict) or not isinstance(document.get("topic"), str):
        raise SystemExit(f"{path}:{number}: expected an object with topic, partition, offset,"
                         " key and value")
    value = document["value"] if "value" in document else document.get("payload")
    return KafkaRecord(document["topic"], _whole(document, "partition", 0, path, number),
                       _whole(document, "offset", number - 1, path, number),
                       _document_bytes(document.get("key")), _document_bytes(value))


def _whole(document: dict[str, Any], name: str, default: int, path: Path, number: int) -> int:
    value = document.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SystemExit(f"{path}:{number}: {name} must be a whole number >= 0")
    try:
        whole = int(value)
    except ValueError:
        raise SystemExit(f"{path}:{number}: {name} must be a whole number >= 0") from None
    if whole < 0:
        raise SystemExit(f"{path}:{number}: {name} must be a whole number >= 0")
    return whole


def _document_bytes(document: Any) -> bytes | None:
    if document is None:
        return None
    return document.encode() if isinstance(document, str) else _json(document)


# ----------------------------------------------------------------------------- comparing


def _batches(items: Sequence[T]) -> list[Sequence[T]]:
    return [items[start:start + BATCH_SIZE] for start in range(0, len(items), BATCH_SIZE)]


def _json_zstd(keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> float:
    """zstd-3 bytes of the records' newline-joined keys and values, per 500 records."""
    compressor = zstandard.ZstdCompressor(level=3)
    total = 0
    for start in range(0, len(keys), BATCH_SIZE):
        lines: list[bytes] = []
        for key, value in zip(keys[start:start + BATCH_SIZE], values[start:start + BATCH_SIZE],
                              strict=True):
            lines += [key or b"", value or b"null"]
        total += len(compressor.compress(b"\n".join(lines)))
    return total


def _ours(events: Sequence[ChangeEvent], wire_version: int,
          before_values: codec.BeforeValues | None = None) -> tuple[float, float]:
    """(raw, zstd-3) bytes of the events' upload batches, as the ship cuts them (500)."""
    raw = compressed = 0
    for number, batch in enumerate(_batches(events)):
        body = codec.serialize_batch(codec.build_any_batch(
            batch, node_id=events[0].origin_node_id, batch_id=uuid.UUID(int=number),
            created_at=CREATED_AT, wire_version=wire_version, before_values=before_values))
        raw += len(body)
        compressed += len(codec.compress_bytes(body, 3))
    return raw, compressed


def _compare(report: Report, workload: Workload, *, schemas_known: bool) -> float:
    events, count = workload.events, len(workload.events)
    records = len(workload.keys)
    operations = Counter(event.operation.value for event in events)
    label = workload.name
    report.add(f"[{label}] records / events", f"{records + sum(workload.left_out.values()):,}"
               f" / {count:,}")
    for reason, left in sorted(workload.left_out.items()):
        report.add(f"[{label}] …left out of both sides, {reason}", left)
    report.add(f"[{label}] UPDATE share", 100.0 * operations["UPDATE"] / count, "%")
    report.add(f"[{label}] tables", len({(e.database, e.table) for e in events}))
    per = 1.0 / count
    payload = _json_zstd(workload.payload_keys, workload.payload_values) * per
    if schemas_known:
        report.add(f"[{label}] Debezium JSON with schemas, zstd-3",
                   _json_zstd(workload.keys, workload.values) * per, "B/event")
        report.add(f"[{label}] Debezium JSON payload-only, zstd-3", payload, "B/event")
    else:
        report.add(f"[{label}] the records' JSON, zstd-3", payload, "B/event")
    _, v1 = _ours(events, 1)
    report.add(f"[{label}] UploadBatch v1 zstd-3 (all before values)", v1 * per, "B/event")
    _, all_before = _ours(events, 2, codec.BeforeValues.ALL)
    report.add(f"[{label}] UploadBatchV2 zstd-3 (all before values)", all_before * per,
               "B/event")
    v2_raw, v2 = _ours(events, 2, codec.BeforeValues.CONFLICT)
    report.add(f"[{label}] UploadBatchV2 raw (as the ship sends)", v2_raw * per, "B/event")
    report.add(f"[{label}] UploadBatchV2 zstd-3 (as the ship sends)", v2 * per, "B/event")
    dictionary = _with_dictionary(workload.history, events)
    if dictionary is None:
        report.add(f"[{label}] UploadBatchV2 zstd-3 with the ship's dictionary",
                   "none pays (or too little history to train one)")
    else:
        sent_once, with_dictionary = dictionary
        report.add(f"[{label}] UploadBatchV2 zstd-3 with the ship's dictionary",
                   with_dictionary * per, "B/event")
        report.add(f"[{label}] the dictionary, sent once (zstd-3)", sent_once, "B")
        report.add(f"[{label}] ratio v2 with dictionary / payload-only JSON",
                   with_dictionary / (payload * count))
    report.add(f"[{label}] encode+compress v2", _encode_rate(events), "events/s")
    report.add(f"[{label}] shore open v2 (decode, derive ids, store as v1)",
               _open_rate(events), "events/s")
    ratio = v2 / (payload * count)
    report.add(f"[{label}] ratio v2 / payload-only JSON", ratio)
    return ratio


def _raw_batches(events: Sequence[ChangeEvent]) -> list[bytes]:
    return [codec.serialize_batch(codec.build_any_batch(
        batch, node_id=events[0].origin_node_id, batch_id=uuid.UUID(int=number),
        created_at=CREATED_AT, wire_version=2, before_values=codec.BeforeValues.CONFLICT))
        for number, batch in enumerate(_batches(events))]


def _with_dictionary(history: Sequence[ChangeEvent], events: Sequence[ChangeEvent]
                     ) -> tuple[int, int] | None:
    """The zstd-3 bytes of the dictionary a ship trains on its earlier batches (`history`),
    and of the events' v2 batches as it sends them with that dictionary; None when none
    pays."""
    if not history:
        return None
    dictionaries = BatchDictionaries()
    for raw in _raw_batches(history):
        dictionaries.compress(raw, codec.DEFAULT_LEVEL)
    chosen = dictionaries.waiting
    if chosen is None:
        return None
    dictionaries.accepted(chosen)
    sent = sum(len(dictionaries.compress(raw, codec.DEFAULT_LEVEL))
               for raw in _raw_batches(events))
    return len(codec.compress_bytes(chosen.content)), sent


def _bodies(events: Sequence[ChangeEvent]) -> list[bytes]:
    return [codec.encode_batch(batch, node_id=events[0].origin_node_id,
                               batch_id=uuid.UUID(int=number), created_at=CREATED_AT,
                               wire_version=2, before_values=codec.BeforeValues.CONFLICT)
            for number, batch in enumerate(_batches(events))]


def _encode_rate(events: Sequence[ChangeEvent]) -> float:
    def once() -> float:
        with timed() as timing:
            _bodies(events)
        return len(events) / timing.seconds
    return best_of(2, once)


def _open_rate(events: Sequence[ChangeEvent]) -> float:
    bodies = _bodies(events)

    def once() -> float:
        with timed() as timing:
            for body in bodies:
                codec.open_batch(body, 1 << 22, 1 << 25)
        return len(events) / timing.seconds
    return best_of(2, once)
