"""A Sakila-like schema end to end on the real parts: foreign keys (one a store ↔ staff cycle),
ENUM, SET, YEAR, TIMESTAMP … ON UPDATE, 4-byte UTF-8. The ship's tables are enabled, then the
data is loaded as a dump does (foreign key checks off, children before parents, one table per
transaction) and changed with the checks on, while the built-in capture (one topic for the
database), `tidesync ship run` and `tidesync shore work` run. The shore ends equal to the ship
without any replay, with its foreign keys in force and no event rejected."""

from __future__ import annotations

import datetime as dt
import random
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.clocks import WallClock
from tests.e2e.test_ship_to_shore import Pipeline, capturing, finish, wait_until
from tests.integration.test_ingress import ACTOR, make_config, node_service, running
from tests.integration.test_ship_client import client_env
from tests.integration.test_shore_work_crash import worker_env
from tidesync.capture.settings import CaptureConfig, CaptureSource, TopicRouting
from tidesync.config import Config, ShipConfig
from tidesync.domain.node import secret_text
from tidesync.migrations import migrate_postgres
from tidesync.ship.state import SQLiteShipState
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

STAMP = ("last_update TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP"
         " ON UPDATE CURRENT_TIMESTAMP")
TAIL = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
# Parents first, as the schema must be created; the data is loaded in the other order.
SCHEMA: dict[str, str] = {
    "country": f"CREATE TABLE country (country_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY,"
               f" country VARCHAR(50) NOT NULL, {STAMP}){TAIL}",
    "city": f"CREATE TABLE city (city_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY,"
            f" city VARCHAR(50) NOT NULL, country_id SMALLINT UNSIGNED NOT NULL, {STAMP},"
            f" CONSTRAINT fk_city_country FOREIGN KEY (country_id)"
            f" REFERENCES country (country_id)){TAIL}",
    "address": f"CREATE TABLE address (address_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY,"
               f" address VARCHAR(50) NOT NULL, city_id SMALLINT UNSIGNED NOT NULL,"
               f" phone VARCHAR(20) NOT NULL, {STAMP}, CONSTRAINT fk_address_city"
               f" FOREIGN KEY (city_id) REFERENCES city (city_id)){TAIL}",
    "language": f"CREATE TABLE language (language_id TINYINT UNSIGNED NOT NULL PRIMARY KEY,"
                f" name CHAR(20) NOT NULL, {STAMP}){TAIL}",
    "film": f"CREATE TABLE film (film_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY,"
            f" title VARCHAR(128) NOT NULL, release_year YEAR DEFAULT NULL,"
            f" language_id TINYINT UNSIGNED NOT NULL, rental_rate DECIMAL(4,2) NOT NULL,"
            f" rating ENUM('G','PG','PG-13','R','NC-17') DEFAULT 'G',"
            f" special_features SET('Trailers','Commentaries','Deleted Scenes',"
            f"'Behind the Scenes') DEFAULT NULL, {STAMP}, CONSTRAINT fk_film_language"
            f" FOREIGN KEY (language_id) REFERENCES language (language_id)){TAIL}",
    "actor": f"CREATE TABLE actor (actor_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY,"
             f" first_name VARCHAR(45) NOT NULL, last_name VARCHAR(45) NOT NULL, {STAMP}){TAIL}",
    "film_actor": f"CREATE TABLE film_actor (actor_id SMALLINT UNSIGNED NOT NULL,"
                  f" film_id SMALLINT UNSIGNED NOT NULL, {STAMP},"
                  f" PRIMARY KEY (actor_id, film_id), CONSTRAINT fk_film_actor_actor"
                  f" FOREIGN KEY (actor_id) REFERENCES actor (actor_id),"
                  f" CONSTRAINT fk_film_actor_film FOREIGN KEY (film_id)"
                  f" REFERENCES film (film_id)){TAIL}",
    "staff": f"CREATE TABLE staff (staff_id TINYINT UNSIGNED NOT NULL PRIMARY KEY,"
             f" first_name VARCHAR(45) NOT NULL, address_id SMALLINT UNSIGNED NOT NULL,"
             f" store_id TINYINT UNSIGNED NOT NULL, active BOOLEAN NOT NULL DEFAULT TRUE,"
             f" {STAMP}, CONSTRAINT fk_staff_address FOREIGN KEY (address_id)"
             f" REFERENCES address (address_id)){TAIL}",
    "store": f"CREATE TABLE store (store_id TINYINT UNSIGNED NOT NULL PRIMARY KEY,"
             f" manager_staff_id TINYINT UNSIGNED NOT NULL UNIQUE,"
             f" address_id SMALLINT UNSIGNED NOT NULL, {STAMP}, CONSTRAINT fk_store_staff"
             f" FOREIGN KEY (manager_staff_id) REFERENCES staff (staff_id),"
             f" CONSTRAINT fk_store_address FOREIGN KEY (address_id)"
             f" REFERENCES address (address_id)){TAIL}",
    "customer": f"CREATE TABLE customer (customer_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY,"
                f" store_id TINYINT UNSIGNED NOT NULL, first_name VARCHAR(45) NOT NULL,"
                f" email VARCHAR(50) DEFAULT NULL, address_id SMALLINT UNSIGNED NOT NULL,"
                f" active BOOLEAN NOT NULL DEFAULT TRUE, create_date DATETIME NOT NULL,"
                f" last_update TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP"
                f" ON UPDATE CURRENT_TIMESTAMP, CONSTRAINT fk_customer_store"
                f" FOREIGN KEY (store_id) REFERENCES store (store_id),"
                f" CONSTRAINT fk_customer_address FOREIGN KEY (address_id)"
                f" REFERENCES address (address_id)){TAIL}",
    "inventory": f"CREATE TABLE inventory (inventory_id MEDIUMINT UNSIGNED NOT NULL PRIMARY KEY,"
                 f" film_id SMALLINT UNSIGNED NOT NULL, store_id TINYINT UNSIGNED NOT NULL,"
                 f" {STAMP}, CONSTRAINT fk_inventory_film FOREIGN KEY (film_id)"
                 f" REFERENCES film (film_id), CONSTRAINT fk_inventory_store"
                 f" FOREIGN KEY (store_id) REFERENCES store (store_id)){TAIL}",
    "rental": f"CREATE TABLE rental (rental_id INT NOT NULL PRIMARY KEY,"
              f" rental_date DATETIME NOT NULL, inventory_id MEDIUMINT UNSIGNED NOT NULL,"
              f" customer_id SMALLINT UNSIGNED NOT NULL, return_date DATETIME DEFAULT NULL,"
              f" staff_id TINYINT UNSIGNED NOT NULL, {STAMP},"
              f" CONSTRAINT fk_rental_inventory FOREIGN KEY (inventory_id)"
              f" REFERENCES inventory (inventory_id), CONSTRAINT fk_rental_customer"
              f" FOREIGN KEY (customer_id) REFERENCES customer (customer_id),"
              f" CONSTRAINT fk_rental_staff FOREIGN KEY (staff_id)"
              f" REFERENCES staff (staff_id)){TAIL}",
    "payment": f"CREATE TABLE payment (payment_id SMALLINT UNSIGNED NOT NULL PRIMARY KEY,"
               f" customer_id SMALLINT UNSIGNED NOT NULL, staff_id TINYINT UNSIGNED NOT NULL,"
               f" rental_id INT DEFAULT NULL, amount DECIMAL(5,2) NOT NULL,"
               f" payment_date DATETIME NOT NULL, {STAMP}, CONSTRAINT fk_payment_customer"
               f" FOREIGN KEY (customer_id) REFERENCES customer (customer_id),"
               f" CONSTRAINT fk_payment_staff FOREIGN KEY (staff_id) REFERENCES staff (staff_id),"
               f" CONSTRAINT fk_payment_rental FOREIGN KEY (rental_id)"
               f" REFERENCES rental (rental_id)){TAIL}",
}
# The cycle: staff → store, added once store exists.
CYCLE = ("ALTER TABLE staff ADD CONSTRAINT fk_staff_store FOREIGN KEY (store_id)"
         " REFERENCES store (store_id)")
FOREIGN_KEYS = 19
T0 = dt.datetime(2005, 5, 24, 22, 53, 30)
NAMES = ("PENELOPE", "NICK", "ÉDITH", "JOSÉ", "ZOË", "MARÍA", "武", "🎬 STAR", "GRACE", "ED")


def sakila_rows(rng: random.Random) -> dict[str, list[tuple[Any, ...]]]:
    """A few thousand rows of every table; the foreign keys all hold once everything is in."""
    rows: dict[str, list[tuple[Any, ...]]] = {
        "country": [(i, f"Country {i}") for i in range(1, 21)],
        "city": [(i, f"City {i}", rng.randint(1, 20)) for i in range(1, 61)],
        "address": [(i, f"{i} {rng.choice(NAMES)} Street", rng.randint(1, 60),
                     f"+{rng.randrange(10**9)}") for i in range(1, 151)],
        "language": [(1, "English"), (2, "Italian"), (3, "Japanese")],
        "film": [(i, f"{rng.choice(NAMES)} {i}", rng.choice((None, 2006, 1999, 2155)),
                  rng.randint(1, 3), Decimal(rng.choice(("0.99", "2.99", "4.99"))),
                  rng.choice(("G", "PG", "PG-13", "R", "NC-17")),
                  rng.choice(("", "Trailers", "Trailers,Deleted Scenes",
                              "Commentaries,Behind the Scenes", None)))
                 for i in range(1, 201)],
        "actor": [(i, rng.choice(NAMES), f"{rng.choice(NAMES)}-{i}") for i in range(1, 101)],
        "staff": [(1, "Mike", 3, 1, True), (2, "Jon", 4, 2, True)],
        "store": [(1, 1, 1), (2, 2, 2)],
        "customer": [(i, rng.randint(1, 2), rng.choice(NAMES), f"c{i}@example.org",
                      rng.randint(5, 150), rng.random() < 0.9, T0 - dt.timedelta(days=i))
                     for i in range(1, 201)],
        "inventory": [(i, rng.randint(1, 200), rng.randint(1, 2)) for i in range(1, 601)],
    }
    rows["film_actor"] = sorted({(rng.randint(1, 100), rng.randint(1, 200))
                                 for _ in range(600)})
    rows["rental"] = [(i, T0 + dt.timedelta(hours=i), rng.randint(1, 600), rng.randint(1, 200),
                       None if i % 7 == 0 else T0 + dt.timedelta(hours=i, days=3),
                       rng.randint(1, 2)) for i in range(1, 801)]
    rows["payment"] = [(i, rental[3], rental[5], rental[0],
                        Decimal(rng.randrange(0, 1200)) / 100, rental[1])
                       for i, rental in enumerate(rows["rental"], start=1)]
    return rows


COLUMNS: dict[str, str] = {
    "country": "country_id, country", "city": "city_id, city, country_id",
    "address": "address_id, address, city_id, phone", "language": "language_id, name",
    "film": "film_id, title, release_year, language_id, rental_rate, rating, special_features",
    "actor": "actor_id, first_name, last_name", "film_actor": "actor_id, film_id",
    "staff": "staff_id, first_name, address_id, store_id, active",
    "store": "store_id, manager_staff_id, address_id",
    "customer": "customer_id, store_id, first_name, email, address_id, active, create_date",
    "inventory": "inventory_id, film_id, store_id",
    "rental": "rental_id, rental_date, inventory_id, customer_id, return_date, staff_id",
    "payment": "payment_id, customer_id, staff_id, rental_id, amount, payment_date",
}


def insert(cursor: Any, table: str, rows: list[tuple[Any, ...]]) -> None:
    for start in range(0, len(rows), 200):
        part = rows[start:start + 200]
        marks = "(" + ", ".join(["%s"] * len(part[0])) + ")"
        cursor.execute(f"INSERT INTO {table} ({COLUMNS[table]}) VALUES "
                       + ", ".join([marks] * len(part)), [v for row in part for v in row])


def load_like_a_dump(conn: Any, rows: dict[str, list[tuple[Any, ...]]]) -> int:
    """As sakila-data.sql: foreign key checks off, tables in name order (children before
    parents, store after staff), one transaction per table. Returns the rows inserted."""
    with conn.cursor() as cursor:
        cursor.execute("SET SESSION foreign_key_checks = 0")
        for table in sorted(rows):
            conn.begin()
            insert(cursor, table, rows[table])
            conn.commit()
        cursor.execute("SET SESSION foreign_key_checks = 1")
    return sum(len(table_rows) for table_rows in rows.values())


def business_as_usual(conn: Any, rng: random.Random) -> int:
    """Transactions with the checks on, each in an order the foreign keys allow: new
    customers with rentals and payments, edits (TIMESTAMP … ON UPDATE moves), returns of a
    rental with its payment deleted first. Returns the row changes made."""
    changes = 0
    with conn.cursor() as cursor:
        for n in range(40):
            customer, rental, payment = 1000 + n, 5000 + n, 3000 + n
            conn.begin()
            cursor.execute("INSERT INTO address (address_id, address, city_id, phone)"
                           " VALUES (%s, %s, %s, '0')", (1000 + n, f"{n} Quay", n % 60 + 1))
            cursor.execute("INSERT INTO customer (customer_id, store_id, first_name, email,"
                           " address_id, active, create_date) VALUES (%s, 1, %s, NULL, %s,"
                           " TRUE, %s)", (customer, rng.choice(NAMES), 1000 + n, T0))
            cursor.execute("INSERT INTO rental (rental_id, rental_date, inventory_id,"
                           " customer_id, staff_id) VALUES (%s, %s, %s, %s, 2)",
                           (rental, T0 + dt.timedelta(days=n), rng.randint(1, 600), customer))
            cursor.execute("INSERT INTO payment (payment_id, customer_id, staff_id, rental_id,"
                           " amount, payment_date) VALUES (%s, %s, 2, %s, 3.99, %s)",
                           (payment, customer, rental, T0))
            conn.commit()
            changes += 4
        conn.begin()
        cursor.execute("UPDATE film SET rental_rate = rental_rate + 1,"
                       " special_features = 'Trailers' WHERE film_id <= 30")
        cursor.execute("UPDATE customer SET active = NOT active WHERE customer_id <= 20")
        conn.commit()
        changes += 30 + 20
        for rental in range(1, 31):
            conn.begin()
            cursor.execute("DELETE FROM payment WHERE rental_id = %s", (rental,))
            cursor.execute("DELETE FROM rental WHERE rental_id = %s", (rental,))
            conn.commit()
            changes += 2
        # The cycle again, with the checks on: a new store and its manager.
        conn.begin()
        cursor.execute("SET SESSION foreign_key_checks = 0")
        cursor.execute("INSERT INTO store (store_id, manager_staff_id, address_id)"
                       " VALUES (3, 3, 7)")
        cursor.execute("INSERT INTO staff (staff_id, first_name, address_id, store_id)"
                       " VALUES (3, 'Ann', 8, 3)")
        cursor.execute("SET SESSION foreign_key_checks = 1")
        conn.commit()
        changes += 2
    return changes


@contextmanager
def sakila_pipeline(pg_database: Any, ship_mariadb: Any, shore_mariadb: Any, kafka_broker: Any,
                    make_mariadb_database: Callable[[Any], str], tmp_path: Path,
                    routing: TopicRouting) -> Iterator[Pipeline]:
    """The schema on ship and shore, enabled on both; capture with one topic per database (or
    per table in three partitions, where a child can overtake its parent)."""
    database = make_mariadb_database(ship_mariadb)
    ship_node = f"e2e-fk-{secrets.token_hex(4)}"
    ship_conn = ship_mariadb.connect(database=database, autocommit=True)
    shore_mariadb.create_database(database)
    shore_conn = shore_mariadb.connect(database=database, autocommit=True)
    state: Pipeline | None = None
    try:
        for conn, node in ((ship_conn, ship_node), (shore_conn, "shore")):
            with conn.cursor() as cursor:
                for ddl in SCHEMA.values():
                    cursor.execute(ddl)
                cursor.execute(CYCLE)
            for table in SCHEMA:
                enable_mysql_table(conn, database, table, node)
        with shore_conn.cursor() as cursor:
            cursor.execute(RETURN_DATE_DEFAULT)  # the shore office's own business rule
        migrate_postgres(pg_database.dsn)
        config = make_config(pg_database)
        clock = WallClock()
        with node_service(config) as service:
            issued = service.register(ship_node, ACTOR, clock())
        logical = f"e2e{secrets.token_hex(4)}"
        capture_config = Config(capture=CaptureConfig(
            source=CaptureSource.MYSQL, logical_name=logical,
            kafka_bootstrap_servers=kafka_broker.bootstrap_servers,
            topic_routing=routing, topic_partitions=3,
            position_path=str(tmp_path / "capture-position.sqlite"), batch_max_records=500,
            flush_interval_ms=100, mysql_host=ship_mariadb.host, mysql_port=ship_mariadb.port,
            mysql_user=ship_mariadb.user, mysql_password=ship_mariadb.password,
            server_id=9000 + secrets.randbelow(900), databases=(database,)))
        with running(config, clock) as url:  # type: ignore[arg-type]
            ship = ShipConfig(
                node_id=ship_node, shore_url=url, secret=secret_text(issued.secret),
                state_path=str(tmp_path / "ship-state.sqlite"),
                kafka_bootstrap_servers=kafka_broker.bootstrap_servers,
                topic_pattern=rf"^sync\.cdc\.{logical}\.",
                source_connector_id=f"{logical}-builtin",
                bidirectional_tables=tuple(f"{database}.{t}" for t in SCHEMA),
                receipts_interval_seconds=1, heartbeat_interval_seconds=5)
            state = Pipeline(database, ship_conn, shore_conn, capture_config, ship,
                             client_env(ship),
                             worker_env(pg_database, shore_mariadb,
                                        TIDESYNC_SHORE__APPLY_MAX_EVENTS_PER_JOB="500",
                                        TIDESYNC_SHORE__APPLY_CHUNK_SIZE="250"),
                             tmp_path)
            try:
                yield state
            finally:
                state.stop_all()
    finally:
        ship_conn.close()
        shore_conn.close()
        drop = shore_mariadb.connect()
        try:
            with drop.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
        finally:
            drop.close()


RETURN_DATE_DEFAULT = (
    "CREATE TRIGGER rental_return_default BEFORE INSERT ON rental FOR EACH ROW"
    " SET NEW.return_date = COALESCE(NEW.return_date, NEW.rental_date + INTERVAL 7 DAY)")
"""A business trigger on the shore only: it fills a rental's missing return date, so the rows
it touches differ from the ship's, and each such apply must say so (TRIGGER_MODIFIED)."""
RETURN_DATE = 4  # the column's place in a rental row


def with_default_return(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rentals as the shore's trigger leaves them."""
    return [(*row[:RETURN_DATE], row[1] + dt.timedelta(days=7), *row[RETURN_DATE + 1:])
            if row[RETURN_DATE] is None else row for row in rows]


def table_rows(conn: Any, table: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        key = "actor_id, film_id" if table == "film_actor" else f"{table}_id"
        cursor.execute(f"SELECT *, _sync_revision FROM {table} ORDER BY {key}")
        return list(cursor.fetchall())


def applied_count(state: Pipeline) -> int:
    with state.shore_conn.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM `{state.ship_database}`.`_sync_applied`")
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("routing", [TopicRouting.DATABASE, TopicRouting.TABLE])
def test_a_sakila_like_schema_loaded_while_sync_runs_arrives_whole(
        pg_database, ship_mariadb, shore_mariadb, kafka_broker, make_mariadb_database,
        tmp_path, routing):
    """One topic for the database applies in commit order; with a topic per table, children
    that overtake their parents wait for them (FK_WAITING) and apply after."""
    rng = random.Random(20261201)
    with sakila_pipeline(pg_database, ship_mariadb, shore_mariadb, kafka_broker,
                         make_mariadb_database, tmp_path, routing) as state:
        with capturing(state.capture_config, state.ship_conn):
            client = state.start_client()
            worker = state.start_worker("w-fk")
            rows = sakila_rows(rng)
            # Rentals inserted without a return date: the shore's trigger fills each one.
            filled = sum(1 for row in rows["rental"] if row[RETURN_DATE] is None) + 40
            changes = load_like_a_dump(state.ship_conn, rows)
            changes += business_as_usual(state.ship_conn, rng)
            wait_until(lambda: applied_count(state) >= changes, 240,
                       "every change applied on the shore")
        for process in (client, worker):
            state.assert_running(process)
            assert state.stop(process) == 0, state.output(process)
        finish(state)

        for table in SCHEMA:
            ship_rows = table_rows(state.ship_conn, table)
            assert ship_rows, table
            expected = with_default_return(ship_rows) if table == "rental" else ship_rows
            assert table_rows(state.shore_conn, table) == expected, table
        assert applied_count(state) == changes
        with psycopg.connect(pg_database.dsn) as pg:
            results = pg.execute(
                "SELECT state, result, count(*) FROM inbox_event WHERE origin_node_id = %s"
                " GROUP BY 1, 2", (state.ship_config.node_id,)).fetchall()
            reported = pg.execute(
                "SELECT reason_code, count(*) FROM inbox_event WHERE origin_node_id = %s"
                " AND reason_code LIKE 'TRIGGER_MODIFIED%%' GROUP BY 1",
                (state.ship_config.node_id,)).fetchall()
        assert results == [("TERMINAL", "APPLIED", changes)]  # nothing rejected, no replay
        # Every row the trigger changed is reported, naming the column, never silently.
        assert reported == [("TRIGGER_MODIFIED:return_date", filled)]
        with state.shore_conn.cursor() as cursor:
            cursor.execute("SELECT @@GLOBAL.foreign_key_checks")
            assert cursor.fetchone()[0] == 1
            cursor.execute("SELECT count(*) FROM information_schema.REFERENTIAL_CONSTRAINTS"
                           " WHERE CONSTRAINT_SCHEMA = %s", (state.ship_database,))
            assert cursor.fetchone()[0] == FOREIGN_KEYS
        ship = state.ship_config
        store = SQLiteShipState(ship.state_path, ship.node_id, ship.group_id, read_only=True)
        try:
            assert store.state_counts() == {"TERMINAL": changes}
        finally:
            store.close()
