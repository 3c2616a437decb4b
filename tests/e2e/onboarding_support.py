"""The parts of the onboarding end-to-end test: a ship and the shore whose `parts` tables held
the same 100,000 rows before tidesync was installed (then drifted apart), the running processes
(`ship capture`, `ship run`, `shore work`), and the operator's commands run in this process."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from tests.clocks import rounded_now
from tests.e2e.test_ship_to_shore import REPOSITORY, wait_until
from tidesync.entrypoints.cli import main

ROWS = 100_000
DDL = ("CREATE TABLE parts (id INT NOT NULL PRIMARY KEY, part_no VARCHAR(24) NOT NULL,"
       " description VARCHAR(120) NOT NULL, price DECIMAL(12,2) NOT NULL, qty INT NOT NULL,"
       " serviced_at DATETIME(6) NOT NULL, remarks TEXT NULL)"
       " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
COLUMNS = "id, part_no, description, price, qty, serviced_at, remarks"
# Business times a month back, whatever the date (tests also run with the clock shifted).
T0 = (rounded_now() - dt.timedelta(days=30)).replace(tzinfo=None)
# The same rows on both sides, made by the database itself (fast, and identical by
# construction): varchar, non-ASCII text, decimals, datetimes, a nullable text.
LOAD = ("INSERT INTO parts (" + COLUMNS + ")"
        " SELECT seq, CONCAT('P-', LPAD(seq, 6, '0')),"
        " CONCAT(ELT(1 + MOD(seq, 4), 'Dichtung für Ventil ', 'Joint d''étanchéité ',"
        " 'Подшипник ', 'ボルト '), MOD(seq, 97), ' ø', MOD(seq, 13), ' mm'),"
        " MOD(seq * 37, 100000) / 100, MOD(seq, 500),"
        " %s - INTERVAL seq MINUTE - INTERVAL MOD(seq, 1000) MICROSECOND,"
        " IF(MOD(seq, 5) = 0, NULL, CONCAT('Wartung Nr. ', MOD(seq, 211)))"
        " FROM seq_1_to_100000")
# How the two sides drift apart before tidesync is installed (0.5 % each).
SHIP_CHANGED = 3  # rows edited on the ship: id % 200 == 3
SHORE_CHANGED = 5  # rows edited on the shore
SHIP_ONLY = 7  # rows the shore never had (deleted there)
WRITTEN = 11  # rows the ship keeps changing while the snapshot runs
DELETED = 13  # rows the ship deletes while the snapshot runs
NEW_KEYS = 200_001  # rows the ship inserts while the snapshot runs start here


def keys_where(remainder: int) -> set[int]:
    return {key for key in range(1, ROWS + 1) if key % 200 == remainder}


def drift(ship: Any, shore: Any) -> None:
    """Edits on each side, later than the rows' business times, and rows the shore lacks."""
    with ship.cursor() as cursor:
        cursor.execute("UPDATE parts SET qty = qty + 1000, remarks = 'an Bord überholt',"
                       " serviced_at = %s WHERE MOD(id, 200) = %s",
                       (T0 + dt.timedelta(hours=1), SHIP_CHANGED))
    with shore.cursor() as cursor:
        cursor.execute("UPDATE parts SET price = price + 1, remarks = 'à terre: vérifié',"
                       " serviced_at = %s WHERE MOD(id, 200) = %s",
                       (T0 + dt.timedelta(hours=2), SHORE_CHANGED))
        cursor.execute("DELETE FROM parts WHERE MOD(id, 200) = %s", (SHIP_ONLY,))


def load(connection: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(DDL)
        cursor.execute(LOAD, (T0,))


def rows_of(connection: Any, keys: set[int] | None = None) -> dict[int, tuple[Any, ...]]:
    """id → the row's business columns and revision (all rows, or those of `keys`)."""
    where = "" if keys is None else " WHERE id IN (" + ", ".join(map(str, sorted(keys))) + ")"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {COLUMNS}, _sync_revision FROM parts{where}")
        return {row[0]: tuple(row[1:]) for row in cursor.fetchall()}


def checksum(connection: Any) -> tuple[int, int]:
    """Row count and an order-independent checksum of every column of every row (revision
    included), computed in the database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', id, part_no,"
                       " description, price, qty, serviced_at, IFNULL(remarks, '<null>'),"
                       " HEX(_sync_revision)))), 0) FROM parts")
        count, total = cursor.fetchone()
    return int(count), int(total)


def ledger(connection: Any, database: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT event_id FROM `{database}`.`_sync_applied`")
        return [str(row[0]) for row in cursor.fetchall()]


# ----------------------------------------------------------------------------- commands


def tidesync(env: dict[str, str], *args: str) -> tuple[int, str]:
    """`tidesync ARGS` as an operator runs it on one side (that side's environment), in this
    process: exit status and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue() + err.getvalue()


def ok(env: dict[str, str], *args: str) -> str:
    code, printed = tidesync(env, *args)
    assert code == 0, (args, printed)
    return printed


DIFFERING = re.compile(r"(\d+) differing keys in (\d+) rows, (\d+) messages, (\d+) bytes")


@dataclass(frozen=True)
class Reconciled:
    differing: int
    rows: int
    messages: int
    link_bytes: int
    last_message: Path


def reconcile(shore_env: dict[str, str], ship_env: dict[str, str], table: str,
              folder: Path, name: str) -> Reconciled:
    """The runbook's file exchange: `start` on the shore, then `answer` on the ship and the
    shore in turn until an answer ends it (the other side reads the last message too)."""
    first = folder / f"{name}-1.json.zst"
    ok(shore_env, "reconcile", "start", table, "--out", str(first))
    message, sides = first, [ship_env, shore_env]
    for number in range(2, 40):
        env = sides[number % 2]
        answer = folder / f"{name}-{number}.json.zst"
        code, printed = tidesync(env, "reconcile", "answer", str(message), "--out", str(answer))
        assert code in (0, 3), printed
        message = answer
        found = DIFFERING.search(printed)
        if found:
            code, printed = tidesync(sides[(number + 1) % 2], "reconcile", "answer",
                                     str(message), "--out", str(folder / f"{name}-end.json"))
            assert code in (0, 3), printed
            differing, rows, messages, link_bytes = (int(group) for group in found.groups())
            return Reconciled(differing, rows, messages, link_bytes, message)
    raise AssertionError("the reconciliation did not end")


def snapshot_status(env: dict[str, str], rule: str | None = None) -> dict[str, Any]:
    """`tidesync snapshot status` of the operator's snapshot, or of a rule's."""
    shown: list[dict[str, Any]] = json.loads(ok(env, "snapshot", "status"))
    (status,) = [item for item in shown if item["rule"] == rule]
    return status


# A table the ship's rules start to sync later: its rows exist on the ship only.
CREW_ROWS = 1_500
CREW_DDL = ("CREATE TABLE crew_list (id INT NOT NULL PRIMARY KEY, name VARCHAR(60) NOT NULL,"
            " `rank` VARCHAR(30) NOT NULL, signed_on DATETIME NULL)"
            " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
CREW_LOAD = ("INSERT INTO crew_list (id, name, `rank`, signed_on) SELECT seq,"
             " CONCAT(ELT(1 + MOD(seq, 3), 'Åsa ', 'Jürgen ', 'Zoë '), seq),"
             " ELT(1 + MOD(seq, 4), 'Master', 'Bosun', 'Cook', 'AB'),"
             " IF(MOD(seq, 7) = 0, NULL, %s - INTERVAL seq HOUR) FROM seq_1_to_1500")
CREW_RULE = """
id = "crew-list"
description = "The crew list, with the rows the ship held before the rule"
direction = "BIDIRECTIONAL"
source = "{db}.crew_list"
snapshot = "on_activation"
[select]
nodes = ["{ship}"]
[conflicts]
policy = "SHORE_WINS"
"""


def crew_rows(connection: Any) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, name, `rank`, signed_on, _sync_revision FROM crew_list"
                       " ORDER BY id")
        return list(cursor.fetchall())


def phases(env: dict[str, str], rule: str, until: str, timeout: float) -> list[str]:
    """The phases `snapshot status` shows for a rule's snapshot, each once in the order seen,
    polled until it shows `until`."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not seen or seen[-1] != until:
        assert time.monotonic() < deadline, f"{rule}: phases {seen}, never {until}"
        code, printed = tidesync(env, "snapshot", "status")
        assert code == 0, printed
        shown = [item["phase"] for item in json.loads(printed) if item["rule"] == rule]
        if shown and (not seen or seen[-1] != shown[0]):
            seen.append(shown[0])
        time.sleep(0.1)
    return seen


# ----------------------------------------------------------------------------- processes


@dataclass
class Processes:
    """`tidesync` subprocesses with their output in files; all killed on the way out."""

    log_dir: Path
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def start(self, name: str, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}-{len(self.logs)}.log"
        with log.open("wb") as output:
            process = subprocess.Popen([sys.executable, "-m", "tidesync", *args], env=env,
                                       cwd=REPOSITORY, stdout=output, stderr=subprocess.STDOUT)
        self.running[name] = process
        self.logs[name] = log
        return process

    def output(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")[-4000:]

    def alive(self, name: str) -> bool:
        return self.running[name].poll() is None

    def assert_alive(self, *names: str) -> None:
        for name in names:
            assert self.alive(name), (name, self.output(name))

    def stop(self, name: str, timeout: float = 60) -> int | None:
        process = self.running.pop(name)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        return process.returncode

    def stop_all(self) -> None:
        for name in list(self.running):
            with contextlib.suppress(Exception):
                process = self.running.pop(name)
                if process.poll() is None:
                    process.kill()
                    process.wait(10)


class Writer(threading.Thread):
    """The ship's applications keep working: updates of rows both sides agree on (the same
    rows again and again, so the order of their changes decides the end values), inserts of
    new rows and deletes, one transaction each, until stopped."""

    def __init__(self, instance: Any, database: str, seed: int) -> None:
        super().__init__(daemon=True, name="ship-writes")
        self.connection = instance.connect(database=database, autocommit=True)
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.changes = 0
        self.inserted = 0
        self.deleted = 0
        self.insert_numbers: set[int] = set()
        self.failure: BaseException | None = None
        self._written = sorted(keys_where(WRITTEN))[:50]
        self._deletable = sorted(keys_where(DELETED))

    def run(self) -> None:
        try:
            with self.connection.cursor() as cursor:
                while not self.halt.is_set():
                    self._one(cursor)
                    time.sleep(0.004)
        except BaseException as error:  # reported by the test
            self.failure = error

    def _one(self, cursor: Any) -> None:
        kind = self.rng.random()
        if kind < 0.7 or not self._deletable:
            key = self.rng.choice(self._written)
            cursor.execute("UPDATE parts SET qty = %s, remarks = %s, serviced_at = %s"
                           " WHERE id = %s", (self.changes, f"Änderung {self.changes}",
                                              T0 + dt.timedelta(hours=3, seconds=self.changes),
                                              key))
        elif kind < 0.9:
            key = NEW_KEYS + self.changes
            cursor.execute("INSERT INTO parts (" + COLUMNS + ") VALUES (%s, %s, %s, %s, %s,"
                           " %s, %s)", (key, f"N-{key}", "neu an Bord ✓", "12.50", 1,
                                        T0 + dt.timedelta(hours=3), None))
            self.inserted += 1
            self.insert_numbers.add(self.changes)
        else:
            cursor.execute("DELETE FROM parts WHERE id = %s", (self._deletable.pop(),))
            self.deleted += 1
        assert cursor.rowcount == 1
        self.changes += 1

    def stop(self) -> int:
        self.halt.set()
        self.join(timeout=30)
        self.connection.close()
        assert self.failure is None, self.failure
        return self.changes


def eventually(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    wait_until(condition, timeout, what)


@contextlib.contextmanager
def dropped_after(instances: list[tuple[Any, str]]) -> Iterator[None]:
    """Drop the named databases on the way out."""
    try:
        yield
    finally:
        for instance, database in instances:
            with contextlib.suppress(Exception):
                connection = instance.connect()
                try:
                    with connection.cursor() as cursor:
                        cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
                finally:
                    connection.close()
