"""A bounded schemathesis run against the console (introspection on, an admin token, views kept
current by a background worker): generated queries and mutations for every root field must
never produce a server error — no 5xx and no unmasked or internal error in a GraphQL answer."""

from __future__ import annotations

import base64
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


# ----------------------------------------------------------------------------- mutated queries

SEED_DOCUMENTS = (
    ("{ me { name role permissions } }", {}),
    ("""query($filter: ConflictFilterInput, $first: Int, $after: String) {
      conflicts(filter: $filter, first: $first, after: $after) {
        items { conflictId state nodeIds ruleId openedAt summary }
        pageInfo { endCursor hasNextPage } } }""", {"filter": {"nodeId": "ship-1"}, "first": 5}),
    ("""query($n: String!, $after: String) { receipts(nodeId: $n, first: 1,
      after: $after) { items { seq result eventId } pageInfo { endCursor hasNextPage } } }""",
     {"n": "ship-1"}),
    ("{ nodes(first: 10) { items { nodeId } } projections { name behind } }", {}),
    ("""mutation($input: RegisterNodeInput!) { registerNode(input: $input) {
      __typename ... on NodeSecretIssued { nodeId credentialNumber }
      ... on NodeError { code } } }""", {"input": {"nodeId": "fuzz-node", "reason": "fuzz"}}),
    ("""mutation($n: String) { replayJobs(input: {errorClass: TARGET_SCHEMA,
      reason: "fuzz", nodeId: $n}) { __typename
      ... on JobsReplayed { events } ... on JobError { code } } }""", {"n": "ship-1"}),
)
"""Real console documents (from the console's own tests), mutated below."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=3),
    max_leaves=8)


@st.composite
def mutated_document(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A seed document with its text cut, spliced or sprinkled, and its variables changed."""
    text, variables = draw(st.sampled_from(SEED_DOCUMENTS))
    chars = list(text)
    for _ in range(draw(st.integers(0, 4))):
        position = draw(st.integers(0, len(chars)))
        action = draw(st.sampled_from(["insert", "delete", "repeat", "token"]))
        if action == "insert":
            chars[position:position] = draw(st.text(min_size=1, max_size=6))
        elif action == "delete":
            del chars[position:position + draw(st.integers(1, 12))]
        elif action == "repeat":
            chars[position:position] = chars[position:position + draw(st.integers(1, 40))] * 3
        else:
            chars[position:position] = list(draw(st.sampled_from(
                ["{", "}", "(", ")", "...", "$n", "@skip(if: true)", "__typename", "first: -1",
                 "first: 99999999999", "on Query", "fragment f on Query { me { name } }",
                 '"\\u0000"', "\x00", "#", "mutation", "subscription"])))
    if draw(st.booleans()):
        variables = {**variables, **draw(st.dictionaries(
            st.sampled_from(["n", "filter", "first", "after", "input"]), json_values,
            max_size=3))}
    return "".join(chars), variables


def test_mutated_queries_never_make_a_server_error(fuzz_world: ConsoleWorld):
    @given(document=mutated_document())
    @settings(max_examples=1000, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def run(document: tuple[str, dict[str, Any]]) -> None:
        response = fuzz_world.post(*document, token=fuzz_world.tokens["admin"])
        assert response.status_code < 500, response.text
        if not response.headers.get("content-type", "").startswith("application/json"):
            return
        for error in response.json().get("errors") or []:
            code = (error.get("extensions") or {}).get("code")
            assert code is not None, f"an error without a code: {error}"
            assert code not in ("INTERNAL_SERVER_ERROR", "UNAVAILABLE"), error

    run()


def test_a_flood_of_invented_tokens_is_refused_without_reading_each_users_stream(
        fuzz_world: ConsoleWorld):
    """Every invented token is a well-formed console token naming a user nobody has."""
    users = fuzz_world.console.apps().users
    read = users.repository.get
    reads: list[object] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[0] if args else None)
        return read(*args, **kwargs)

    users.repository.get = counted  # type: ignore[method-assign]
    try:
        for _ in range(200):
            token = "tsu_" + base64.urlsafe_b64encode(
                uuid.uuid4().bytes + os.urandom(32)).rstrip(b"=").decode()
            response = fuzz_world.post("{ me { name } }", token=token)
            assert response.status_code == 401
            assert [e["extensions"]["code"] for e in response.json()["errors"]] == [
                "UNAUTHENTICATED"]
    finally:
        users.repository.get = read  # type: ignore[method-assign]
    assert reads == []
