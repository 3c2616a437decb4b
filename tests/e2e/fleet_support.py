"""Helpers for end-to-end tests of a fleet under sync rules: releasing rule files, reading
what ships report and where a ship switched rules, the ships' writes, and searching every
place a value could be stored (shore MariaDB, PostgreSQL, files) for a planted one."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.test_bidirectional import T0, Fleet
from tests.integration.capture_support import read_records
from tidesync.apps.rules import RuleReleasesApplication, rule_from_toml
from tidesync.bootstrap.rules import shore_schemas
from tidesync.config import TargetConfig

OPERATOR = "user:e2e-author"
APPROVER = "user:e2e-approver"


# ----------------------------------------------------------------------------- releasing


def release_in_process(app: RuleReleasesApplication, target: TargetConfig, text: str,
                       reason: str) -> tuple[str, int]:
    """Draft, validate (against the shore's table), approve and publish one rule file's text;
    its id and version."""
    rule = app.draft(rule_from_toml(text), OPERATOR, reason)
    with shore_schemas(target) as schema:
        problems = app.validate(rule.rule_id, rule.version, OPERATOR, reason, schema)
    assert problems == [], (rule.rule_id, problems)
    app.approve(rule.rule_id, rule.version, APPROVER, reason)
    app.publish(rule.rule_id, rule.version, OPERATOR, reason)
    return rule.rule_id, rule.version


def cli_ok(fleet: Fleet, *args: str) -> str:
    """Run `tidesync ARGS` as an operator would; its output (it must succeed)."""
    done = fleet.cli(*args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout + done.stderr


def release_with_cli(fleet: Fleet, path: Path, reason: str) -> tuple[str, int, str]:
    """`rules draft | validate | approve | publish` of a rule file; id, version and every
    line the commands printed."""
    printed = cli_ok(fleet, "rules", "draft", str(path), "--reason", reason,
                     "--actor", "e2e-author")
    found = re.search(r"drafted ([a-z][a-z0-9_-]*)@(\d+)", printed)
    assert found, printed
    ref = f"{found[1]}@{found[2]}"
    printed += cli_ok(fleet, "rules", "validate", ref, "--actor", "e2e-author")
    printed += cli_ok(fleet, "rules", "approve", ref, "--reason", reason,
                      "--actor", "e2e-approver")
    printed += cli_ok(fleet, "rules", "publish", ref, "--reason", reason,
                      "--actor", "e2e-author")
    return found[1], int(found[2]), printed


def rule_status(fleet: Fleet, rule_id: str) -> dict[str, Any]:
    """`tidesync rules status ID --json`."""
    document: dict[str, Any] = json.loads(cli_ok(fleet, "rules", "status", rule_id, "--json"))
    return document


def offered(app: RuleReleasesApplication, rule_id: str) -> tuple[int | None, str | None]:
    """The version of a rule ships are offered and its status."""
    summary = next(s for s in app.list() if s.rule_id == rule_id)
    status = summary.offered_status
    return summary.offered_version, None if status is None else status.value


@dataclass(frozen=True)
class Report:
    """What a node's latest heartbeat said about one rule."""

    active: int
    candidate: int
    validation: str
    problems: tuple[str, ...]


def reports(pg: psycopg.Connection[Any], rule_id: str) -> dict[str, Report]:
    """node id → its latest report on the rule (the `rule_activation` table)."""
    rows = pg.execute("SELECT node_id, active_version, candidate_version, validation, problems"
                      " FROM rule_activation WHERE rule_id = %s", (rule_id,)).fetchall()
    return {node: Report(int(active), int(candidate), validation, tuple(problems))
            for node, active, candidate, validation, problems in rows}


def runs(pg: psycopg.Connection[Any], node_id: str, rule_id: str, version: int) -> bool:
    report = reports(pg, rule_id).get(node_id)
    return report is not None and report.active == version


# ----------------------------------------------------------------------------- the ship's switch


def switch_offsets(state_path: str, rule_id: str, version: int) -> dict[tuple[str, int], int]:
    """Per (topic, partition): the first queue offset the ship shaped under the first rule
    generation that runs `rule_id@version` (read from its state store)."""
    uri = f"file:{state_path}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        generations = conn.execute(
            "SELECT generation, rules FROM rule_switch ORDER BY generation").fetchall()
        for generation, rules in generations:
            if (rule_id, version) in set(_versions(rules)):
                return {(topic, partition): offset for topic, partition, offset in conn.execute(
                    "SELECT topic, kafka_partition, from_offset FROM rule_switch_offset"
                    " WHERE generation = ?", (generation,))}
    raise AssertionError(f"the ship never switched to {rule_id}@{version}")


def _versions(rules_text: str) -> Iterator[tuple[str, int]]:
    for item in json.loads(rules_text):
        document = json.loads(item) if isinstance(item, str) else item
        yield str(document["id"]), int(document["version"])


def keys_by_offset(bootstrap: str, topic: str, partition: int = 0) -> dict[int, int]:
    """The change records of a topic partition: queue offset → the row's `id` key."""
    found: dict[int, int] = {}
    for record in read_records(bootstrap, [topic], idle_seconds=1.0, timeout=60):
        if record.partition != partition or record.value is None or record.key is None:
            continue
        key = json.loads(record.key)
        payload = key.get("payload", key)
        found[record.offset] = int(payload["id"])
    return found


# ----------------------------------------------------------------------------- ship writes


def noon_workload(conn: Any, rng: random.Random, total: int) -> tuple[int, int]:
    """`total` row changes of noon_report (inserts, updates, deletes, keys deleted and
    inserted again) in transactions of 1..20, and a few changes of the engine hours alone,
    which noon@1 does not send. Returns (synced changes, unsynced changes)."""
    live: set[int] = set()
    deleted: list[int] = []
    next_id, changes, unsynced = 1, 0, 0
    while changes < total:
        conn.begin()
        with conn.cursor() as cursor:
            for _ in range(rng.randrange(1, 21)):
                if changes >= total:
                    break
                kind = rng.choices(("insert", "update", "delete", "hours"),
                                   weights=(5, 4, 1.5, 0.2))[0]
                if kind != "insert" and len(live) < 5:
                    kind = "insert"
                if kind == "insert":
                    if deleted and rng.random() < 0.15:
                        key = deleted.pop(rng.randrange(len(deleted)))
                    else:
                        key, next_id = next_id, next_id + 1
                    remarks = None if rng.random() < 0.2 else f"calm sea {rng.randrange(10**6)}"
                    cursor.execute("INSERT INTO noon_report (id, vessel, speed, remarks,"
                                   " engine_hours, reported_at) VALUES (%s, %s, %s, %s, %s, %s)",
                                   (key, f"MT Alpha {key % 7}",
                                    Decimal(rng.randrange(0, 2500)) / 100, remarks,
                                    rng.randrange(10**5), T0))
                    live.add(key)
                    changes += 1
                    continue
                key = rng.choice(sorted(live))
                if kind == "delete":
                    cursor.execute("DELETE FROM noon_report WHERE id = %s", (key,))
                    live.discard(key)
                    deleted.append(key)
                    changes += 1
                elif kind == "update":
                    cursor.execute("UPDATE noon_report SET speed = %s, remarks = %s WHERE id = %s",
                                   (Decimal(rng.randrange(0, 2500)) / 100,
                                    f"change {changes}", key))
                    changes += 1
                else:
                    cursor.execute("UPDATE noon_report SET engine_hours = engine_hours + 1"
                                   " WHERE id = %s", (key,))
                    unsynced += 1
                assert cursor.rowcount == 1, (kind, key)
        conn.commit()
    return changes, unsynced


@dataclass
class OrderWriter:
    """Purchase orders inserted one by one on ship A while a rule change goes through; each
    row is written once and never changed, so its shape is decided by the rules in force at
    its queue position alone."""

    conn: Any
    written: list[tuple[int, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    failures: list[BaseException] = field(default_factory=list)

    def run(self) -> None:
        try:
            statuses = ("DRAFT", "OPEN", "CANCELLED")
            while not self.stop.is_set():
                key = 1000 + len(self.written)
                status = statuses[key % 3]
                with self.conn.cursor() as cursor:
                    cursor.execute("INSERT INTO purchase_order (id, supplier, amount, status,"
                                   " updated_at) VALUES (%s, 'Ship Chandler', %s, %s, %s)",
                                   (key, Decimal(key) / 4, status, T0))
                self.written.append((key, status))
                self.stop.wait(0.03)
        except BaseException as error:  # reported by the test thread
            self.failures.append(error)


# ----------------------------------------------------------------------------- searching


def _holds(value: object, needle: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return needle.encode() in data or needle.encode().hex() in data.decode("latin-1")
    return needle in str(value)


def mariadb_places(conn: Any, database: str, needle: str) -> list[str]:
    """`table.column` of every cell of the database holding `needle` (every table and column
    information_schema lists, values read in full)."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT table_name, column_name FROM information_schema.columns"
                       " WHERE table_schema = %s ORDER BY table_name, ordinal_position",
                       (database,))
        columns: dict[str, list[str]] = {}
        for table, column in cursor.fetchall():
            columns.setdefault(table, []).append(column)
        found = []
        for table, names in columns.items():
            listed = ", ".join(f"`{name}`" for name in names)
            cursor.execute(f"SELECT {listed} FROM `{database}`.`{table}`")
            for row in cursor.fetchall():
                found += [f"{table}.{name}" for name, value in zip(names, row, strict=True)
                          if _holds(value, needle)]
    return sorted(set(found))


def postgres_places(dsn: str, needle: str) -> list[str]:
    """`table.column` of every cell of every table of the database's schemas holding `needle`
    (bytea compared as bytes, the rest as text)."""
    found: set[str] = set()
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_type = 'BASE TABLE'"
            " AND table_schema NOT IN ('pg_catalog', 'information_schema')").fetchall()
        for schema, table in tables:
            cursor = conn.execute(f'SELECT * FROM "{schema}"."{table}"')
            names = [column.name for column in cursor.description or ()]
            for row in cursor:
                found.update(f"{table}.{name}" for name, value in zip(names, row, strict=True)
                             if _holds(value, needle))
    return sorted(found)


def file_places(paths: Iterable[Path], needle: str) -> list[str]:
    """The files (that exist) whose bytes hold `needle`."""
    data = needle.encode()
    return sorted(str(path) for path in paths if path.exists() and data in path.read_bytes())


def sqlite_files(state_path: str) -> list[Path]:
    """A SQLite database file with its write-ahead log and shared memory files."""
    return [Path(state_path + suffix) for suffix in ("", "-wal", "-shm")]
