"""Catching views up: the record_head and receipts projections through the engine (select
notifications, decode with the application's mapper, one transaction per batch with the tracking
position) versus a raw batched select-and-insert of the same rows with psycopg.

A fresh PostgreSQL database gets finalized ApplyJobs saved directly (500 results each over 50k
records, a few percent rejected or deleted). The raw path selects the same stored events in the
same batches, decodes their JSON, builds the equivalent rows (digests, location, newest result
per record) and writes each batch with one unnest insert. The ratio is record_head's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
import uuid
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from benchmarks.harness import Report, timed
from tidesync.domain.apply_job import ApplyJob, EventResult, FinalResult
from tidesync.domain.change_event import RecordKey
from tidesync.localservices import PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.projections.audit import AuditProjection
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.engine import PostgresProjectionRunner, event_topic
from tidesync.projections.registry import ViewSettings
from tidesync.shore.worker import ShoreApps

RESULTS = 200_000
PER_JOB = 500
RECORDS = 50_000
BATCH = 20
"""Notifications per batch on both paths (20 Finalized events = 10,000 results)."""
SAVE_CHUNK = 2
"""Jobs per save(): 25 finalized jobs of 500 results (about 10 MB) in one save stalled in
psycopg pipeline mode here (the server waiting to read, the client waiting to sync)."""
SHIP = "ship-0042"
FINALIZED = event_topic(ApplyJob.Finalized)  # type: ignore[attr-defined]


def run(report: Report, quick: bool = False) -> None:
    n = RESULTS // 10 if quick else RESULTS
    repeats = 1 if quick else 3
    with PostgresDatabase() as postgres:
        migrate_postgres(postgres.dsn)
        apps = ShoreApps.open({**postgres.eventsourcing_env(), "POSTGRES_POOL_SIZE": "2"})
        try:
            with timed() as saving:
                _generate(apps, n)
            report.add(f"save {n // PER_JOB:,} finalized ApplyJobs ({n:,} results)",
                       n / saving.seconds, "results/s")
            with ConnectionPool(postgres.dsn, min_size=1, max_size=4, open=True) as pool:
                rates = _measure(postgres.dsn, pool, apps, n, repeats)
        finally:
            apps.close()
    ours, raw, receipts, receipts_raw, others = rates
    report.add(f"record_head through the engine ({n:,} results, {BATCH} events/txn)", ours,
               "results/s")
    report.add("record_head raw select + unnest upsert", raw, "results/s")
    report.add(f"receipts through the engine ({n:,} results)", receipts, "results/s")
    report.add("receipts raw select + unnest insert", receipts_raw, "results/s")
    report.add("receipts ÷ raw", receipts / receipts_raw, "")
    for view, rate in others.items():
        report.add(f"{view} through the engine (no inbox rows: sizes unknown)"
                   if view == "backlog" else f"{view} through the engine", rate, "results/s")
    report.set_ratio(ours / raw, (
        "record_head catch-up results/s through the projection engine ÷ raw batched select of"
        " the same stored events + one unnest upsert per batch (same rows, same batches)"))


def _measure(dsn: str, pool: ConnectionPool[Any], apps: ShoreApps, n: int,
             repeats: int) -> tuple[float, float, float, float, dict[str, float]]:
    catalogue = default_catalogue(ViewSettings(batch_size=BATCH))
    opened = {"apply_jobs": apps.apply_jobs, "conflict_cases": apps.conflicts}
    ours = raw = receipts = receipts_raw = 0.0
    with psycopg.connect(dsn) as conn:
        _raw_tables(conn)
        # Alternate the paths so drift on a shared machine hits all alike.
        for _ in range(repeats):
            raw = max(raw, n / _raw_record_head(conn))
            ours = max(ours, n / _engine(conn, catalogue, opened, pool, "record_head",
                                         "record_head"))
            receipts_raw = max(receipts_raw, n / _raw_receipts(conn))
            receipts = max(receipts, n / _engine(conn, catalogue, opened, pool, "receipts",
                                                 "receipt"))
        # For information: the other views that follow the same streams (once each).
        for table in ("backlog_event", "backlog_job"):
            conn.execute(f"TRUNCATE {table}")
        others = {"backlog": n / _engine(conn, catalogue, opened, pool, "backlog", "backlog"),
                  "audit (apply_jobs feed)": n / _engine(conn, catalogue, opened, pool,
                                                         "audit", "audit_event")}
        heads = conn.execute("SELECT count(*) FROM record_head").fetchone()
        raw_heads = conn.execute("SELECT count(*) FROM record_head_raw").fetchone()
    if heads != raw_heads:
        raise RuntimeError(f"record_head has {heads} rows, the raw path {raw_heads}")
    return ours, raw, receipts, receipts_raw, others


def _engine(conn: psycopg.Connection[Any], catalogue: Any, apps: dict[str, Any],
            pool: ConnectionPool[Any], view: str, table: str) -> float:
    conn.execute(f"TRUNCATE {table}")
    conn.execute("DELETE FROM projection_tracking WHERE name = %s OR name LIKE %s",
                 (view, f"{view}.%"))
    conn.commit()
    if view == "audit":  # only the feed that follows the ApplyJob streams
        runner: Any = PostgresProjectionRunner(
            AuditProjection("apply_jobs", apps["apply_jobs"], catalogue.kind_name), apps[
                "apply_jobs"], pool, batch_size=BATCH, tracking_name="audit.apply_jobs",
            lock_key="audit")
    else:
        runner = catalogue.runner(view, apps, pool)
    started = time.perf_counter()
    runner.run_until_idle()
    return time.perf_counter() - started


# ----------------------------------------------------------------------------- data


def _generate(apps: ShoreApps, n: int) -> None:
    """Finalized jobs over RECORDS records: mostly APPLIED updates, some deletes and
    rejections, saved SAVE_CHUNK jobs per save()."""
    lease = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    jobs = []
    for job_no in range(1, n // PER_JOB + 1):
        ids = [str(uuid.uuid4()) for _ in range(PER_JOB)]
        positions = [job_no * PER_JOB + i for i in range(PER_JOB)]
        job = ApplyJob(origin_node_id=SHIP, topic="cdc.shipdb.items", partition=job_no % 8,
                       replay_epoch=0, job_no=job_no, event_ids=ids, positions=positions,
                       worker="bench", lease_expires_at=lease, actor="system:bench",
                       reason="claimed")
        job.target_committed(ids, "system:bench", "committed")
        job.finalize([_result(event_id, position).as_row()
                      for event_id, position in zip(ids, positions, strict=True)],
                     "system:bench", "finalized")
        jobs.append(job)
        if len(jobs) == SAVE_CHUNK:
            apps.apply_jobs.save(*jobs)
            jobs = []
    if jobs:
        apps.apply_jobs.save(*jobs)


def _result(event_id: str, position: int) -> FinalResult:
    key = RecordKey.of("shipdb", f"items_{position % 5}", {"id": position % RECORDS})
    if position % 97 == 0:
        return FinalResult(event_id, EventResult.REJECTED, "DATA_TOO_LONG", position=position,
                           rule_id=f"table:shipdb.items_{position % 5}",
                           record_key=key.canonical(), operation="UPDATE")
    operation = "DELETE" if position % 13 == 0 else "UPDATE"
    return FinalResult(event_id, EventResult.APPLIED, "", None, str(uuid.uuid4()), position,
                       f"table:shipdb.items_{position % 5}", key.canonical(), operation)


# ----------------------------------------------------------------------------- raw paths


def _raw_tables(conn: psycopg.Connection[Any]) -> None:
    for table in ("record_head", "receipt"):
        conn.execute(f"DROP TABLE IF EXISTS {table}_raw")
        conn.execute(f"CREATE TABLE {table}_raw (LIKE {table} INCLUDING ALL)")
    conn.commit()


def _batches(conn: psycopg.Connection[Any]) -> Any:
    """The stored Finalized events, BATCH at a time, decoded from their JSON."""
    last = 0
    while True:
        rows = conn.execute(
            "SELECT notification_id, state FROM apply_jobs_events WHERE notification_id > %s"
            " AND topic = %s ORDER BY notification_id LIMIT %s", (last, FINALIZED, BATCH),
        ).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        yield [(notification_id, json.loads(state)) for notification_id, state in rows]


def _raw_record_head(conn: psycopg.Connection[Any]) -> float:
    conn.execute("TRUNCATE record_head_raw")
    conn.commit()
    decoder = json.JSONDecoder()
    started = time.perf_counter()
    for batch in _batches(conn):
        newest: dict[tuple[str, str], tuple[Any, ...]] = {}
        for notification_id, event in batch:
            at = dt.datetime.fromisoformat(event["timestamp"]["_data_"])
            for row in event["results"]:
                if row[1] != "APPLIED":
                    continue
                where, _ = decoder.raw_decode(row[7])
                names = dict(where)
                digest = hashlib.sha256(f"{row[6]}\x1f{row[7]}".encode()).hexdigest()
                newest[(row[6], digest)] = (
                    row[6], digest, row[7], names["database"][1], names["table"][1], row[4],
                    event["origin_node_id"], row[0], row[8] == "DELETE", at, notification_id)
        columns = [list(column) for column in zip(*newest.values(), strict=True)]
        conn.execute(
            "INSERT INTO record_head_raw AS h (rule_id, key_digest, record_key, database,"
            " table_name, revision, origin_node_id, last_event_id, tombstone, updated_at,"
            " log_position) SELECT a, b, c, d, e, f::uuid, g, h::uuid, i, j, k FROM unnest("
            "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::text[], %b::bool[], %b::timestamptz[], %b::int8[]) AS u(a, b, c, d, e, f, g,"
            " h, i, j, k) ON CONFLICT (rule_id, key_digest) DO UPDATE SET"
            " record_key = EXCLUDED.record_key, database = EXCLUDED.database,"
            " table_name = EXCLUDED.table_name, revision = EXCLUDED.revision,"
            " origin_node_id = EXCLUDED.origin_node_id, last_event_id = EXCLUDED.last_event_id,"
            " tombstone = EXCLUDED.tombstone, updated_at = EXCLUDED.updated_at,"
            " log_position = EXCLUDED.log_position WHERE h.log_position <= EXCLUDED.log_position",
            columns)
        conn.commit()
    return time.perf_counter() - started


def _raw_receipts(conn: psycopg.Connection[Any]) -> float:
    conn.execute("TRUNCATE receipt_raw")
    conn.commit()
    seq = 0
    started = time.perf_counter()
    for batch in _batches(conn):
        rows = []
        for _, event in batch:
            at = dt.datetime.fromisoformat(event["timestamp"]["_data_"])
            for row in event["results"]:
                rows.append((event["origin_node_id"], row[0], row[1], row[2] or None, row[3],
                             row[4], at, event["topic"], event["partition"], row[5]))
        columns = [list(column) for column in zip(*rows, strict=True)]
        conn.execute(
            "INSERT INTO receipt_raw (seq, origin_node_id, event_id, result, reason_code,"
            " conflict_id, result_revision, decided_at, source_topic, source_partition,"
            " source_position) SELECT %s + n, a, b::uuid, c, d, e::uuid, uuid_send(f::uuid), g,"
            " h, i, j FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::text[], %b::timestamptz[], %b::text[], %b::int4[], %b::int8[])"
            " WITH ORDINALITY AS u(a, b, c, d, e, f, g, h, i, j, n)", [seq, *columns])
        conn.commit()
        seq += len(rows)
    return time.perf_counter() - started
