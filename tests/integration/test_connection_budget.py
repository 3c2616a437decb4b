"""PostgreSQL connections per process, on a real server: idle `shore work` and `shore serve`
hold few connections, each named by its process in pg_stat_activity and within the budget the
process states when it starts; a command that cannot get a connection ("too many
connections", here through a role's CONNECTION LIMIT) tries again, then says so in one line
and exits non-zero, never with a traceback."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.integration.test_ship_client import wait_until
from tidesync.bootstrap.event_store import serve_budget, work_budget
from tidesync.config import Config, EventStoreConfig, EventStoreKind, ShoreConfig
from tidesync.entrypoints.cli import STORE_UNAVAILABLE
from tidesync.localservices import PostgresDatabase

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]
MASTER_KEY = "hTCzhS5D5UZ6EYxdG2CnG6E8fNwD5r2x5xQkVqGQ5Y0="


def process_env(database: PostgresDatabase, tmp_path: Path, user: str | None = None,
                port: int = 0) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TIDESYNC_")}
    env.update({
        "TIDESYNC_EVENT_STORE__KIND": "postgres",
        "TIDESYNC_EVENT_STORE__POSTGRES_HOST": database.host,
        "TIDESYNC_EVENT_STORE__POSTGRES_PORT": str(database.port),
        "TIDESYNC_EVENT_STORE__POSTGRES_DBNAME": database.dbname,
        "TIDESYNC_EVENT_STORE__POSTGRES_USER": user or database.user,
        "TIDESYNC_EVENT_STORE__POSTGRES_PASSWORD": "" if user else database.password,
        "TIDESYNC_TARGET__SQLITE_PATH": str(tmp_path / "shore.sqlite"),
        "TIDESYNC_SHORE__MASTER_KEY": MASTER_KEY,
        "TIDESYNC_SHORE__LISTEN_PORT": str(port),
    })
    return env


def config_of(database: PostgresDatabase) -> Config:
    """The configuration the processes above load (the defaults, on this database)."""
    return Config(shore=ShoreConfig(master_key=MASTER_KEY), event_store=EventStoreConfig(
        kind=EventStoreKind.POSTGRES, postgres_host=database.host,
        postgres_port=database.port, postgres_dbname=database.dbname,
        postgres_user=database.user, postgres_password=database.password))


def connections(database: PostgresDatabase, process: str) -> int:
    with database.connect(autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                           " AND application_name LIKE %s",
                           (database.dbname, f"tidesync {process}/%")).fetchone()
    return int(row[0])


@contextmanager
def running(env: dict[str, str], *command: str, ready: str) -> Iterator[list[str]]:
    """The command running until it printed `ready`; yields its log lines so far."""
    process = subprocess.Popen([sys.executable, "-m", "tidesync", *command], env=env,
                               cwd=REPOSITORY, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if ready in line:
                break
        else:
            pytest.fail("".join(lines)[-3000:])
        reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()),
                                  daemon=True)
        reader.start()
        yield lines
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture
def database() -> Iterator[PostgresDatabase]:
    created = PostgresDatabase().create()
    yield created
    created.drop()


@pytest.mark.parametrize(("command", "ready", "budget"), [
    (("shore", "work"), "shore worker", work_budget),
    (("shore", "serve", "--duration", "120"), "listening on", serve_budget),
])
def test_an_idle_shore_process_holds_few_named_connections(database, tmp_path, command,
                                                            ready, budget):
    stated = budget(config_of(database))
    process = "-".join(command[:2])
    with running(process_env(database, tmp_path), *command, ready=ready) as lines:
        wait_until(lambda: connections(database, process) > 0)
        held = connections(database, process)
        log = "".join(lines)
    assert stated.describe() in log  # the budget is stated when the process starts
    # Before, the library's pool per application made that 16 to 24; each pool keeps one
    # connection idle (one more made while starting closes after a minute unused).
    assert held <= stated.total
    assert held <= 2 * stated.idle


@contextmanager
def limited_role(database: PostgresDatabase, limit: int) -> Iterator[str]:
    """A login role owning the database, allowed `limit` connections (superusers have no
    such limit: the server's own max_connections is left alone)."""
    role = f"tidesync_limited_{secrets.token_hex(4)}"
    with psycopg.connect(database.admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT {}").format(
            sql.Identifier(role), sql.Literal(limit)))
        admin.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
            sql.Identifier(database.dbname), sql.Identifier(role)))
    try:
        yield role
    finally:
        with database.connect(autocommit=True) as owner:  # what the role made is dropped
            owner.execute(sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(
                sql.Identifier(role)))
        with psycopg.connect(database.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@contextmanager
def holding(database: PostgresDatabase, role: str, count: int) -> Iterator[list[Any]]:
    held = [psycopg.connect(database.dsn, user=role, password="") for _ in range(count)]
    try:
        yield held
    finally:
        for conn in held:
            conn.close()


def jobs_list(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidesync", "jobs", "list"], env=env,
                          cwd=REPOSITORY, capture_output=True, text=True, timeout=120)


def test_a_command_without_a_free_connection_says_so_in_one_line(database, tmp_path):
    with limited_role(database, 2) as role, holding(database, role, 2):
        done = jobs_list(process_env(database, tmp_path, user=role))
    assert done.returncode == STORE_UNAVAILABLE
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == ("tidesync: the event store's PostgreSQL is unavailable (too many"
                    f' connections for role "{role}"); try again later')


def test_a_command_tries_again_until_a_connection_is_free(database, tmp_path):
    with limited_role(database, 2) as role, holding(database, role, 2) as held:
        # Freed a while after the command starts, likely between its attempts.
        release = threading.Timer(2.5, lambda: [conn.close() for conn in held])
        release.start()
        done = jobs_list(process_env(database, tmp_path, user=role))
        release.join()
    assert (done.returncode, done.stdout.strip()) == (0, "every received event is applied")
    assert "Traceback" not in done.stderr
