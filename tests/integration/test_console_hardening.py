"""Console and read side hardening (issue 13 items 9 and 10) on real PostgreSQL and MariaDB:
refused text at the GraphQL edge, one error format, keyed digests, record heads that follow
decisions, the last admin, and views that fail alone."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.integration.console_support import ConsoleWorld, config_for, console_world, data
from tidesync.domain.conflict_case import key_digest
from tidesync.domain.evidence import evidence_digest
from tidesync.entrypoints.cli import main

pytestmark = pytest.mark.services

CONFLICT = """
query($id: ID!) {
  conflict(id: $id) {
    keyDigest decision { decidedRevision }
    comparison { column shore { digest value masked } ship { digest value masked } }
  }
}"""

CANCEL = """
mutation($input: CancelConflictInput!) {
  cancelConflict(input: $input) { __typename ... on ConflictError { code } }
}"""

HEADS = """
query($digest: String, $after: String) {
  recordHeads(keyDigest: $digest, first: 1, after: $after) {
    items { keyDigest recordKey revision ruleId } pageInfo { endCursor hasNextPage }
  }
}"""


@pytest.fixture(scope="module")
def world(pg_database, shore_mariadb):
    with console_world(shore_mariadb) as world:
        yield world



def extensions(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [error.get("extensions", {}) for error in body.get("errors", [])]


def post_escaped(world: ConsoleWorld, query: str, variables: dict[str, Any] | None) -> Any:
    """Posts JSON with every non-ASCII character escaped, as a client sends a lone surrogate
    (`\\ud800`)."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode("ascii")
    return world.client.post("/graphql", content=body, headers={
        "Authorization": f"Bearer {world.tokens['admin']}", "Content-Type": "application/json"})


def by_column(detail: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {column["column"]: column for column in detail["comparison"]}


# ----------------------------------------------------------------------------- refused text


def test_nul_and_lone_surrogates_are_refused_with_a_reason_and_nothing_is_stored(
        world: ConsoleWorld):
    conflict_id = world.make_conflict()
    refused = []
    for text in ("stop\x00now", "half \ud800 a pair"):
        refused.append(post_escaped(world, CANCEL, {"input": {"conflictId": conflict_id,
                                                              "reason": text}}))
        refused.append(post_escaped(
            world, "mutation($r: String!) { addUser(input: {name: \"nul-user\","
            " role: VIEWER, reason: $r}) { __typename } }", {"r": text}))
    refused.append(post_escaped(
        world, 'mutation { addUser(input: {name: "nul-user", role: VIEWER,'
        ' reason: "a\\u0000b"}) { __typename } }', None))
    for response in refused:
        assert response.headers["content-type"].startswith("application/json")
        assert [(e["code"], e["reason"]) for e in extensions(response.json())] == [
            ("BAD_USER_INPUT", "UNSTORABLE_TEXT")], response.text
    world.run_views()  # nothing a view cannot store was recorded
    state = data(world.query("query($id: ID!) { conflict(id: $id) { state } }",
                             {"id": conflict_id}))["conflict"]["state"]
    assert state == "DETECTED"
    names = [user["name"] for user in data(world.query("{ users { name } }"))["users"]]
    assert "nul-user" not in names


def test_the_cli_refuses_unstorable_reasons_with_a_reason_code(world: ConsoleWorld,
                                                               tmp_path: Path, capsys):
    store = config_for(world.database).event_store
    path = tmp_path / "tidesync.toml"
    path.write_text(
        "[event_store]\nkind = \"postgres\"\n"
        f"postgres_host = \"{store.postgres_host}\"\npostgres_port = {store.postgres_port}\n"
        f"postgres_dbname = \"{store.postgres_dbname}\"\n"
        f"postgres_user = \"{store.postgres_user}\"\n"
        f"postgres_password = \"{store.postgres_password}\"\n")
    # An argument that is not valid UTF-8 reaches Python as a lone surrogate.
    bad = "shift\udcff"
    assert main(["--config", str(path), "users", "add", "cli-nul", "--role", "viewer",
                 "--reason", bad]) == 1
    assert "UNSTORABLE_TEXT" in capsys.readouterr().err
    assert main(["--config", str(path), "projections", "rebuild", "audit", "--reason",
                 bad]) == 2
    assert "UNSTORABLE_TEXT" in capsys.readouterr().err
    assert main(["--config", str(path), "users", "list", "--json"]) == 0
    assert "cli-nul" not in capsys.readouterr().out


def test_every_refusal_answers_graphql_json(world: ConsoleWorld):
    auth = {"Authorization": f"Bearer {world.tokens['admin']}"}
    responses = [
        world.client.get("/graphql", params={"query": "{ me { name } }"}, headers=auth),
        world.client.post("/graphql", content=b'[{"query": "{ me { name } }"}]',
                          headers={**auth, "Content-Type": "application/json"}),
        world.client.post("/graphql", content=b"\xff\xfe",
                          headers={**auth, "Content-Type": "application/json"}),
        world.client.post("/graphql", content=b"query=x",
                          headers={**auth, "Content-Type": "text/plain"}),
    ]
    for response in responses:
        assert response.status_code >= 400
        assert response.headers["content-type"].startswith("application/json"), response.text
        body = response.json()
        assert body["data"] is None and body["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


def test_field_suggestions_are_off_without_introspection(world: ConsoleWorld):
    body = world.query("{ me { nam } }")
    assert [e["code"] for e in extensions(body)] == ["GRAPHQL_VALIDATION_FAILED"]
    assert "Did you mean" not in body["errors"][0]["message"]
    assert "'name'" not in body["errors"][0]["message"]


# ----------------------------------------------------------------------------- digests


def test_masked_values_cannot_be_recovered_from_their_digests(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    viewer = by_column(data(world.query(CONFLICT, {"id": conflict_id},
                                        role="viewer"))["conflict"])
    admin = by_column(data(world.query(CONFLICT, {"id": conflict_id}))["conflict"])
    qty = viewer["qty"]
    assert qty["shore"]["masked"] and qty["shore"]["value"] is None
    # Equal values still show equal digests within the case and column.
    assert qty["shore"]["digest"] == admin["qty"]["shore"]["digest"]
    assert qty["shore"]["digest"] != qty["ship"]["digest"]
    # The old, unkeyed digest of every small quantity and of the price: none matches.
    shown = {side["digest"] for column in viewer.values()
             for side in (column["shore"], column["ship"]) if side}
    guesses = {evidence_digest(conflict_id, "qty", ["int", n]) for n in range(1000)}
    guesses |= {evidence_digest(conflict_id, "price", ["decimal", v]) for v in ("99.95",)}
    assert admin["qty"]["shore"]["value"] == "100"
    assert not shown & guesses


def test_record_key_digests_are_keyed_and_still_find_the_record(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    shown = data(world.query(CONFLICT, {"id": conflict_id}, role="viewer"))["conflict"][
        "keyDigest"]
    page = data(world.query(HEADS, {"digest": shown}, role="admin"))["recordHeads"]
    [head] = page["items"]
    assert head["keyDigest"] == shown
    unkeyed = key_digest(head["ruleId"], head["recordKey"])
    assert shown != unkeyed and shown != hashlib.sha256(head["recordKey"].encode()).hexdigest()
    # Pages go on by cursor, and a cursor does not carry the unkeyed digest either.
    first = data(world.query(HEADS, {}, role="viewer"))["recordHeads"]
    cursor = first["pageInfo"]["endCursor"]
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    viewer_unkeyed = key_digest(first["items"][0]["ruleId"], head["recordKey"])
    assert viewer_unkeyed.encode() not in raw and b"items" not in raw
    second = data(world.query(HEADS, {"after": cursor}, role="viewer"))["recordHeads"]
    assert second["items"][0]["keyDigest"] != first["items"][0]["keyDigest"]


# ----------------------------------------------------------------------------- record heads


FROM_DECISIONS = "record_head.conflict_cases"


def test_record_heads_follow_a_dispatched_decision(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    decided = data(world.query(
        "mutation($input: DecideConflictInput!) { decideConflict(input: $input) {"
        " __typename } }", {"input": {"conflictId": conflict_id, "side": "SHORE",
                                      "reason": "shore data is authoritative"}},
        role="approver"))["decideConflict"]
    assert decided["__typename"] == "ConflictDecided"
    # The arbiter's step: the shore row already carries the shore's side; queued for the ship.
    case = world.apps.conflicts.get_case(uuid.UUID(conflict_id))
    case.dispatch([{"node_id": world.ship.node_id, "command_id": str(uuid.uuid4())}], False,
                  "system:arbiter", "decision queued")
    world.apps.conflicts.save(case)
    world.run_views()
    detail = data(world.query(CONFLICT, {"id": conflict_id}))["conflict"]
    head = data(world.query(HEADS, {"digest": detail["keyDigest"]}))["recordHeads"]["items"][0]
    assert head["revision"] == detail["decision"]["decidedRevision"]
    # Built again from the streams with the decisions read before the results they decide
    # (as a rebuild may, its feeds advancing independently), the view still agrees.
    console = world.console
    runner = console.catalogue.runner("record_head", console.apps().every, console.pool)
    with console.pool.connection() as conn:
        conn.execute("DELETE FROM record_head")
        conn.execute("DELETE FROM record_head_decision")
        conn.execute("DELETE FROM projection_tracking WHERE name = ANY(%s)",
                     ([feed.tracking_name for feed in runner.feeds],))
    for feed in sorted(runner.feeds, key=lambda feed: feed.tracking_name != FROM_DECISIONS):
        feed.run_until_idle()
    again = data(world.query(HEADS, {"digest": detail["keyDigest"]}))["recordHeads"]["items"][0]
    assert again["revision"] == detail["decision"]["decidedRevision"]


# ----------------------------------------------------------------------------- waits


def test_one_users_waits_are_bounded_and_do_not_hold_up_others(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    cancelled = data(world.query(
        "mutation($input: CancelConflictInput!) { cancelConflict(input: $input) {"
        " ... on ConflictCancelled { position { token } } } }",
        {"input": {"conflictId": conflict_id, "reason": "not needed"}},
        role="operator"))["cancelConflict"]
    wait = {"X-Tidesync-Wait-For": cancelled["position"]["token"]}  # views are not run
    limit = 4  # console.max_waits_per_user, by default

    def read_waiting(_: int) -> list[dict[str, Any]]:
        return extensions(world.query("{ conflicts(first: 1) { items { conflictId } } }",
                                      role="viewer", headers=wait))

    with ThreadPoolExecutor(limit + 3) as pool:
        waiting = [pool.submit(read_waiting, n) for n in range(limit + 3)]
        assert data(world.query("{ me { name } }"))["me"]["name"] == "admin-user"
        answers = [future.result() for future in waiting]
    reasons = sorted(str(e[0].get("reason")) for e in answers)
    assert [e[0]["code"] for e in answers] == ["WAIT_TIMEOUT"] * (limit + 3)
    assert reasons.count("TOO_MANY_WAITS") >= 3
    world.run_views()


# ----------------------------------------------------------------------------- users


def test_an_admin_reissues_a_token_and_the_old_one_is_refused(world: ConsoleWorld):
    added = data(world.query(
        'mutation { addUser(input: {name: "rotating", role: VIEWER, reason: "test"}) {'
        " ... on UserAdded { token } } }"))["addUser"]
    old = added["token"]
    assert world.post("{ me { name } }", token=old).status_code == 200
    reissued = data(world.query(
        'mutation { reissueUserToken(input: {name: "rotating", reason: "expired"}) {'
        " __typename ... on UserAdded { token } } }"))["reissueUserToken"]
    assert reissued["__typename"] == "UserAdded" and reissued["token"] != old
    refused = world.post("{ me { name } }", token=old)
    assert refused.status_code == 401
    assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    me = world.post("{ me { name } }", token=reissued["token"]).json()
    assert me["data"]["me"]["name"] == "rotating"


def test_the_last_active_admin_cannot_be_revoked(pg_database, shore_mariadb):
    with console_world(shore_mariadb) as world:
        revoke = ('mutation { revokeUser(input: {name: "admin-user", reason: "oops"}) {'
                  " __typename ... on UserError { code } } }")
        assert data(world.query(revoke))["revokeUser"] == {"__typename": "UserError",
                                                           "code": "LAST_ADMIN"}
        assert data(world.query("{ me { name } }"))["me"]["name"] == "admin-user"
        added = data(world.query(
            'mutation { addUser(input: {name: "second-admin", role: ADMIN, reason: "cover"})'
            " { __typename } }"))["addUser"]
        assert added["__typename"] == "UserAdded"
        assert data(world.query(revoke))["revokeUser"]["__typename"] == "UserRevoked"
