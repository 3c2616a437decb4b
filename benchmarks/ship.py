"""The ship client's throughput (normalize → state → batch, a null shore) against a raw
confluent-kafka consume of the same records, and its peak RSS over a large queue backlog.

The null shore (`tidesync.ship.null_shore`) answers as a shore does: each upload RECEIVED by
offset ranges, then receipts pages of APPLIED ranges, so every event is recorded, answered
received and made terminal, as on a fleet.

Records are Debezium 3.x MySQL envelopes with schemas (the connector's default JSON converter)
of one bidirectional table: 70% inserts, 25% updates, 5% deletes with their tombstones.
The RSS is measured in a child process (VmHWM) while 1,000,000 records (--quick: 100,000) wait
in the broker; the design goal is at most 128 MiB.

It prints events/s, the client's CPU seconds per 1,000 events (process time, the queue
library's threads included), the share of one core it would need to keep a 128 KiB/s link
busy at the measured compressed bytes per event, and the ratio against a raw consume.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from confluent_kafka import Producer

from benchmarks.harness import Report, timed
from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)
from tidesync.config import ShipConfig

LINK_BYTES_PER_SECOND = 128 * 1024
FULL = {"throughput_records": 100_000, "backlog_records": 1_000_000, "rss_seconds": 120.0}
QUICK = {"throughput_records": 20_000, "backlog_records": 100_000, "rss_seconds": 20.0}
RSS_GOAL_MIB = 128
DATABASE = "bench"
TABLE = TableDefinition(DATABASE, "orders", (
    ColumnDefinition.parse("id", "bigint", nullable=False),
    ColumnDefinition.parse("order_no", "varchar(32)", nullable=False),
    ColumnDefinition.parse("customer", "varchar(128)"),
    ColumnDefinition.parse("status", "enum('new','confirmed','shipped','delivered')"),
    ColumnDefinition.parse("quantity", "int"),
    ColumnDefinition.parse("amount", "decimal(12,2)"),
    ColumnDefinition.parse("ordered_at", "datetime(3)"),
    ColumnDefinition.parse("notes", "text"),
    ColumnDefinition.parse("_sync_revision", "char(36)", nullable=False),
), ("id",))
_TOKENS = {"id": 987654321987, "quantity": 123456789, "position": 555555555,
           "before": "11111111-1111-4111-8111-111111111111",
           "after": "22222222-2222-4222-8222-222222222222"}


# ----------------------------------------------------------------------------- records


class _Templates:
    """One Debezium record per operation, rendered once; each record substitutes its values
    (id, quantity, binlog position, revisions) into the text: generating a million records
    through the writer itself would take most of the benchmark."""

    def __init__(self, topic_prefix: str) -> None:
        self.writer = DebeziumEnvelopeWriter(topic_prefix)
        self.topic = self.writer.topic(TABLE)
        row = {"id": _TOKENS["id"], "order_no": "PO-bench", "customer": "Ocean Star Ltd",
               "status": "confirmed", "quantity": _TOKENS["quantity"],
               "amount": Decimal("1234.50"), "ordered_at": None,
               "notes": "deliver to port of Rotterdam, gate 4", "_sync_revision": _TOKENS["before"]}
        after = {**row, "_sync_revision": _TOKENS["after"], "status": "shipped"}
        source = SourceInfo(server_id=101, file="mysql-bin.000007", pos=_TOKENS["position"],
                            ts_ms=1_790_000_000_000, thread=9)
        moment = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
        self.values = {
            "c": self.writer.change(TABLE, EnvelopeOp.CREATE, before=None, after=after,
                                    source=source, processed_at=moment).value_bytes(),
            "u": self.writer.change(TABLE, EnvelopeOp.UPDATE, before=row, after=after,
                                    source=source, processed_at=moment).value_bytes(),
            "d": self.writer.change(TABLE, EnvelopeOp.DELETE, before=row, after=None,
                                    source=source, processed_at=moment).value_bytes(),
        }
        self.key = self.writer.tombstone(TABLE, row).key_bytes() or b""

    def records(self, count: int, seed: int = 7) -> Iterator[tuple[bytes, bytes | None]]:
        rng = random.Random(seed)
        produced = 0
        while produced < count:
            op = rng.choices("cud", weights=(70, 25, 5))[0]
            key_id = rng.randrange(1, 1 << 40)
            values = {str(_TOKENS["id"]): str(key_id),
                      str(_TOKENS["quantity"]): str(rng.randrange(1, 500)),
                      str(_TOKENS["position"]): str(1000 + produced),
                      _TOKENS["before"]: str(uuid.UUID(int=rng.getrandbits(128))),
                      _TOKENS["after"]: str(uuid.UUID(int=rng.getrandbits(128)))}
            key, value = self.key, self.values[op]
            for token, text in values.items():
                key, value = key.replace(token.encode(), text.encode()), value.replace(
                    token.encode(), text.encode())
            yield key, value
            produced += 1
            if op == "d" and produced < count:
                yield key, None  # the tombstone after a delete
                produced += 1


def produce(bootstrap: str, topic: str, records: Iterator[tuple[bytes, bytes | None]]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "none"})
    count = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        from benchmarks.baselines import BaselineFailed

        raise BaselineFailed("records were not acknowledged")
    return count


# ----------------------------------------------------------------------------- the client


def ship_config(bootstrap: str, prefix: str, state_dir: str) -> ShipConfig:
    return ShipConfig(node_id="bench-ship", kafka_bootstrap_servers=bootstrap,
                      state_path=f"{state_dir}/ship.sqlite",
                      topic_pattern=rf"^{prefix.replace('.', chr(92) + '.')}\.",
                      bidirectional_tables=(f"{DATABASE}.orders",), heartbeat_interval_seconds=3600)


@dataclass(frozen=True)
class ClientRun:
    """What one client run with a null shore did, and what it cost."""

    terminal: int
    uploaded: int
    seconds: float
    cpu_seconds: float
    wire_bytes: int


def run_client(config: ShipConfig, timeout: float | None) -> ClientRun:
    """Run a client with a null shore until it is idle (or `timeout`)."""
    from tidesync.bootstrap.ship import build_client
    from tidesync.ship.heap import settle_startup_heap
    from tidesync.ship.null_shore import NullShoreLink

    link = NullShoreLink()
    client = build_client(config, link)
    settle_startup_heap()  # as `tidesync ship run` does once the client is built
    try:
        cpu_start = time.process_time()
        with timed() as timing:
            client.run(until_idle=True, timeout=timeout)
        cpu = time.process_time() - cpu_start
        terminal = client.state.state_counts().get("TERMINAL", 0)
    finally:
        client.close()
    return ClientRun(terminal, link.uploaded, timing.seconds, cpu,
                     link.counters.physical_bytes)


def _vm(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def child(bootstrap: str, prefix: str, state_dir: str, seconds: float) -> None:
    """Run in the measured process: report RSS before and after the client ran. The process
    loads what `tidesync ship run` loads (and not the raw baselines' database drivers)."""
    from tidesync.entrypoints.cli import build_parser

    build_parser(["ship", "run"]).parse_args(["ship", "run"])
    import tidesync.bootstrap.ship_reconcile
    import tidesync.ship.client  # noqa: F401 - load everything before the first sample

    started_kb = _vm("VmRSS")
    ran = run_client(ship_config(bootstrap, prefix, state_dir), seconds)
    print(json.dumps({"start_kb": started_kb, "peak_kb": _vm("VmHWM"), "terminal": ran.terminal,
                      "uploaded": ran.uploaded, "seconds": ran.seconds,
                      "cpu_seconds": ran.cpu_seconds}))


def _rss_in_child(bootstrap: str, prefix: str, seconds: float) -> dict[str, float]:
    from benchmarks import baselines

    with tempfile.TemporaryDirectory(prefix="tidesync-bench-ship-") as state_dir:
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks.ship", "--child", bootstrap, prefix, state_dir,
             str(seconds)],
            capture_output=True, text=True, timeout=seconds + 300, check=False,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    if result.returncode != 0:
        raise baselines.BaselineFailed(f"the measured client failed: {result.stderr[-2000:]}")
    measured: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return measured


# ----------------------------------------------------------------------------- the benchmark


def run(report: Report, quick: bool = False) -> None:
    from benchmarks import baselines
    from tidesync.localservices import TansuBroker  # the broker's tools stay out of the child

    size = QUICK if quick else FULL
    with TansuBroker() as broker:
        bootstrap = broker.bootstrap_servers
        throughput = _Templates("sync.cdc.tput")
        broker.create_topic(throughput.topic, partitions=1)
        n = produce(bootstrap, throughput.topic,
                    throughput.records(int(size["throughput_records"])))
        raw = baselines.kafka_consume(bootstrap, throughput.topic, n)
        with tempfile.TemporaryDirectory(prefix="tidesync-bench-ship-") as state_dir:
            ran = run_client(ship_config(bootstrap, "sync.cdc.tput", state_dir), timeout=600)
        if ran.terminal != ran.uploaded:
            raise baselines.BaselineFailed(
                f"{ran.uploaded} events uploaded, {ran.terminal} terminal")
        client = n / ran.seconds
        cpu_per_event = ran.cpu_seconds / ran.terminal
        bytes_per_event = ran.wire_bytes / ran.terminal
        link_events = LINK_BYTES_PER_SECOND / bytes_per_event
        report.add(f"records (Debezium JSON with schema, {len(throughput.values['u'])} B/update)",
                   n)
        report.add("events among them (the rest are tombstones)", ran.terminal)
        report.add("raw consume (confluent-kafka, assigned)", raw, "records/s")
        report.add("ship client: consume → normalize → SQLite → batch → null shore", client,
                   "records/s")
        report.add("ship client", ran.terminal / ran.seconds, "events/s")
        report.add("ship CPU per 1,000 events (process time, all threads)",
                   1000 * cpu_per_event, "s")
        report.add("compressed upload bytes per event", bytes_per_event, "B")
        report.add("events/s that fill a 128 KiB/s link", link_events, "events/s")
        report.add("share of one core at that rate", 100 * cpu_per_event * link_events, "%")

        backlog = _Templates("sync.cdc.backlog")
        broker.create_topic(backlog.topic, partitions=4)
        with timed() as producing:
            count = produce(bootstrap, backlog.topic,
                            backlog.records(int(size["backlog_records"])))
        report.add("backlog records waiting in the broker", count)
        report.add("backlog produce", count / producing.seconds, "records/s")
        measured = _rss_in_child(bootstrap, "sync.cdc.backlog", size["rss_seconds"])
    report.add("client RSS after imports", measured["start_kb"] / 1024, "MiB")
    report.add(f"client peak RSS (VmHWM) over the backlog (goal <= {RSS_GOAL_MIB})",
               measured["peak_kb"] / 1024, "MiB")
    report.add("events the measured client made terminal", int(measured["terminal"]))
    report.add("…in seconds", measured["seconds"], "s")
    if measured["terminal"]:
        report.add("…CPU per 1,000 events over the backlog",
                   1000 * measured["cpu_seconds"] / measured["terminal"], "s")
    report.set_ratio(client / raw, (
        "ship client records/s (normalize → SQLite state → batch → null shore, commits"
        " included) ÷ raw confluent-kafka consume records/s of the same records"
    ))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    else:
        sys.exit("usage: python -m benchmarks ship [--quick]")
