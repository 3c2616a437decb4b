"""A bounded schemathesis run against the console (introspection on, an admin token, views kept
current by a background worker): generated queries and mutations for every root field must
never produce a server error — no 5xx and no unmasked or internal error in a GraphQL answer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import Case
from schemathesis.checks import not_a_server_error

from tests.integration.console_support import TEST_SETTINGS, ConsoleWorld, console_world

pytestmark = [
    pytest.mark.services,
    # schemathesis' own strategies draw from `random`; not ours to fix.
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning"),
]

MAX_EXAMPLES = 25
"""Per root field (about 30 of them): about 700 requests, well under a minute."""


@pytest.fixture(scope="module")
def fuzz_world(pg_database, shore_mariadb) -> Iterator[ConsoleWorld]:
    with console_world(shore_mariadb, replace(TEST_SETTINGS, introspection=True,
                                              wait_timeout_ms=3000)) as world:
        world.make_conflict()
        stop = threading.Event()

        def worker() -> None:
            while not stop.wait(0.2):
                try:
                    world.run_views()
                except Exception as error:  # a worker keeps going, as `shore work` does
                    logging.getLogger(__name__).warning("views: %s", type(error).__name__)

        thread = threading.Thread(target=worker, name="views", daemon=True)
        thread.start()
        try:
            yield world
        finally:
            stop.set()
            thread.join()


class WithoutLifespan:
    """The app for schemathesis' own ASGI client: requests reach it; its lifespan (already run
    by the test client) is not started or stopped a second time."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})


@pytest.fixture(scope="module")
def console_schema(fuzz_world: ConsoleWorld) -> schemathesis.schemas.BaseSchema:
    auth = {"Authorization": f"Bearer {fuzz_world.tokens['admin']}"}
    return schemathesis.graphql.from_asgi("/graphql", WithoutLifespan(fuzz_world.client.app),
                                          headers=auth)


def test_no_generated_request_makes_a_server_error(console_schema, fuzz_world: ConsoleWorld):
    auth = {"Authorization": f"Bearer {fuzz_world.tokens['admin']}"}
    operations = [result.ok() for result in console_schema.get_all_operations()]
    assert len(operations) > 20

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case: Case) -> None:
            response = case.call(headers=auth)
            assert response.status_code < 500, response.text
            for error in response.json().get("errors") or []:
                code = (error.get("extensions") or {}).get("code")
                assert code is not None, f"an error without a code: {error}"
                assert code not in ("INTERNAL_SERVER_ERROR", "UNAVAILABLE"), error
            case.validate_response(response, checks=[not_a_server_error], headers=auth)

        run()


def test_introspection_and_the_graphiql_page_when_configured(fuzz_world: ConsoleWorld):
    body = fuzz_world.query("{ __schema { queryType { name } } }", role="viewer")
    assert body["data"]["__schema"]["queryType"]["name"] == "Query"
    page = fuzz_world.client.get("/graphql", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "graphiql" in page.text.lower()
