"""The deployment guide (docs/deploy-mysql.md) followed on the test services with its own
example files, `examples/deploy/ship.toml` and `examples/deploy/shore.toml`, unchanged: only
hosts, ports, paths, accounts and secrets are given through `TIDESYNC_<SECTION>__<FIELD>`
variables, as the guide does. One broker serves both sides (the topic defaults keep them
apart), TLS with client certificates, the ship's `target enable` on `[ship_target]`; a row
goes up, another comes down, and a nearly idle ship is never rate limited by the shore.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from tests.tls_certs import ThrowawayCA
from tidesync.localservices import free_port

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLES = REPOSITORY / "examples" / "deploy"
SHIP_TOML = EXAMPLES / "ship.toml"
SHORE_TOML = EXAMPLES / "shore.toml"
NODE = "ship-0042"  # as the example files name it
DATABASE = "fleet"
SCHEMA = (
    "CREATE TABLE cargo (id INT NOT NULL PRIMARY KEY, item VARCHAR(40) NOT NULL,"
    " qty INT NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE crew (id INT NOT NULL PRIMARY KEY, name VARCHAR(60) NOT NULL,"
    " rank_title VARCHAR(30) NULL) ENGINE=InnoDB",
)


def _base_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("TIDESYNC_")}


def shore_env(pg: Any, shore_db: Any, broker: str, port: int, tls: dict[str, str],
              folder: Path) -> dict[str, str]:
    return {
        **_base_env(),
        "TIDESYNC_SHORE__MASTER_KEY": base64.b64encode(os.urandom(32)).decode(),
        "TIDESYNC_SHORE__LISTEN_HOST": "127.0.0.1",
        "TIDESYNC_SHORE__LISTEN_PORT": str(port),
        "TIDESYNC_SHORE__TLS_CERT_FILE": tls["shore_cert"],
        "TIDESYNC_SHORE__TLS_KEY_FILE": tls["shore_key"],
        "TIDESYNC_SHORE__TLS_CLIENT_CA_FILE": tls["fleet_ca"],
        "TIDESYNC_EVENT_STORE__POSTGRES_HOST": pg.host,
        "TIDESYNC_EVENT_STORE__POSTGRES_PORT": str(pg.port),
        "TIDESYNC_EVENT_STORE__POSTGRES_DBNAME": pg.dbname,
        "TIDESYNC_EVENT_STORE__POSTGRES_USER": pg.user,
        "TIDESYNC_EVENT_STORE__POSTGRES_PASSWORD": pg.password or "",
        "TIDESYNC_TARGET__HOST": shore_db.host,
        "TIDESYNC_TARGET__PORT": str(shore_db.port),
        "TIDESYNC_TARGET__USER": shore_db.user,
        "TIDESYNC_TARGET__PASSWORD": shore_db.password or "",
        "TIDESYNC_DOWNLINK__KAFKA_BOOTSTRAP_SERVERS": broker,
        "TIDESYNC_SHORE_CAPTURE__MYSQL_HOST": shore_db.host,
        "TIDESYNC_SHORE_CAPTURE__MYSQL_PORT": str(shore_db.port),
        "TIDESYNC_SHORE_CAPTURE__MYSQL_USER": shore_db.user,
        "TIDESYNC_SHORE_CAPTURE__MYSQL_PASSWORD": shore_db.password or "",
        "TIDESYNC_SHORE_CAPTURE__POSITION_PATH": str(folder / "shore-capture.sqlite"),
    }


def ship_env(ship_db: Any, broker: str, port: int, tls: dict[str, str],
             folder: Path) -> dict[str, str]:
    return {
        **_base_env(),
        "TIDESYNC_SHIP__SHORE_URL": f"https://127.0.0.1:{port}",
        "TIDESYNC_SHIP__TLS_CA_FILE": tls["fleet_ca"],
        "TIDESYNC_SHIP__TLS_CLIENT_CERT_FILE": tls["ship_cert"],
        "TIDESYNC_SHIP__TLS_CLIENT_KEY_FILE": tls["ship_key"],
        "TIDESYNC_SHIP__STATE_PATH": str(folder / "ship-state.sqlite"),
        "TIDESYNC_SHIP__KAFKA_BOOTSTRAP_SERVERS": broker,
        "TIDESYNC_SHIP_TARGET__HOST": ship_db.host,
        "TIDESYNC_SHIP_TARGET__PORT": str(ship_db.port),
        "TIDESYNC_SHIP_TARGET__USER": ship_db.user,
        "TIDESYNC_SHIP_TARGET__PASSWORD": ship_db.password or "",
        "TIDESYNC_CAPTURE__MYSQL_HOST": ship_db.host,
        "TIDESYNC_CAPTURE__MYSQL_PORT": str(ship_db.port),
        "TIDESYNC_CAPTURE__MYSQL_USER": ship_db.user,
        "TIDESYNC_CAPTURE__MYSQL_PASSWORD": ship_db.password or "",
        "TIDESYNC_CAPTURE__POSITION_PATH": str(folder / "ship-capture.sqlite"),
    }


class Services:
    """The long-running tidesync processes, each logging to its own file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, config: Path, env: dict[str, str], *args: str) -> None:
        with (self.folder / f"{name}.log").open("wb") as log:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "tidesync", "--config", str(config), *args], env=env,
                cwd=self.folder, stdout=log, stderr=subprocess.STDOUT)

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{self.log(name)[:1500]}\n…\n{self.log(name)[-1500:]}"
                         for name in self.processes)

    def assert_running(self) -> None:
        for name, process in self.processes.items():
            assert process.poll() is None, (name, self.log(name)[-3000:])

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def cli(config: Path, env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tidesync", "--config", str(config), *args],
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout + done.stderr


def eventually(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def query(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


@contextmanager
def fleet_databases(*servers: Any) -> Iterator[list[Any]]:
    conns = []
    try:
        for server in servers:
            conn = server.connect(autocommit=True)
            conns.append(conn)
            query(conn, f"DROP DATABASE IF EXISTS `{DATABASE}`")
            query(conn, f"CREATE DATABASE `{DATABASE}`")
            query(conn, f"USE `{DATABASE}`")
            for ddl in SCHEMA:
                query(conn, ddl)
        yield conns
    finally:
        for conn in conns:
            with suppress(Exception):
                query(conn, f"DROP DATABASE IF EXISTS `{DATABASE}`")
            conn.close()


def certificates(folder: Path) -> dict[str, str]:
    """The fleet's private CA (pinned by the ship, trusted for client certificates by the
    shore), the shore's server certificate and the ship's client certificate."""
    fleet_ca = ThrowawayCA(folder, "fleet")
    server, client = fleet_ca.server(), fleet_ca.client(NODE)
    return {"fleet_ca": fleet_ca.cert_file, "shore_cert": server.cert_file,
            "shore_key": server.key_file, "ship_cert": client.cert_file,
            "ship_key": client.key_file}


def test_the_guide_s_example_files_run_a_ship_and_a_shore_both_ways(
        pg_database, ship_mariadb, shore_mariadb, kafka_broker, tmp_path):
    assert SHIP_TOML.is_file() and SHORE_TOML.is_file()
    port = free_port()
    broker = kafka_broker.bootstrap_servers
    tls = certificates(tmp_path)
    shore = shore_env(pg_database, shore_mariadb, broker, port, tls, tmp_path)
    ship = ship_env(ship_mariadb, broker, port, tls, tmp_path)
    services = Services(tmp_path)
    with fleet_databases(ship_mariadb, shore_mariadb) as (ship_db, shore_db):
        try:
            run_the_guide(services, ship, shore, tmp_path, ship_db, shore_db)
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{services.logs()}") from failure
        finally:
            services.stop_all()


def run_the_guide(services: Services, ship: dict[str, str], shore: dict[str, str],
                  tmp_path: Path, ship_db: Any, shore_db: Any) -> None:
    if True:
        if True:
            # The guide's order: the shore first, then register the ship, enable the tables.
            services.start("shore-serve", SHORE_TOML, shore, "shore", "serve")
            registered = cli(SHORE_TOML, shore, tmp_path, "nodes", "register", NODE)
            found = re.search(r"^secret: (\S+)$", registered, re.MULTILINE)
            assert found, registered
            ship["TIDESYNC_SHIP__SECRET"] = found[1]
            for table in ("cargo", "crew"):
                enabled = cli(SHORE_TOML, shore, tmp_path, "target", "enable",
                              f"{DATABASE}.{table}")
                assert "enabled" in enabled, enabled
                # On the ship the same command prepares [ship_target] with the ship's id.
                enabled = cli(SHIP_TOML, ship, tmp_path, "target", "enable",
                              f"{DATABASE}.{table}")
                assert "enabled" in enabled, enabled
            status = cli(SHIP_TOML, ship, tmp_path, "target", "status", f"{DATABASE}.cargo")
            assert NODE in status, status

            services.start("shore-capture", SHORE_TOML, shore, "shore", "capture")
            services.start("ship-capture", SHIP_TOML, ship, "ship", "capture")
            for config, env, group in ((SHORE_TOML, shore, "shore"),
                                       (SHIP_TOML, ship, "ship")):
                eventually(lambda c=config, e=env, g=group: "resumes after" in cli(
                    c, e, tmp_path, g, "capture", "status"), f"the {group} capture to start")
            services.start("shore-work", SHORE_TOML, shore, "shore", "work")
            services.start("ship-run", SHIP_TOML, ship, "ship", "run")

            # Up: a ship row reaches the shore with its revision and the ship as origin.
            query(ship_db, "INSERT INTO cargo (id, item, qty) VALUES (1, 'rope', 12)")
            row = "SELECT id, item, qty, _sync_revision, _sync_origin FROM cargo WHERE id = 1"
            eventually(lambda: query(shore_db, row) == query(ship_db, row), "the ship's row"
                       " on the shore")
            assert query(shore_db, row)[0][4] == NODE

            # Down: a shore row reaches the ship, and does not come back up as the ship's.
            query(shore_db, "INSERT INTO crew (id, name, rank_title) VALUES (7, 'Ana', 'Bosun')")
            query(shore_db, "UPDATE cargo SET qty = 15 WHERE id = 1")
            crew = "SELECT id, name, rank_title, _sync_revision, _sync_origin FROM crew"
            eventually(lambda: query(ship_db, crew) == query(shore_db, crew)
                       and query(ship_db, row) == query(shore_db, row), "the shore's rows on"
                       " the ship")
            assert query(ship_db, crew)[0][4] == "shore"

            # Nearly idle: single-row writes a few times a second stay within the shore's
            # default per-node request rate.
            for key in range(100, 140):
                query(ship_db, "INSERT INTO cargo (id, item, qty) VALUES (%s, 'crate', 1)",
                      (key,))
                time.sleep(0.15)
            count = "SELECT count(*) FROM cargo"
            eventually(lambda: query(shore_db, count) == query(ship_db, count),
                       "the single-row writes on the shore")
            services.assert_running()
            ship_log = services.log("ship-run")
            assert "RATE_LIMITED" not in ship_log, ship_log[-3000:]
            assert "shore capture's topics" not in ship_log, ship_log[-3000:]
            assert "also matches" not in services.log("shore-work")
            secret_shown = [name for name in services.processes
                            if found[1] in services.log(name)]
            assert secret_shown == []


def test_examples_hold_no_secrets():
    """The example files leave every secret to the environment."""
    for path in (SHIP_TOML, SHORE_TOML):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(password|secret|master_key|mysql_password|"
                             r"postgres_password)\s*=", text, re.MULTILINE), path
