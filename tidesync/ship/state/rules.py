"""Sync rules in the ship state store: the snapshots the shore offered with what validating
them found, and the rule switches (generations) with the queue position each took effect at.

A switch reads every partition's read offset and stores it in the same transaction, so the
position it records is exactly where records start being shaped by the new rules.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tidesync.cdc.kafka import PartitionKey
from tidesync.ship.state.database import ShipStateDatabase

CONFIG_CURSOR = "rules_config"
"""The sync_cursor row holding the config version this ship last applied."""


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """One offered rule version as stored: its content and what validating it found."""

    rule_id: str
    version: int
    status: str
    content: bytes
    checksum: bytes
    valid: bool
    problems: tuple[str, ...]
    active: bool
    config_version: str
    received_at: str


@dataclass(frozen=True, slots=True)
class StoredGeneration:
    """One rule switch: the rules' canonical JSON contents and, per partition, the first offset
    read under them (partitions not listed had nothing read yet: all of theirs)."""

    generation: int
    config_version: str
    contents: tuple[bytes, ...]
    from_offsets: dict[PartitionKey, int]
    switched_at: str


class SQLiteRules:
    """rule_snapshot, rule_switch and rule_switch_offset."""

    def __init__(self, database: ShipStateDatabase) -> None:
        self.database = database

    # ------------------------------------------------------------------ reading

    def config_version(self) -> str:
        return self.database.cursor(CONFIG_CURSOR)

    def generations(self) -> list[StoredGeneration]:
        """Every stored generation, oldest first."""
        conn = self.database.conn
        rows = conn.execute("SELECT generation, config_version, rules, switched_at"
                            " FROM rule_switch ORDER BY generation").fetchall()
        offsets: dict[int, dict[PartitionKey, int]] = {}
        for generation, topic, partition, offset in conn.execute(
                "SELECT generation, topic, kafka_partition, from_offset"
                " FROM rule_switch_offset"):
            offsets.setdefault(generation, {})[PartitionKey(topic, partition)] = offset
        return [StoredGeneration(row[0], row[1],
                                 tuple(text.encode() for text in json.loads(row[2])),
                                 offsets.get(row[0], {}), row[3]) for row in rows]

    def offered(self) -> list[StoredSnapshot]:
        """The snapshots of the config version last applied, by rule id."""
        rows = self.database.conn.execute(
            "SELECT rule_id, version, status, content, checksum, validation, problems, active,"
            " config_version, received_at FROM rule_snapshot WHERE config_version = ?"
            " ORDER BY rule_id, version", (self.config_version(),)).fetchall()
        return [_snapshot(row) for row in rows]

    def snapshots(self, limit: int = 200) -> list[StoredSnapshot]:
        """The newest stored snapshots (for `ship status`)."""
        rows = self.database.conn.execute(
            "SELECT rule_id, version, status, content, checksum, validation, problems, active,"
            " config_version, received_at FROM rule_snapshot"
            " ORDER BY rule_id, version DESC LIMIT ?", (limit,)).fetchall()
        return [_snapshot(row) for row in rows]

    # ------------------------------------------------------------------ writing

    def apply(self, config_version: str, offered: Sequence[StoredSnapshot],
              switch_to: Sequence[bytes] | None) -> StoredGeneration | None:
        """Store the offered snapshots and the config version; with `switch_to` (the new active
        rules' contents) also record a switch at every partition's read offset + 1. One
        transaction: either all of it is recorded or none."""
        now = self.database.now_text()
        with self.database.transaction() as conn:
            for snapshot in offered:
                _upsert(conn, snapshot, config_version, now)
            generation = None
            if switch_to is not None:
                generation = self._switch(conn, config_version, switch_to, now)
                active = [json.loads(content) for content in switch_to]
                conn.execute("UPDATE rule_snapshot SET active = 0 WHERE active = 1")
                conn.executemany("UPDATE rule_snapshot SET active = 1"
                                 " WHERE rule_id = ? AND version = ?",
                                 [(doc["id"], doc["version"]) for doc in active])
            self.database.set_cursor(conn, CONFIG_CURSOR, config_version)
        return generation

    def _switch(self, conn: sqlite3.Connection, config_version: str,
                contents: Sequence[bytes], now: str) -> StoredGeneration:
        row = conn.execute("SELECT coalesce(max(generation), 0) FROM rule_switch").fetchone()
        generation = int(row[0]) + 1
        offsets = {PartitionKey(topic, partition): read + 1
                   for topic, partition, read in conn.execute(
                       "SELECT topic, kafka_partition, read_offset FROM partition_watermark"
                       " WHERE direction = ? AND consumer_group = ?",
                       (self.database.direction.value, self.database.consumer_group))}
        conn.execute("INSERT INTO rule_switch (generation, config_version, rules, switched_at)"
                     " VALUES (?, ?, ?, ?)",
                     (generation, config_version,
                      json.dumps([content.decode() for content in contents]), now))
        conn.executemany("INSERT INTO rule_switch_offset (generation, topic, kafka_partition,"
                         " from_offset) VALUES (?, ?, ?, ?)",
                         [(generation, key.topic, key.partition, offset)
                          for key, offset in offsets.items()])
        return StoredGeneration(generation, config_version, tuple(contents), offsets, now)

    def prune(self, generations: Iterable[int]) -> None:
        wanted = [(generation,) for generation in generations]
        if wanted:
            with self.database.transaction() as conn:
                conn.executemany("DELETE FROM rule_switch WHERE generation = ?", wanted)


def _upsert(conn: sqlite3.Connection, snapshot: StoredSnapshot, config_version: str,
            now: str) -> None:
    conn.execute(
        "INSERT INTO rule_snapshot (rule_id, version, status, content, checksum, validation,"
        " problems, active, config_version, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)"
        " ON CONFLICT (rule_id, version) DO UPDATE SET status = excluded.status,"
        " content = excluded.content, checksum = excluded.checksum,"
        " validation = excluded.validation, problems = excluded.problems,"
        " config_version = excluded.config_version, received_at = excluded.received_at",
        (snapshot.rule_id, snapshot.version, snapshot.status, snapshot.content,
         snapshot.checksum, "RULE_VALID" if snapshot.valid else "RULE_FAILED",
         json.dumps(list(snapshot.problems)), config_version, now))


def _snapshot(row: Any) -> StoredSnapshot:
    problems = json.loads(row[6] or "[]")
    return StoredSnapshot(row[0], row[1], row[2], bytes(row[3]), bytes(row[4]),
                          row[5] == "RULE_VALID", tuple(str(item) for item in problems),
                          bool(row[7]), row[8], row[9])
