"""Several processes starting at once on a fresh PostgreSQL database (say `shore serve` and
`shore work` started together) all create the same event tables; none may fail for it."""

from __future__ import annotations

import secrets
import threading
from typing import Any

import pytest
from eventsourcing.application import Application

from tests.integration.test_ingress import make_config
from tidesync.bootstrap.event_store import event_store_env

pytestmark = pytest.mark.services


def test_applications_created_concurrently_on_fresh_tables_all_start(pg_database):
    env = event_store_env(make_config(pg_database).event_store)
    failures: list[BaseException] = []
    for _ in range(20):
        name = f"race_{secrets.token_hex(4)}"  # tables no one has created yet
        barrier = threading.Barrier(6)

        def start(name: str = name, barrier: threading.Barrier = barrier) -> None:
            app: Any = None
            try:
                barrier.wait()
                app = type("RaceApp", (Application,), {"name": name})(env=env)
            except BaseException as error:  # reported by the test thread
                failures.append(error)
            finally:
                if app is not None:
                    app.close()

        threads = [threading.Thread(target=start) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert failures == []
