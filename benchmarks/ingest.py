"""Shore ingest: signed 500-event uploads through the real HTTP endpoint into the inbox, against
the raw unnest INSERT of the same inbox rows straight into PostgreSQL.

The server is `tidesync shore serve` in its own process; one client thread per node uploads
pre-encoded batches over a kept-alive connection. Both sides use the same concurrency.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import http.client
import os
import subprocess
import sys
import threading
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import psycopg
import zstandard

from benchmarks._mysql_workload import generate
from benchmarks.harness import Report, timed
from tidesync.apps.master_key import SecretBox
from tidesync.apps.nodes import Actor, NodesApplication, NodeService
from tidesync.domain.change_event import ChangeEvent
from tidesync.ingress.auth import sign_request
from tidesync.localservices import PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb

BATCH = 500
NODES = 4
CREATED_AT = dt.datetime(2025, 3, 2, tzinfo=dt.UTC)
REPOSITORY = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Upload:
    """One node's pre-encoded batches and the rows they put into inbox_event."""

    node_id: str
    secret: bytes
    bodies: list[bytes]
    rows: list[tuple[Any, ...]]


def run(report: Report, quick: bool = False) -> None:
    batches_per_node = 4 if quick else 30
    repeats = 1 if quick else 3
    master_key = base64.b64encode(os.urandom(32)).decode("ascii")
    with PostgresDatabase() as database, TemporaryDirectory() as workdir:
        migrate_postgres(database.dsn)
        uploads = _prepare(database, master_key, batches_per_node)
        events = sum(len(u.rows) for u in uploads)
        _describe(report, uploads, events)
        with _server(database, master_key, Path(workdir)) as url:
            ingest = raw = raw_single = 0.0
            # Alternate the two paths so drift on a shared machine hits both alike.
            for _ in range(repeats):
                _clear_inbox(database)
                ingest = max(ingest, _ingest_rate(url, uploads))
                raw = max(raw, _raw_rate(database, uploads, concurrent=True))
                raw_single = max(raw_single, _raw_rate(database, uploads, concurrent=False))
    report.add(f"HTTP ingest ({NODES} nodes x 1 client, {BATCH}/batch)", ingest, "events/s")
    report.add(f"raw unnest INSERT of the same rows ({NODES} connections, {BATCH}/txn)", raw,
               "rows/s")
    report.add(f"raw unnest INSERT of the same rows (1 connection, {BATCH}/txn)", raw_single,
               "rows/s")
    report.set_ratio(ingest / raw, (
        "ingest events/s through POST /sync/v1/batches ÷ raw unnest INSERT rows/s of the same"
        f" inbox rows at the same concurrency ({NODES}); target >= 0.4"
    ))


def _describe(report: Report, uploads: Sequence[Upload], events: int) -> None:
    bodies = [body for upload in uploads for body in upload.bodies]
    report.add("events per run", events)
    report.add("batches per run", len(bodies))
    report.add("compressed batch size (mean)", sum(map(len, bodies)) / len(bodies), "B")


# ----------------------------------------------------------------------------- data


def _prepare(database: PostgresDatabase, master_key: str, batches: int) -> list[Upload]:
    """Register the nodes and encode each one's share of a realistic mixed workload."""
    app = NodesApplication(env=_store_env(database))
    service = NodeService(app, SecretBox(base64.b64decode(master_key)))
    uploads = []
    try:
        for number in range(NODES):
            node_id = f"bench-{uuid.uuid4().hex[:8]}"
            secret = service.register(node_id, Actor("benchmark", "ingest benchmark"),
                                      dt.datetime.now(dt.UTC)).secret
            events = [dataclasses.replace(change.event, origin_node_id=node_id)
                      for change in generate(batches * BATCH, seed=number)]
            uploads.append(_encode(node_id, secret, events))
    finally:
        app.close()
    return uploads


def _encode(node_id: str, secret: bytes, events: Sequence[ChangeEvent]) -> Upload:
    bodies: list[bytes] = []
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(events), BATCH):
        chunk = events[start:start + BATCH]
        batch_ref = uuid.uuid4()
        bodies.append(codec.encode_batch(chunk, node_id=node_id, batch_id=batch_ref,
                                         created_at=CREATED_AT))
        rows += [(e.event_id, batch_ref, index, e.source_topic, e.source_partition,
                  e.source_position, e.source_sequence, e.replay_epoch)
                 for index, e in enumerate(chunk)]
    return Upload(node_id, secret, bodies, rows)


def _store_env(database: PostgresDatabase) -> dict[str, str]:
    return {**database.eventsourcing_env(), "POSTGRES_POOL_SIZE": "2"}


def _clear_inbox(database: PostgresDatabase) -> None:
    with database.connect() as conn:
        conn.execute("TRUNCATE inbox_event, inbox_batch, request_nonce")


# ----------------------------------------------------------------------------- ingest


@contextmanager
def _server(database: PostgresDatabase, master_key: str, workdir: Path) -> Iterator[str]:
    """`tidesync shore serve` on a free port, configured for this database."""
    config = workdir / "tidesync.toml"
    config.write_text(
        "[shore]\nlisten_port = 0\nnode_requests_per_second = 100000\n"
        "node_request_burst = 100000\ndatabase_pool_size = 8\n"
        f'[event_store]\nkind = "postgres"\npostgres_host = "{database.host}"\n'
        f"postgres_port = {database.port}\npostgres_dbname = \"{database.dbname}\"\n"
        f'postgres_user = "{database.user}"\npostgres_password = "{database.password}"\n'
        "postgres_pool_size = 2\n", encoding="utf-8")
    env = {**os.environ, "TIDESYNC_SHORE__MASTER_KEY": master_key, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tidesync", "--config", str(config), "shore", "serve"],
        cwd=REPOSITORY, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"server did not start: {line}{process.stderr.read()}")  # type: ignore[union-attr]
        yield line.split("listening on ")[1].strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


def _ingest_rate(url: str, uploads: Sequence[Upload]) -> float:
    failures: list[str] = []
    threads = [threading.Thread(target=_upload_all, args=(url, upload, failures))
               for upload in uploads]
    with timed() as timing:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failures:
        raise RuntimeError(f"{len(failures)} uploads failed; first: {failures[0]}")
    return sum(len(u.rows) for u in uploads) / timing.seconds


def _upload_all(url: str, upload: Upload, failures: list[str]) -> None:
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=120)
    inflate = zstandard.ZstdDecompressor()
    try:
        for body in upload.bodies:
            headers = sign_request(upload.node_id, upload.secret, "POST", "/sync/v1/batches",
                                   body, dt.datetime.now(dt.UTC), str(uuid.uuid4()))
            connection.request("POST", "/sync/v1/batches", body=body, headers={
                "Content-Type": "application/x-protobuf", "Content-Encoding": "zstd",
                **headers})
            response = connection.getresponse()
            payload = response.read()
            if response.status != 200:
                failures.append(f"HTTP {response.status}")
                return
            answer = pb.UploadBatchResponse.FromString(inflate.decompress(payload))
            if any(status.status != pb.RECEIVED for status in answer.statuses):
                failures.append("an event was not RECEIVED")
                return
    finally:
        connection.close()


# ----------------------------------------------------------------------------- baseline


_RAW_INSERT = (
    "INSERT INTO raw_inbox_event (origin_node_id, event_id, batch_ref, batch_index,"
    " source_topic, source_partition, source_position, source_sequence, replay_epoch,"
    " received_at)"
    " SELECT %(node)s, e.event_id, e.batch_ref, e.batch_index, e.source_topic,"
    " e.source_partition, e.source_position, e.source_sequence, e.replay_epoch, %(now)s"
    " FROM unnest(%(ids)b::uuid[], %(refs)b::uuid[], %(indexes)b::int4[], %(topics)b::text[],"
    " %(partitions)b::int4[], %(positions)b::int8[], %(sequences)b::int8[], %(epochs)b::int8[])"
    " AS e(event_id, batch_ref, batch_index, source_topic, source_partition, source_position,"
    " source_sequence, replay_epoch)"
    " ON CONFLICT (origin_node_id, event_id) DO NOTHING"
)


def _raw_rate(database: PostgresDatabase, uploads: Sequence[Upload], concurrent: bool) -> float:
    """Rows/s inserting each node's inbox rows, 500 per transaction, into a table like
    inbox_event (same columns, keys and indexes), with parameters prepared beforehand."""
    with database.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS raw_inbox_event")
        conn.execute("CREATE TABLE raw_inbox_event (LIKE inbox_event INCLUDING ALL)")
        conn.commit()
    work = [(upload.node_id, _raw_params(upload)) for upload in uploads]
    if not concurrent:
        with timed() as timing:
            for node_id, params in work:
                _raw_insert(database, node_id, params)
    else:
        threads = [threading.Thread(target=_raw_insert, args=(database, node_id, params))
                   for node_id, params in work]
        with timed() as timing:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    return sum(len(u.rows) for u in uploads) / timing.seconds


def _raw_params(upload: Upload) -> list[dict[str, object]]:
    columns = list(zip(*upload.rows, strict=True))
    return [
        {"ids": list(columns[0][s:s + BATCH]), "refs": list(columns[1][s:s + BATCH]),
         "indexes": list(columns[2][s:s + BATCH]), "topics": list(columns[3][s:s + BATCH]),
         "partitions": list(columns[4][s:s + BATCH]), "positions": list(columns[5][s:s + BATCH]),
         "sequences": list(columns[6][s:s + BATCH]), "epochs": list(columns[7][s:s + BATCH])}
        for s in range(0, len(upload.rows), BATCH)
    ]


def _raw_insert(database: PostgresDatabase, node_id: str,
                batches: list[dict[str, object]]) -> None:
    now = dt.datetime.now(dt.UTC)
    with psycopg.connect(database.dsn) as conn:
        for params in batches:
            conn.execute(_RAW_INSERT, {**params, "node": node_id, "now": now})
            conn.commit()
