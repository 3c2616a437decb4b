"""Session-wide real services for the tests: PostgreSQL, MariaDB servers, a Kafka-API broker.

Each starts only when a test asks for it and stops at the end of the session (see service_policy).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Generator, Iterator
from typing import TypeVar

import pytest

from tests.service_policy import SERVICE_MARKER, give_up, running_in_ci
from tidesync.localservices import (
    MariaDBInstance,
    PostgresDatabase,
    ServiceUnavailable,
    TansuBroker,
)

SHIP_SERVER_ID = 101
SECOND_SHIP_SERVER_ID = 102
SHORE_SERVER_ID = 201
SERVICE_FIXTURES = frozenset({"pg_database", "ship_mariadb", "second_ship_mariadb",
                              "shore_mariadb", "kafka_broker"})

T = TypeVar("T")


def _started(start: Callable[[], T]) -> T:
    try:
        return start()
    except ServiceUnavailable as unavailable:
        give_up(str(unavailable))


@pytest.fixture(scope="session")
def pg_database() -> Iterator[PostgresDatabase]:
    """A fresh PostgreSQL database (`tidesync_test_<hex>`), dropped at the end of the session."""
    database = _started(PostgresDatabase().create)
    yield database
    database.drop()


@pytest.fixture(scope="session")
def ship_mariadb() -> Iterator[MariaDBInstance]:
    """The ship's business database server (server_id 101), with a row-based binlog."""
    with _started(MariaDBInstance(SHIP_SERVER_ID).start) as instance:
        yield instance


@pytest.fixture(scope="session")
def second_ship_mariadb() -> Iterator[MariaDBInstance]:
    """A second ship's business database server (server_id 102), for fleet tests."""
    with _started(MariaDBInstance(SECOND_SHIP_SERVER_ID).start) as instance:
        yield instance


@pytest.fixture(scope="session")
def shore_mariadb() -> Iterator[MariaDBInstance]:
    """The shore's business database server (server_id 201), separate from the ship's."""
    with _started(MariaDBInstance(SHORE_SERVER_ID).start) as instance:
        yield instance


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[TansuBroker]:
    """A memory-only Kafka-API broker on a free loopback port (its topics live for the session)."""
    with _started(TansuBroker().start) as broker:
        yield broker


@pytest.fixture
def unique_topic() -> str:
    """A topic name no other test uses (the broker is shared for the whole session)."""
    return f"tidesync-test-{secrets.token_hex(6)}"


@pytest.fixture
def make_mariadb_database() -> Iterator[Callable[[MariaDBInstance], str]]:
    """A factory: `make_mariadb_database(instance)` creates an empty database and returns its name.

    The databases are dropped when the test ends.
    """
    created: list[tuple[MariaDBInstance, str]] = []

    def make(instance: MariaDBInstance) -> str:
        name = instance.create_database(f"t_{secrets.token_hex(6)}")
        created.append((instance, name))
        return name

    yield make
    for instance, name in created:
        connection = instance.connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            connection.close()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Runs before marker selection (-m), so `-m services` also finds tests marked here.
    for item in items:
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(SERVICE_MARKER)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # Under CI a skipped service test (however it skipped) counts as a failure.
    report: pytest.TestReport = yield
    if (running_in_ci() and report.skipped and not hasattr(report, "wasxfail")
            and item.get_closest_marker(SERVICE_MARKER) is not None):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"a service test was skipped under CI: {reason}"
    return report
