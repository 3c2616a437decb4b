"""The ship's uploads over a simulated satellite link, against a raw bulk HTTP POST transfer
through the same simulated link in the same run.

The link (tidesync.linksim): 128 KiB/s each way, 300 ms each way, 5% of 1400-byte segments
arriving a second late, a 10 s outage (connections reset; `--outage-mode blackhole`: what it
catches is dropped, and each connection resumes at its next retransmission) every 60 s, random
resets (one per 4 MiB relayed on average). The ship client (real queue, state and HTTP link)
uploads a backlog of small rows (a few columns) and of large rows (about 3 KB of text each) to a
real shore (`tidesync shore serve` in a process of its own, PostgreSQL); the large rows go
twice: with the default settings (no uplink limit: bodies paced at the rate the uploads measure,
from a cautious start) and with the ship's uplink limit set to the link's rate (`[ship]
uplink_rate_bytes_per_sec`: bodies written as fast as the link takes them, taking turns).
Per workload: goodput of accepted upload payload (compressed batch bytes answered RECEIVED, or
recalled by batch id after a lost answer) while the backlog lasts, bytes sent up and
acknowledgement bytes down per payload byte, and how long after each outage ended the first
upload request (a batch, or the question what became of one cut off by the outage) got its
answer: when the ship was using the link again.
Bytes sent up are split into those that reached the shore (payload, HTTP framing and anything
sent twice) and those on the link when a reset or an outage cut the connection (lost by any
sender: the link's latency and retransmission stalls hold them). When the run ends, no new
upload starts and those on their way finish, so their bytes count on both sides.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as dt
import http.client
import http.server
import logging
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

from benchmarks.harness import Report
from benchmarks.ship import produce
from tidesync.apps.nodes import Actor
from tidesync.bootstrap.ingress import open_node_service
from tidesync.bootstrap.ship import build_client, uplink_pacer
from tidesync.capture.envelope_writer import (
    ColumnDefinition,
    DebeziumEnvelopeWriter,
    EnvelopeOp,
    SourceInfo,
    TableDefinition,
)
from tidesync.config import Config, EventStoreConfig, EventStoreKind, ShipConfig, ShoreConfig
from tidesync.domain.clock import utc_now
from tidesync.linksim import LinkProfile, LinkSimulator, LinkStats, OutageMode
from tidesync.localservices import PostgresDatabase, TansuBroker
from tidesync.migrations import migrate_postgres
from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.shore_answers import batch_answers
from tidesync.ship.state import ReceiveOutcome
from tidesync.ship.transport import BatchUnknown, HttpShoreLink, LinkDown, LinkReason
from tidesync.wire import sync_pb2 as pb

RATE = 128 * 1024
FULL = {"seconds": 120.0, "every": 60.0, "outage": 10.0, "small": 100_000, "large": 6_000}
# --quick (smoke tests): one short cycle.
QUICK = {"seconds": 12.0, "every": 12.0, "outage": 3.0, "small": 5_000, "large": 300}
SMALL_TEXT = 48  # characters of base64 text: about 70 B per event on the wire
LARGE_TEXT = 4000  # about 3 KB per event on the wire
RAW_CHUNK = 256 * 1024
PLAN_UPLINK = (RATE, 16 * 1024)
"""`[ship] uplink_rate_bytes_per_sec` and `uplink_burst_bytes` as a ship on this link is set up:
the plan's rate, a burst of an eighth of a second."""
SETTLE_SECONDS = 30.0
"""At the end of a run, how long the uploads on their way get to finish."""
DATABASE = "bench"
TABLE = TableDefinition(DATABASE, "items", (
    ColumnDefinition.parse("id", "bigint", nullable=False),
    ColumnDefinition.parse("name", "varchar(40)", nullable=False),
    ColumnDefinition.parse("qty", "int", nullable=False),
    ColumnDefinition.parse("price", "decimal(10,2)", nullable=False),
    ColumnDefinition.parse("notes", "text"),
    ColumnDefinition.parse("_sync_revision", "char(36)", nullable=False),
), ("id",))
MASTER_KEY = base64.b64encode(os.urandom(32)).decode("ascii")
REPOSITORY = Path(__file__).resolve().parents[1]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--outage-mode", choices=[mode.value for mode in OutageMode],
                        default=OutageMode.REFUSE.value,
                        help="how outages treat connections: refuse (reset them; the default),"
                             " blackhole (drop what they catch: each connection resumes at its"
                             " next retransmission) or stall (hold bytes until the end)")


def link_profile(size: dict[str, float], seed: int,
                 mode: OutageMode = OutageMode.REFUSE) -> LinkProfile:
    """The satellite link; the outage falls mid-cycle so the run sees the link come back."""
    return LinkProfile(
        rate_bytes_per_second=RATE, latency_seconds=0.3, loss=0.05, retransmit_seconds=1.0,
        outage_every_seconds=size["every"], outage_seconds=size["outage"],
        outage_offset_seconds=(size["every"] - size["outage"]) / 2,
        outage_mode=mode, resets_per_mib=0.25, seed=seed)


@dataclasses.dataclass
class Phase:
    """What one workload did on the link."""

    goodput: float
    accepted_bytes: int
    accepted_events: int
    stats: LinkStats
    recoveries: list[float]


def run(report: Report, quick: bool = False, outage_mode: str = OutageMode.REFUSE.value
        ) -> None:
    size = QUICK if quick else FULL
    mode = OutageMode(outage_mode)
    logging.getLogger("tidesync").setLevel(logging.ERROR)  # retries are expected here
    with PostgresDatabase() as database, TansuBroker() as broker:
        migrate_postgres(database.dsn)
        config = shore_config(database)
        raw, raw_stats = raw_goodput(link_profile(size, 1, mode), size["seconds"])
        report.add("raw bulk HTTP POST through the link (256 KiB bodies)", raw / 1024, "KiB/s")
        report.add("…its link bytes up per byte accepted", raw_stats.up_bytes / max(
            1, raw_stats.up_delivered), "")
        report.add("…its bytes on the link when a reset cut it, per byte accepted",
                   raw_stats.up_cut / max(1, raw_stats.up_delivered), "")
        with tempfile.TemporaryDirectory(prefix="tidesync-bench-shore-") as workdir, \
                shore_server(database, Path(workdir)) as shore_url:
            ratios = []
            for name, rows, text, uplink in (
                    ("small rows", int(size["small"]), SMALL_TEXT, (0, 1)),
                    ("large rows", int(size["large"]), LARGE_TEXT, (0, 1)),
                    ("large rows, uplink limit at the link's rate", int(size["large"]),
                     LARGE_TEXT, PLAN_UPLINK)):
                phase = upload_phase(config, shore_url, broker, name, rows, text, size, uplink,
                                     mode)
                _describe(report, name, phase, raw)
                ratios.append(phase.goodput / raw)
    report.set_ratio(min(ratios), (
        "the worse of the two workloads' goodput (compressed upload payload accepted per second"
        " while a backlog exists) ÷ a raw bulk HTTP POST's goodput through the same simulated"
        f" link (128 KiB/s, 300 ms each way, 5% segment loss, outages ({mode.value}), resets)"))


def _describe(report: Report, name: str, phase: Phase, raw: float) -> None:
    report.add(f"{name}: events accepted", phase.accepted_events)
    if not phase.accepted_bytes:
        report.add(f"{name}: link bytes up / down", f"{phase.stats.up_bytes:,} /"
                   f" {phase.stats.down_bytes:,}", "B")
        return
    accepted = phase.accepted_bytes
    report.add(f"{name}: payload per event on the wire",
               phase.accepted_bytes / max(1, phase.accepted_events), "B")
    report.add(f"{name}: goodput while a backlog exists", phase.goodput / 1024, "KiB/s")
    report.add(f"{name}: goodput ÷ raw", phase.goodput / raw, "")
    report.add(f"{name}: bytes sent up ÷ payload accepted", phase.stats.up_bytes / accepted, "")
    report.add(f"{name}: …of which reached the shore", phase.stats.up_delivered / accepted, "")
    report.add(f"{name}: …of which were on the link when a reset cut it",
               phase.stats.up_cut / accepted, "")
    report.add(f"{name}: acknowledgement bytes down ÷ payload up",
               phase.stats.down_bytes / accepted, "")
    report.add(f"{name}: connections / resets", f"{phase.stats.connections} /"
               f" {phase.stats.resets}")
    if phase.recoveries:
        report.add(f"{name}: first upload answered after the link returned (max)",
                   max(phase.recoveries), "s")
        report.add(f"{name}: …(mean)", statistics.mean(phase.recoveries), "s")
    else:
        report.add(f"{name}: first upload answered after the link returned",
                   "n/a (no outage ended)")


# ----------------------------------------------------------------------------- the shore


def shore_config(database: PostgresDatabase) -> Config:
    store = EventStoreConfig(
        kind=EventStoreKind.POSTGRES, postgres_host=database.host,
        postgres_port=database.port, postgres_dbname=database.dbname,
        postgres_user=database.user, postgres_password=database.password or "",
        postgres_pool_size=2)
    return Config(event_store=store, shore=ShoreConfig(
        listen_port=0, master_key=MASTER_KEY, node_requests_per_second=1000,
        node_request_burst=1000))


@contextmanager
def shore_server(database: PostgresDatabase, workdir: Path) -> Iterator[str]:
    """`tidesync shore serve` in a process of its own (as on a real shore: the ship's and the
    shore's Python do not share an interpreter lock), configured as `shore_config`."""
    config = workdir / "tidesync.toml"
    config.write_text(
        "[shore]\nlisten_port = 0\nnode_requests_per_second = 1000\n"
        "node_request_burst = 1000\n"
        f'[event_store]\nkind = "postgres"\npostgres_host = "{database.host}"\n'
        f"postgres_port = {database.port}\npostgres_dbname = \"{database.dbname}\"\n"
        f'postgres_user = "{database.user}"\npostgres_password = "{database.password or ""}"\n'
        "postgres_pool_size = 2\n", encoding="utf-8")
    env = {**os.environ, "TIDESYNC_SHORE__MASTER_KEY": MASTER_KEY, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tidesync", "--config", str(config), "shore", "serve"],
        cwd=REPOSITORY, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"the shore server did not start: {line}")
        yield line.split("listening on ")[1].strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


def register(config: Config, node_id: str) -> tuple[bytes, str]:
    with open_node_service(config, sealing=True) as nodes:
        issued = nodes.register(node_id, Actor("benchmark", "link benchmark"), utc_now())
    return issued.secret, issued.text


# ----------------------------------------------------------------------------- the ship


class CountingLink:
    """The ship's HTTP link, noting when each upload was accepted (answered, or its lost answer
    recalled) and its payload bytes. Uploads call it from several threads at once."""

    def __init__(self, inner: HttpShoreLink) -> None:
        self.inner = inner
        self.accepted: list[tuple[float, int, int]] = []  # (monotonic, bytes, events)
        self.answered: list[float] = []  # when an upload or a fate question got its answer
        self.first_upload: float | None = None
        self.fates = 0
        self._unanswered: dict[uuid.UUID, OutgoingBatch] = {}
        self._closed = False
        self._in_flight = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        """The run is over: no new upload starts (the ship sees the link down), and those on
        their way finish, so what they sent is weighed against what they got accepted."""
        self._closed = True

    def settled(self) -> bool:
        with self._lock:
            return self._in_flight == 0

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        self._enter()
        try:
            if self.first_upload is None:
                self.first_upload = time.monotonic()
            self._unanswered[batch.batch_id] = batch
            response = self.inner.upload(batch)
            self.answered.append(time.monotonic())
            self._count(batch, response)
            return response
        finally:
            self._leave()

    def batch_fate(self, batch_id: uuid.UUID, body: bytes | None = None
                   ) -> pb.UploadBatchResponse | BatchUnknown | None:
        self._enter()
        try:
            self.fates += 1
            response = self.inner.batch_fate(batch_id, body)
            self.answered.append(time.monotonic())
            batch = self._unanswered.get(batch_id)
            if isinstance(response, pb.UploadBatchResponse) and batch is not None:
                self._count(batch, response)
            return response
        finally:
            self._leave()

    def _enter(self) -> None:
        with self._lock:
            if self._closed:
                raise LinkDown(LinkReason.NETWORK_ERROR, "the benchmark run is over")
            self._in_flight += 1

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _count(self, batch: OutgoingBatch, response: pb.UploadBatchResponse) -> None:
        self._unanswered.pop(batch.batch_id, None)
        received = sum(1 for answer in batch_answers(batch.events, response)
                       if answer.outcome is ReceiveOutcome.RECEIVED)
        if received:
            self.accepted.append((time.monotonic(), len(batch.body) * received
                                  // max(1, len(batch.events)), received))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def records(writer: DebeziumEnvelopeWriter, count: int, text: int, seed: int
            ) -> Iterator[tuple[bytes, bytes | None]]:
    rng = random.Random(seed)
    moment = dt.datetime.now(dt.UTC)
    for number in range(1, count + 1):
        row = {"id": number, "name": f"part-{number:07d}", "qty": rng.randrange(1, 500),
               "price": Decimal(rng.randrange(100, 99999)) / 100,
               "notes": base64.b64encode(rng.randbytes(text * 3 // 4)).decode() if text
               else None,
               "_sync_revision": str(uuid.UUID(int=rng.getrandbits(128), version=4))}
        record = writer.change(TABLE, EnvelopeOp.CREATE, before=None, after=row, source=SourceInfo(
            server_id=101, file="mysql-bin.000001", pos=4 + number,
            ts_ms=int(moment.timestamp() * 1000), thread=1), processed_at=moment)
        yield record.key_bytes() or b"", record.value_bytes()


def run_client(ship: ShipConfig, link: CountingLink, stop: threading.Event) -> None:
    """The client on its own thread (its SQLite connections belong to the thread)."""
    client = build_client(ship, link)  # type: ignore[arg-type]
    client.stop_event = stop
    try:
        client.run()
    finally:
        client.close()


def upload_phase(config: Config, shore_url: str, broker: TansuBroker, name: str, rows: int,
                 text: int, size: dict[str, float], uplink: tuple[int, int] = (0, 1),
                 mode: OutageMode = OutageMode.REFUSE) -> Phase:
    """One workload; `uplink`: the ship's `uplink_rate_bytes_per_sec` and burst."""
    prefix = f"sync.cdc.link{uuid.uuid4().hex[:8]}"
    writer = DebeziumEnvelopeWriter(prefix)
    broker.create_topic(writer.topic(TABLE), partitions=1)
    produce(broker.bootstrap_servers, writer.topic(TABLE), records(writer, rows, text, seed=7))
    node_id = f"bench-link-{uuid.uuid4().hex[:8]}"
    secret, secret_text = register(config, node_id)
    port = int(shore_url.rsplit(":", 1)[1])
    with tempfile.TemporaryDirectory(prefix="tidesync-bench-link-") as state_dir, \
            LinkSimulator(("127.0.0.1", port), link_profile(size, 2, mode)) as link:
        ship = ShipConfig(node_id=node_id, shore_url=link.url, secret=secret_text,
                          state_path=f"{state_dir}/ship.sqlite",
                          kafka_bootstrap_servers=broker.bootstrap_servers,
                          topic_pattern=rf"^{re.escape(prefix)}\.",
                          bidirectional_tables=(f"{DATABASE}.items",),
                          uplink_rate_bytes_per_sec=uplink[0], uplink_burst_bytes=uplink[1])
        counting = CountingLink(HttpShoreLink(link.url, node_id, secret, clock=utc_now,
                                              keep_alive=float(ship.keep_alive_seconds),
                                              pacer=uplink_pacer(ship)))
        stop = threading.Event()
        thread = threading.Thread(target=run_client, args=(ship, counting, stop),
                                  name=f"ship-{name}", daemon=True)
        thread.start()
        deadline = link.started + size["seconds"]
        try:
            while (time.monotonic() < deadline and thread.is_alive()
                   and sum(a[2] for a in counting.accepted) < rows):
                time.sleep(0.1)
        finally:
            ended = min(time.monotonic(), deadline)
            counting.close()
            settle = time.monotonic() + SETTLE_SECONDS
            while not counting.settled() and time.monotonic() < settle:
                time.sleep(0.1)
            stop.set()
            thread.join(120)
        stats = link.stats
        outages = [end for _, end in link.outage_windows(ended) if end < ended]
    # Goodput counts what was accepted within the run; the bytes ratio also counts what the
    # uploads still on their way at its end got accepted, as they sent their bytes within it.
    everything = list(counting.accepted)
    accepted = [a for a in everything if a[0] <= ended]
    start = counting.first_upload or link.started
    drained = accepted[-1][0] if accepted and sum(a[2] for a in accepted) >= rows else ended
    payload = sum(a[1] for a in accepted)
    answered = list(counting.answered)
    recoveries = [min(t for t in answered if t >= end) - end for end in outages
                  if any(t >= end for t in answered)]
    return Phase(payload / max(1e-9, drained - start), sum(a[1] for a in everything),
                 sum(a[2] for a in everything), stats, recoveries)


# ----------------------------------------------------------------------------- the baseline


class _Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        remaining = int(self.headers.get("Content-Length") or 0)
        while remaining:
            chunk = self.rfile.read(min(65536, remaining))
            if not chunk:
                return
            remaining -= len(chunk)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the link resets connections on purpose


@contextmanager
def sink() -> Iterator[int]:
    server = _QuietServer(("127.0.0.1", 0), _Sink)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def raw_goodput(profile: LinkProfile, seconds: float) -> tuple[float, LinkStats]:
    """Bytes/s of 256 KiB POSTs sent back to back over one kept-alive connection (a new one
    at once after any failure) through the simulated link."""
    body = os.urandom(RAW_CHUNK)
    with sink() as port, LinkSimulator(("127.0.0.1", port), profile) as link:
        deadline, done, finished = link.started + seconds, 0, link.started
        connection: http.client.HTTPConnection | None = None
        while time.monotonic() < deadline:
            try:
                if connection is None:
                    connection = http.client.HTTPConnection("127.0.0.1", link.port, timeout=30)
                connection.request("POST", "/", body=body,
                                   headers={"Content-Type": "application/octet-stream"})
                response = connection.getresponse()
                response.read()
                if response.status == 200:
                    done, finished = done + len(body), time.monotonic()
            except (OSError, http.client.HTTPException):
                if connection is not None:
                    connection.close()
                connection = None
                time.sleep(0.05)
        if connection is not None:
            connection.close()
        return done / (max(deadline, finished) - link.started), link.stats
