"""`tidesync inspect debezium`: normalize one Debezium record and print the outcome as JSON.

Shows exactly what the ship would make of a record: the change event, or why it skips or blocks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tidesync.cdc.column_types import ColumnTypesError, InMemoryColumnTypes
from tidesync.cdc.debezium import DebeziumNormalizer, KafkaRecord, NormalizerSettings, source_of
from tidesync.cdc.outcomes import Block, Normalized, Outcome
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.event_json import change_event_to_json

EXIT_OK = 0
EXIT_BLOCKED = 2
EXIT_USAGE = 2


class _UsageError(TidesyncError):
    code = ErrorCode.INVALID_INPUT


def add_inspect_debezium_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("value_file", metavar="VALUEFILE",
                        help="the record value as the JSON converter wrote it; - reads stdin")
    parser.add_argument("--key", metavar="KEYFILE",
                        help="the record key (JSON, with or without schema)")
    parser.add_argument("--key-columns", metavar="COLUMN,...",
                        help="without --key: primary key columns to read from the row image")
    parser.add_argument("--columns", metavar="COLUMNSFILE",
                        help='MySQL column types, {"db.table": {"column": "type", ...}}; '
                             "needed for payload-only records")
    parser.add_argument("--bidirectional", action="store_true",
                        help="treat the record's table as bidirectional (reads _sync_revision)")
    parser.add_argument("--topic", help="default: <source.name>.<db>.<table>, else unknown")
    parser.add_argument("--partition", type=_non_negative, default=0)
    parser.add_argument("--offset", type=_non_negative, default=0)
    parser.add_argument("--origin", default="local", help="origin node id (default: local)")
    parser.add_argument("--connector-id", default="unknown",
                        help="source connector id (default: unknown)")
    parser.set_defaults(handler=run_inspect_debezium)


def _non_negative(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{number} is negative")
    return number


def run_inspect_debezium(args: argparse.Namespace) -> int:
    try:
        normalizer, record, key_columns = _prepare(args)
    except _UsageError as error:
        print(f"tidesync inspect debezium: {error}", file=sys.stderr)
        return EXIT_USAGE
    outcome = normalizer.normalize(record, key_columns=key_columns)
    print(json.dumps(outcome_to_json(outcome), indent=2, ensure_ascii=False))
    return EXIT_BLOCKED if isinstance(outcome, Block) else EXIT_OK


def outcome_to_json(outcome: Outcome) -> dict[str, object]:
    if isinstance(outcome, Normalized):
        return {"outcome": "event", "event": change_event_to_json(outcome.event)}
    kind = "block" if isinstance(outcome, Block) else "skip"
    return {"outcome": kind, "reason": outcome.reason.value, "detail": outcome.detail}


def _prepare(args: argparse.Namespace
             ) -> tuple[DebeziumNormalizer, KafkaRecord, tuple[str, ...] | None]:
    if args.key and args.key_columns:
        raise _UsageError("give either --key or --key-columns, not both")
    value = _read(args.value_file)
    key = _read(args.key) if args.key else None
    try:
        column_types = InMemoryColumnTypes.from_json_file(args.columns) if args.columns else None
    except ColumnTypesError as error:
        raise _UsageError(str(error)) from None
    server, database, table = source_of(value)
    topic = args.topic or (f"{server}.{database}.{table}" if server and database and table
                           else "unknown")
    bidirectional = frozenset({(database, table)}) if (
        args.bidirectional and database and table) else frozenset()
    settings = NormalizerSettings(
        origin_node_id=args.origin, source_connector_id=args.connector_id,
        bidirectional_tables=bidirectional, column_types=column_types,
    )
    key_columns = tuple(c.strip() for c in args.key_columns.split(",") if c.strip()) if (
        args.key_columns) else None
    record = KafkaRecord(topic=topic, partition=args.partition, offset=args.offset, key=key,
                         value=value)
    return DebeziumNormalizer(settings), record, key_columns


def _read(path: str) -> bytes:
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as error:
        raise _UsageError(f"cannot read {path}: {error.strerror or error}") from None
