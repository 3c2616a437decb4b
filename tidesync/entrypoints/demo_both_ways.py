"""The demo's second half: shore changes travel down to the ship, and two concurrent edits of
one row become conflicts, one decided by policy and one left for a person.

The shore's business database is captured like the ship's (built-in SQLite capture into the
broker under its own logical name, `shore`); `shore work` consumes those topics, issues
commands, and the ship client pulls and applies them to the ship's database. Conflict
policies: `items` shore wins, `notes` manual, the rest shore wins too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psycopg

from tidesync.config import DownlinkConfig, ShipTargetConfig, ShipTargetKind
from tidesync.shore.settings import ConflictPolicy, ConflictsConfig

SHORE_LOGICAL_NAME = "shore"
SHORE_PREFIX = f"sync.cdc.{SHORE_LOGICAL_NAME}"
POLICY_TABLE = "items"   # decided by its policy (shore wins)
MANUAL_TABLE = "notes"   # left for a person
WAIT_SECONDS = 90.0


@dataclasses.dataclass(frozen=True)
class HeldRow:
    """A row two sides disagree on while its conflict waits for a person."""

    table: str
    key: int
    conflict_id: str


def both_ways_settings(tables: list[str], ship_node_id: str, ship_business: Path
                       ) -> tuple[DownlinkConfig, ConflictsConfig, ShipTargetConfig]:
    """The shore CDC consumer, the conflict policies and the ship's command target."""
    names = tuple(f"main.{name}" for name in tables)
    downlink = DownlinkConfig(
        topic_pattern=rf"^{SHORE_PREFIX.replace('.', '[.]')}[.]",
        consumer_group="demo-shore-cdc", source_connector_id=f"{SHORE_LOGICAL_NAME}-builtin",
        bidirectional_tables=names, nodes=(ship_node_id,))
    conflicts = ConflictsConfig(
        default_policy=ConflictPolicy.SHORE_WINS,
        policies={f"main.{POLICY_TABLE}": "SHORE_WINS", f"main.{MANUAL_TABLE}": "MANUAL"},
        poll_interval_ms=200)
    ship_target = ShipTargetConfig(kind=ShipTargetKind.SQLITE, sqlite_path=str(ship_business))
    return downlink, conflicts, ship_target


def write_config_file(path: Path, *, embedded_dir: Path, master_key_file: Path,
                      shore_business: Path, shore_node_id: str) -> None:
    """A configuration the CLI can use against the running demo (`tidesync --config …`)."""
    def text(value: object) -> str:
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'

    path.write_text(
        "# Written by `tidesync demo`: the CLI's view of the demo's shore.\n"
        "[event_store]\n"
        'kind = "embedded"\n'
        f"embedded_dir = {text(embedded_dir)}\n"
        "[shore]\n"
        f"master_key_file = {text(master_key_file)}\n"
        "[target]\n"
        f"node_id = {text(shore_node_id)}\n"
        f"sqlite_path = {text(shore_business)}\n",
        encoding="utf-8")


def write_on(path: Path, sql: str, params: tuple[Any, ...] = ()) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=10)) as db:
        db.execute(sql, params)


def shore_changes(shore_business: Path) -> int:
    """Edits made on the shore, which the ship must receive; returns how many rows."""
    statements = [
        ("INSERT INTO notes (id, body) VALUES (?, ?)", (1001, "shore: port call confirmed")),
        ("INSERT INTO notes (id, body) VALUES (?, ?)", (1002, "shore: new safety circular")),
        ("UPDATE orders SET status = 'approved' WHERE id IN"
         " (SELECT id FROM orders ORDER BY id LIMIT 3)", ()),
    ]
    changed = 0
    with contextlib.closing(sqlite3.connect(shore_business, isolation_level=None,
                                            timeout=10)) as db:
        db.execute("BEGIN IMMEDIATE")
        for sql, params in statements:
            changed += db.execute(sql, params).rowcount
        db.execute("COMMIT")
    return changed


def first_key(path: Path, table: str) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                            timeout=10)) as db:
        row = db.execute(f"SELECT min(id) FROM {table}").fetchone()  # noqa: S608
    if row is None or row[0] is None:
        raise RuntimeError(f"no row in {table} to edit")
    return int(row[0])


def concurrent_edits(ship_business: Path, shore_business: Path) -> dict[str, int]:
    """The same row edited on both sides before either change travels: one per table."""
    keys = {POLICY_TABLE: first_key(ship_business, POLICY_TABLE),
            MANUAL_TABLE: first_key(ship_business, MANUAL_TABLE)}
    edits = {POLICY_TABLE: ("UPDATE items SET qty = ? WHERE id = ?", 11, 22),
             MANUAL_TABLE: ("UPDATE notes SET body = ? WHERE id = ?",
                            "ship: engine room log checked", "shore: superseded by circular")}
    for table, (sql, ship_value, shore_value) in edits.items():
        write_on(ship_business, sql, (ship_value, keys[table]))
        write_on(shore_business, sql, (shore_value, keys[table]))
    return keys


def conflict_states(conninfo: str) -> dict[str, list[tuple[str, str]]]:
    """Per table: (conflict id, state) of the conflict center's cases."""
    states: dict[str, list[tuple[str, str]]] = {}
    with psycopg.connect(conninfo) as conn:
        for conflict_id, table, state in conn.execute(
                "SELECT conflict_id, table_name, state FROM conflict_center"
                " ORDER BY opened_at"):
            states.setdefault(table, []).append((str(conflict_id), state))
    return states


def row_of(path: Path, table: str, key: int) -> tuple[Any, ...] | None:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                            timeout=10)) as db:
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")
                   if not row[1].startswith("_sync_")]
        found = db.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE id = ?",  # noqa: S608
                           (key,)).fetchone()
    return None if found is None else tuple(found)


def wait_for(condition: Callable[[], bool], stop: threading.Event,
             timeout: float = WAIT_SECONDS) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline or stop.wait(0.25):
            return False
    return True


def run_both_ways(paths: Any, conninfo: str, config_file: Path,
                  agree: Callable[[Mapping[str, set[int]]], bool],
                  out: Callable[[str], None], stop: threading.Event) -> HeldRow | None:
    """Shore edits down to the ship, then the two conflicts; returns the row left for a
    person (None if the demo could not show it). Raises TimeoutError when a step does not
    complete in time."""
    changed = shore_changes(paths.shore_business)
    out(f"shore → ship: {changed} rows changed on the shore")
    if not wait_for(lambda: agree({}), stop):
        raise TimeoutError("the shore's changes did not reach the ship")
    out("shore → ship: the ship has them (and sent nothing back)")

    keys = concurrent_edits(paths.ship_business, paths.shore_business)
    out(f"both sides edited {POLICY_TABLE} id={keys[POLICY_TABLE]} and "
        f"{MANUAL_TABLE} id={keys[MANUAL_TABLE]} at the same time")

    def settled() -> bool:
        states = conflict_states(conninfo)
        policy = [state for _, state in states.get(POLICY_TABLE, [])]
        manual = [state for _, state in states.get(MANUAL_TABLE, [])]
        same = (row_of(paths.ship_business, POLICY_TABLE, keys[POLICY_TABLE])
                == row_of(paths.shore_business, POLICY_TABLE, keys[POLICY_TABLE]))
        return (same and "ACKNOWLEDGED" in policy and "PENDING_MANUAL" in manual)

    if not wait_for(settled, stop):
        raise TimeoutError(f"the conflicts did not settle: {conflict_states(conninfo)}")
    states = conflict_states(conninfo)
    decided = next(cid for cid, state in states[POLICY_TABLE] if state == "ACKNOWLEDGED")
    waiting = next(cid for cid, state in states[MANUAL_TABLE] if state == "PENDING_MANUAL")
    out(f"conflict {decided}: {POLICY_TABLE} id={keys[POLICY_TABLE]} decided by policy"
        " SHORE_WINS; both sides hold the shore's row")
    out(f"conflict {waiting}: {MANUAL_TABLE} id={keys[MANUAL_TABLE]} waits for a person"
        " (policy MANUAL); decide it while the demo runs with")
    out(f"  tidesync --config {config_file} conflicts show {waiting}")
    out(f"  tidesync --config {config_file} conflicts decide {waiting} --side SHORE"
        " --reason \"the circular supersedes the log\"")
    return HeldRow(MANUAL_TABLE, keys[MANUAL_TABLE], waiting)
