"""The GraphQL console end to end on real PostgreSQL and MariaDB: roles per mutation and per
sensitive field, evidence masking, conflict decisions against the live revision, node and
user commands, read-your-writes, request limits, error masking and authentication."""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
import uuid
import zoneinfo
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.console_support import ConsoleWorld, config_for, console_world, data
from tests.integration.shore_support import ShipLog, receive
from tidesync.apps.nodes import Actor
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
)
from tidesync.domain.downlink_command import CommandKind, DecisionPayload, NewCommand
from tidesync.domain.node import NodeLink
from tidesync.entrypoints.cli import main
from tidesync.graphql.nodes.eta import fetch_eta

pytestmark = pytest.mark.services

ROLES = ("viewer", "operator", "approver", "auditor", "admin")


@pytest.fixture(scope="module")
def world(pg_database, shore_mariadb):
    with console_world(shore_mariadb) as world:
        yield world



def error_codes(body: dict[str, Any]) -> list[str]:
    return [error.get("extensions", {}).get("code") for error in body.get("errors", [])]


def error_reasons(body: dict[str, Any]) -> list[str]:
    return [error.get("extensions", {}).get("reason") for error in body.get("errors", [])]


CONFLICT_DETAIL = """
query($id: ID!, $wait: String) {
  conflict(id: $id, waitFor: $wait) {
    id state version decidable cancellable
    replacementColumns { column type }
    comparison { column differs
      shore { type isNull digest value masked }
      ship { type isNull digest value masked } }
    decision { decisionId side tombstone decidedRevision expectedRevision actor reason
               decidedValue { column value masked } }
    cancellation { actor reason }
  }
}"""

DECIDE = """
mutation($input: DecideConflictInput!) {
  decideConflict(input: $input) {
    __typename
    ... on ConflictDecided { conflictId decisionId state version
                             position { application notificationId token } }
    ... on ConflictError { code message }
  }
}"""

REFRESH = """
mutation($input: RefreshConflictEvidenceInput!) {
  refreshConflictEvidence(input: $input) {
    __typename
    ... on ConflictEvidenceRefreshed { conflictId refreshed state version position { token } }
    ... on ConflictError { code message }
  }
}"""

CANCEL = """
mutation($input: CancelConflictInput!) {
  cancelConflict(input: $input) {
    __typename
    ... on ConflictCancelled { conflictId state version position { token } }
    ... on ConflictError { code message }
  }
}"""


def decide(world: ConsoleWorld, conflict_id: str, role: str = "approver",
           **fields: Any) -> dict[str, Any]:
    variables = {"input": {"conflictId": conflict_id, "side": "SHORE",
                           "reason": "shore data is authoritative", **fields}}
    result: dict[str, Any] = data(world.query(DECIDE, variables, role=role))["decideConflict"]
    return result


def by_column(detail: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {column["column"]: column for column in detail["comparison"]}


# ----------------------------------------------------------------------------- authentication


def test_every_role_is_told_who_it_is(world: ConsoleWorld):
    for role in ROLES:
        me = data(world.query("{ me { name role permissions } }", role=role))["me"]
        assert me["name"] == f"{role}-user" and me["role"] == role.upper()
        assert "VIEW" in me["permissions"]


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer nonsense", "Basic abc",
                                           "Bearer tsu_" + "A" * 64])
def test_requests_without_a_valid_token_are_refused(world: ConsoleWorld, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    response = world.client.post("/graphql", json={"query": "{ me { name } }"},
                                 headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert error_codes(response.json()) == ["UNAUTHENTICATED"]


def test_a_revoked_user_is_refused_at_once(world: ConsoleWorld):
    added = data(world.query(
        'mutation { addUser(input: {name: "short-lived", role: VIEWER, reason: "test"}) {'
        " __typename ... on UserAdded { name role token position { token } } } }"))["addUser"]
    assert added["__typename"] == "UserAdded" and added["token"].startswith("tsu_")
    token = added["token"]
    assert world.post("{ me { name } }", token=token).json()["data"]["me"]["name"] == "short-lived"

    revoked = data(world.query(
        'mutation { revokeUser(input: {name: "short-lived", reason: "left the team"}) {'
        " __typename ... on UserRevoked { name } } }"))["revokeUser"]
    assert revoked["__typename"] == "UserRevoked"
    response = world.post("{ me { name } }", token=token)
    assert response.status_code == 401 and error_codes(response.json()) == ["UNAUTHENTICATED"]


def test_users_cli_adds_lists_and_revokes(world: ConsoleWorld, tmp_path: Path, capsys):
    config = config_for(world.database)
    store = config.event_store
    path = tmp_path / "tidesync.toml"
    path.write_text(
        "[event_store]\nkind = \"postgres\"\n"
        f"postgres_host = \"{store.postgres_host}\"\npostgres_port = {store.postgres_port}\n"
        f"postgres_dbname = \"{store.postgres_dbname}\"\n"
        f"postgres_user = \"{store.postgres_user}\"\n"
        f"postgres_password = \"{store.postgres_password}\"\n")

    assert main(["--config", str(path), "users", "add", "cli-user", "--role", "auditor"]) == 0
    token = next(line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines()
                 if line.startswith("token: "))
    assert world.post("{ me { role } }", token=token).json()["data"]["me"]["role"] == "AUDITOR"

    assert main(["--config", str(path), "users", "add", "cli-user", "--role", "viewer"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert main(["--config", str(path), "users", "list", "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"name": "cli-user", "role": "auditor", "status": "ACTIVE"}.items() <= next(
        u for u in listed if u["name"] == "cli-user").items()
    assert token not in json.dumps(listed)

    assert main(["--config", str(path), "users", "revoke", "cli-user", "--reason", "done"]) == 0
    assert world.post("{ me { role } }", token=token).status_code == 401


# ----------------------------------------------------------------------------- role matrix

MUTATIONS = {
    # mutation: (document with harmless input that reaches the domain, allowed roles,
    #            the typename an allowed role gets back)
    "decideConflict": (
        'mutation { decideConflict(input: {conflictId: "00000000-0000-0000-0000-000000000000",'
        ' side: SHORE, reason: "r"}) { __typename } }', {"approver", "admin"}, "ConflictError"),
    "refreshConflictEvidence": (
        'mutation { refreshConflictEvidence(input: {conflictId:'
        ' "00000000-0000-0000-0000-000000000000", reason: "r"}) { __typename } }',
        {"approver", "admin"}, "ConflictError"),
    "cancelConflict": (
        'mutation { cancelConflict(input: {conflictId: "00000000-0000-0000-0000-000000000000",'
        ' reason: "r"}) { __typename } }', {"operator", "admin"}, "ConflictError"),
    "redispatchConflict": (
        'mutation { redispatchConflict(input: {conflictId:'
        ' "00000000-0000-0000-0000-000000000000", nodeId: "n", reason: "r"}) { __typename } }',
        {"operator", "admin"}, "ConflictError"),
    "registerNode": (
        'mutation { registerNode(input: {nodeId: "Not Valid", reason: "r"}) { __typename } }',
        {"admin"}, "NodeError"),
    "rotateNodeCredentials": (
        'mutation { rotateNodeCredentials(input: {nodeId: "no-such-node", reason: "r"}) {'
        " __typename } }", {"admin"}, "NodeError"),
    "revokeNode": (
        'mutation { revokeNode(input: {nodeId: "no-such-node", reason: "r"}) { __typename } }',
        {"admin"}, "NodeError"),
    "setNodeUplink": (
        'mutation { setNodeUplink(input: {nodeId: "no-such-node", rateBytesPerSecond: 131072,'
        ' reason: "r"}) { __typename } }', {"admin"}, "NodeError"),
    "replayJobs": (
        'mutation { replayJobs(input: {errorClass: MALFORMED, reason: "r"}) { __typename } }',
        {"operator", "admin"}, "JobError"),
    "rebuildProjection": (
        'mutation { rebuildProjection(input: {name: "no_such_view", reason: "r"}) {'
        " __typename } }", {"operator", "admin"}, "ProjectionError"),
    "addUser": (
        'mutation { addUser(input: {name: "Bad Name", role: VIEWER, reason: "r"}) {'
        " __typename } }", {"admin"}, "UserError"),
    "revokeUser": (
        'mutation { revokeUser(input: {name: "nobody", reason: "r"}) { __typename } }',
        {"admin"}, "UserError"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("role", ROLES)
def test_each_mutation_is_allowed_only_to_its_roles(world: ConsoleWorld, mutation: str,
                                                    role: str):
    document, allowed, answer = MUTATIONS[mutation]
    body = world.query(document, role=role)
    if role in allowed:
        assert data(body)[mutation]["__typename"] == answer
    else:
        assert body["data"] is None and error_codes(body) == ["FORBIDDEN"]


READS = {
    # query: roles that may run it
    "{ nodes { items { nodeId } } }": set(ROLES),
    "{ backlogs { items { nodeId } } }": set(ROLES),
    '{ receipts(nodeId: "x") { items { seq } } }': set(ROLES),
    "{ conflicts { items { conflictId } } }": set(ROLES),
    "{ recordHeads { items { keyDigest } } }": set(ROLES),
    "{ projections { name } }": set(ROLES),
    "{ jobSummary { events } }": set(ROLES),
    "{ auditEvents { items { seq } } }": {"auditor", "admin"},
    "{ aggregateKinds }": {"auditor", "admin"},
    '{ aggregateHistory(kind: "node", id: "00000000-0000-0000-0000-000000000000") {'
    " kind } }": {"auditor", "admin"},
    "{ users { name } }": {"admin"},
}


@pytest.mark.parametrize("document", sorted(READS))
@pytest.mark.parametrize("role", ROLES)
def test_each_query_is_allowed_only_to_its_roles(world: ConsoleWorld, document: str,
                                                 role: str):
    body = world.query(document, role=role)
    if role in READS[document]:
        assert "errors" not in body, body
    else:
        assert error_codes(body) == ["FORBIDDEN"]


def test_evidence_values_are_masked_by_role_and_column(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    seen = {role: by_column(data(world.query(CONFLICT_DETAIL, {"id": conflict_id},
                                             role=role))["conflict"]) for role in ROLES}
    for role in ("viewer", "operator"):
        qty = seen[role]["qty"]
        assert qty["shore"]["value"] is None and qty["shore"]["masked"] is True
        assert qty["ship"]["value"] is None and qty["ship"]["masked"] is True
        assert qty["shore"]["type"] == "int" and qty["differs"] is True
        assert qty["shore"]["digest"] == seen["admin"]["qty"]["shore"]["digest"]
        assert seen[role]["price"]["shore"]["value"] is None
    for role in ("approver", "auditor", "admin"):
        assert seen[role]["qty"]["shore"]["value"] == "100"
        assert seen[role]["qty"]["ship"]["value"] == "5"
        assert seen[role]["name"]["ship"]["value"].startswith("ship")
    # price is configured as sensitive: only auditors and admins see its value.
    assert seen["approver"]["price"]["shore"] == {
        **seen["approver"]["price"]["shore"], "value": None, "masked": True}
    for role in ("auditor", "admin"):
        assert seen[role]["price"]["shore"]["value"] == "99.95"
        assert seen[role]["price"]["shore"]["masked"] is False
    # The ship's change carried no price: nothing to compare.
    assert seen["admin"]["price"]["ship"] is None and seen["admin"]["price"]["differs"] is None
    assert "_sync_revision" not in seen["admin"]


def test_record_keys_are_shown_only_to_roles_that_see_values(world: ConsoleWorld):
    world.make_conflict()
    document = "{ recordHeads(first: 1) { items { keyDigest recordKey } } }"
    for role in ROLES:
        head = data(world.query(document, role=role))["recordHeads"]["items"][0]
        assert len(head["keyDigest"]) == 64
        if role in ("approver", "auditor", "admin"):
            assert '"items"' in head["recordKey"]
        else:
            assert head["recordKey"] is None


# ----------------------------------------------------------------------------- conflicts


def test_an_approver_decides_for_the_shore_and_reads_the_decision(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    detail = data(world.query(CONFLICT_DETAIL, {"id": conflict_id}))["conflict"]
    assert detail["state"] == "DETECTED" and detail["decidable"] is True
    assert {c["column"] for c in detail["replacementColumns"]} == {"id", "name", "qty", "price"}

    decided = decide(world, conflict_id, expectedVersion=detail["version"])
    assert decided["__typename"] == "ConflictDecided", decided
    assert decided["state"] == "DECIDED" and decided["position"]["application"] == (
        "conflict_cases")

    after = data(world.query(CONFLICT_DETAIL, {"id": conflict_id}, role="approver"))["conflict"]
    decision = after["decision"]
    assert after["state"] == "DECIDED" and after["decidable"] is False
    assert decision["side"] == "SHORE" and decision["actor"] == "user:approver-user"
    assert decision["reason"] == "shore data is authoritative"
    assert decision["decidedRevision"] == decision["expectedRevision"]
    values = {v["column"]: v for v in decision["decidedValue"]}
    assert values["qty"]["value"] == "100" and values["price"]["masked"] is True
    viewer = data(world.query(CONFLICT_DETAIL, {"id": conflict_id}, role="viewer"))["conflict"]
    assert all(v["value"] is None for v in viewer["decision"]["decidedValue"])

    again = decide(world, conflict_id)
    assert again == {"__typename": "ConflictError", "code": "NOT_DECIDABLE",
                     "message": "a DECIDED conflict cannot be decided"}


def test_a_decision_is_refused_when_the_record_changed_since_the_evidence(
        world: ConsoleWorld):
    conflict_id = world.make_conflict()
    key = int(data(world.query(CONFLICT_DETAIL, {"id": conflict_id}))["conflict"][
        "comparison"][0]["shore"]["value"])
    world.shore_edit(key, "qty = qty + 1")

    refused = decide(world, conflict_id, side="SHIP")
    assert refused["__typename"] == "ConflictError" and refused["code"] == "EVIDENCE_STALE"
    assert data(world.query(CONFLICT_DETAIL, {"id": conflict_id}))["conflict"]["state"] == (
        "DETECTED")

    # Refreshing the evidence takes the shore's row as it is now; then the decision is made.
    def refresh(role: str = "approver") -> dict[str, Any]:
        body = world.query(REFRESH, {"input": {"conflictId": conflict_id,
                                               "reason": "the shore row moved"}}, role=role)
        result: dict[str, Any] = data(body)["refreshConflictEvidence"]
        return result

    refreshed = refresh()
    assert refreshed["__typename"] == "ConflictEvidenceRefreshed" and refreshed["refreshed"]
    assert refresh()["refreshed"] is False  # already current: nothing recorded
    decided = decide(world, conflict_id, side="SHIP")
    assert decided["__typename"] == "ConflictDecided" and decided["state"] == "DECIDED"
    assert refresh()["code"] == "NOT_REFRESHABLE"


def test_a_replacement_value_is_typed_from_the_evidence(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    key = data(world.query(CONFLICT_DETAIL, {"id": conflict_id}))["conflict"]["comparison"][0][
        "shore"]["value"]
    full = [{"column": "id", "value": key}, {"column": "name", "value": "agreed"},
            {"column": "qty", "value": "7"}, {"column": "price", "value": "12.30"}]

    wrong_type = [*full[:2], {"column": "qty", "value": "seven"}, full[3]]
    assert decide(world, conflict_id, side="REPLACEMENT", replacement=wrong_type)[
        "code"] == "INVALID_VALUE"
    assert decide(world, conflict_id, side="REPLACEMENT", replacement=full[:3])[
        "code"] == "REPLACEMENT_COLUMNS"
    assert decide(world, conflict_id, side="REPLACEMENT")["code"] == "REPLACEMENT_REQUIRED"
    assert decide(world, conflict_id, side="SHIP", replacement=full)[
        "code"] == "REPLACEMENT_UNEXPECTED"
    assert decide(world, conflict_id, side="REPLACEMENT", replacement=full, reason=" ")[
        "code"] == "REASON_REQUIRED"

    decided = decide(world, conflict_id, role="admin", side="REPLACEMENT", replacement=full)
    assert decided["__typename"] == "ConflictDecided"
    decision = data(world.query(CONFLICT_DETAIL, {"id": conflict_id}))["conflict"]["decision"]
    assert {v["column"]: v["value"] for v in decision["decidedValue"]} == {
        "id": key, "name": "agreed", "qty": "7", "price": "12.30"}
    assert decision["decidedRevision"] not in (None, decision["expectedRevision"])


def test_a_retried_decision_answers_with_the_first_one(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    first = decide(world, conflict_id, decisionKey="req-1", side="SHIP")
    second = decide(world, conflict_id, decisionKey="req-1", side="SHIP")
    assert first["__typename"] == second["__typename"] == "ConflictDecided"
    assert first["decisionId"] == second["decisionId"] and first["version"] == second["version"]
    assert decide(world, conflict_id, decisionKey="req-2")["code"] == "NOT_DECIDABLE"


def test_a_stale_case_version_is_refused(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    assert decide(world, conflict_id, expectedVersion=99)["code"] == "CASE_CHANGED"
    body = world.query(CANCEL, {"input": {"conflictId": conflict_id, "reason": "r",
                                          "expectedVersion": 99}}, role="operator")
    assert data(body)["cancelConflict"]["code"] == "CASE_CHANGED"


def test_an_operator_cancels_and_the_key_may_conflict_again(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    body = world.query(CANCEL, {"input": {"conflictId": conflict_id,
                                          "reason": "opened by a test import"}},
                       role="operator")
    cancelled = data(body)["cancelConflict"]
    assert cancelled["__typename"] == "ConflictCancelled" and cancelled["state"] == "CANCELLED"
    with world.pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM active_conflict WHERE conflict_id = %s",
                            (uuid.UUID(conflict_id),)).fetchone() == (0,)
    detail = data(world.query(CONFLICT_DETAIL, {"id": conflict_id}))["conflict"]
    assert detail["cancellation"] == {"actor": "user:operator-user",
                                      "reason": "opened by a test import"}
    assert decide(world, conflict_id)["code"] == "NOT_DECIDABLE"
    again = world.query(CANCEL, {"input": {"conflictId": conflict_id, "reason": "r"}},
                        role="operator")
    assert data(again)["cancelConflict"]["code"] == "NOT_CANCELLABLE"


def test_conflicts_filter_by_node_rule_state_and_age_and_page(world: ConsoleWorld):
    world.make_conflict()
    world.make_conflict()
    document = """query($filter: ConflictFilterInput, $first: Int, $after: String) {
      conflicts(filter: $filter, first: $first, after: $after) {
        items { conflictId state nodeIds ruleId openedAt }
        pageInfo { endCursor hasNextPage } } }"""
    node = world.ship.node_id
    everything = data(world.query(document, {"filter": {"nodeId": node}, "first": 200}))
    total = len(everything["conflicts"]["items"])
    assert total >= 2

    seen: list[str] = []
    after = None
    while True:
        page = data(world.query(document, {"filter": {"nodeId": node}, "first": 1,
                                           "after": after}))["conflicts"]
        seen += [item["conflictId"] for item in page["items"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == [item["conflictId"] for item in everything["conflicts"]["items"]]
    assert len(set(seen)) == total

    def count(filter: dict[str, Any]) -> int:
        return len(data(world.query(document, {"filter": filter, "first": 200}))[
            "conflicts"]["items"])

    assert count({"nodeId": "some-other-node"}) == 0
    assert count({"ruleId": "table:shipdb.items", "nodeId": node}) == total
    assert count({"states": ["DETECTED", "DECIDED", "CANCELLED"], "nodeId": node}) == total
    assert count({"states": ["ACKNOWLEDGED"], "nodeId": node}) == 0
    assert count({"olderThanSeconds": 3600, "nodeId": node}) == 0
    assert count({"newerThanSeconds": 3600, "nodeId": node}) == total
    body = world.query(document, {"filter": {"olderThanSeconds": -1}})
    assert error_codes(body) == ["BAD_USER_INPUT"]
    body = world.query(document, {"after": "not-a-cursor"})
    assert error_codes(body) == ["BAD_USER_INPUT"]


LIFECYCLE = """
query($id: ID!) {
  conflict(id: $id) {
    state decidable cancellable
    lease { owner policy until takenOverFrom }
    manual { reasonCode slaDue }
    dispatch { shoreApplied commands { nodeId commandId } }
    acks { nodeId commandId result reasonCode }
    expiry { reasonCode actor reason }
  }
}"""

CENTER_ROW = """query($node: String!) {
  conflicts(filter: {nodeId: $node}, first: 200) {
    items { conflictId state openedAt slaDueAt summary } } }"""


@contextmanager
def another_ship(world: ConsoleWorld) -> Iterator[ShipLog]:
    """Conflicts of a ship of their own: other tests count the shared ship's by state."""
    shared = world.ship
    world.ship = ShipLog(f"ship-{secrets.token_hex(3)}", "shipdb")
    try:
        yield world.ship
    finally:
        world.ship = shared


def center_row(world: ConsoleWorld, node_id: str, conflict_id: str) -> dict[str, Any]:
    world.run_views()
    items = data(world.query(CENTER_ROW, {"node": node_id}, role="viewer"))["conflicts"]["items"]
    return {item["conflictId"]: item for item in items}[conflict_id]


def test_the_console_shows_the_arbitration_lifecycle_to_every_role(world: ConsoleWorld):
    """A case driven with the arbiter's domain methods: hand-over to a person with its SLA,
    the decision through the API, dispatch to two nodes, their acks, acknowledged."""
    with another_ship(world) as ship:
        conflict_id = world.make_conflict()
    conflicts = world.apps.conflicts
    case = conflicts.get_case(uuid.UUID(conflict_id))
    now = case.created_on
    case.start_auto_decide("worker-1", "LAST_WRITER_WINS", now.isoformat(),
                           (now + dt.timedelta(minutes=1)).isoformat(), "system:arbiter",
                           "policy LAST_WRITER_WINS")
    conflicts.save(case)
    for role in ROLES:
        detail = data(world.query(LIFECYCLE, {"id": conflict_id}, role=role))["conflict"]
        assert detail["state"] == "AUTO_DECIDING"
        assert detail["lease"] == {"owner": "worker-1", "policy": "LAST_WRITER_WINS",
                                   "until": (now + dt.timedelta(minutes=1)).isoformat(),
                                   "takenOverFrom": None}
        assert detail["manual"] is None and detail["dispatch"] is None
        assert detail["acks"] == [] and detail["expiry"] is None

    due = now + dt.timedelta(hours=3)
    case.require_manual("TIME_UNREADABLE", due.isoformat(), "system:arbiter",
                        "a business time is missing")
    conflicts.save(case)
    detail = data(world.query(LIFECYCLE, {"id": conflict_id}, role="viewer"))["conflict"]
    assert detail["state"] == "PENDING_MANUAL" and detail["decidable"] is True
    assert detail["lease"] is None
    assert detail["manual"]["reasonCode"] == "TIME_UNREADABLE"
    assert dt.datetime.fromisoformat(detail["manual"]["slaDue"]) == due
    row = center_row(world, ship.node_id, conflict_id)
    assert row["state"] == "PENDING_MANUAL"
    assert dt.datetime.fromisoformat(row["slaDueAt"]) == due
    assert row["summary"]["manual"] == {"reason_code": "TIME_UNREADABLE",
                                        "sla_due": due.isoformat()}

    assert decide(world, conflict_id)["__typename"] == "ConflictDecided"
    case = conflicts.get_case(uuid.UUID(conflict_id))
    commands = [{"node_id": ship.node_id, "command_id": str(uuid.uuid4())},
                {"node_id": "ship-beta", "command_id": str(uuid.uuid4())}]
    case.dispatch(commands, True, "system:arbiter", "decision applied on shore and queued")
    case.record_ack(ship.node_id, commands[0]["command_id"], "COMMAND_APPLIED", "",
                    f"node:{ship.node_id}", "applied")
    conflicts.save(case)
    detail = data(world.query(LIFECYCLE, {"id": conflict_id}, role="viewer"))["conflict"]
    assert detail["state"] == "DISPATCHED" and detail["cancellable"] is False
    assert detail["dispatch"] == {"shoreApplied": True, "commands": [
        {"nodeId": c["node_id"], "commandId": c["command_id"]} for c in commands]}
    assert detail["acks"] == [{"nodeId": ship.node_id, "commandId": commands[0]["command_id"],
                               "result": "COMMAND_APPLIED", "reasonCode": ""}]
    row = center_row(world, ship.node_id, conflict_id)
    assert row["state"] == "DISPATCHED"
    assert (dt.datetime.fromisoformat(row["slaDueAt"])
            - dt.datetime.fromisoformat(row["openedAt"])) == dt.timedelta(hours=24)

    assert case.record_ack("ship-beta", commands[1]["command_id"], "COMMAND_ALREADY_APPLIED",
                           "", "node:ship-beta", "already there")
    conflicts.save(case)
    detail = data(world.query(LIFECYCLE, {"id": conflict_id}, role="viewer"))["conflict"]
    assert detail["state"] == "ACKNOWLEDGED"
    assert {ack["nodeId"]: ack["result"] for ack in detail["acks"]} == {
        ship.node_id: "COMMAND_APPLIED", "ship-beta": "COMMAND_ALREADY_APPLIED"}
    assert [ack["nodeId"] for ack in detail["acks"]] == sorted([ship.node_id, "ship-beta"])
    assert center_row(world, ship.node_id, conflict_id)["state"] == "ACKNOWLEDGED"


REDISPATCH = """
mutation($input: RedispatchConflictInput!) {
  redispatchConflict(input: $input) {
    __typename
    ... on ConflictRedispatched { conflictId nodeId state version }
    ... on ConflictError { code message }
  }
}"""


def test_an_operator_sends_a_rejected_decision_to_the_ship_again(world: ConsoleWorld):
    with another_ship(world) as ship:
        conflict_id = world.make_conflict()
    assert decide(world, conflict_id)["__typename"] == "ConflictDecided"
    conflicts, downlink = world.apps.conflicts, world.console.downlink_service()
    case = conflicts.get_case(uuid.UUID(conflict_id))
    decision_id = uuid.UUID(str(case.decision["decision_id"]))
    payload = DecisionPayload(decision_id, case.id, case.rule_id, None,
                              RecordKey.of(case.database, case.table, {"id": 1}), None,
                              {"qty": 3}, Revision(uuid.uuid4().bytes), "shore wins")
    (sent,) = downlink.issue([NewCommand(ship.node_id, CommandKind.CONFLICT_DECISION,
                                         decision_id, payload, conflict_id=case.id)])
    case.dispatch([{"node_id": ship.node_id, "command_id": str(sent.command_id)}], True,
                  "system:arbiter", "queued")
    case.record_ack(ship.node_id, str(sent.command_id), "COMMAND_REJECTED", "TARGET_SCHEMA",
                    f"node:{ship.node_id}", "not applied")
    conflicts.save(case)
    ask = {"input": {"conflictId": conflict_id, "nodeId": ship.node_id,
                     "reason": "the table is enabled for sync now"}}

    done = data(world.query(REDISPATCH, ask, role="operator"))["redispatchConflict"]

    assert (done["__typename"], done["state"], done["nodeId"]) == (
        "ConflictRedispatched", "DISPATCHED", ship.node_id)
    again = data(world.query(REDISPATCH, ask, role="operator"))["redispatchConflict"]
    assert again["code"] == "NOT_REDISPATCHABLE"
    first, second = downlink.commands_for(ship.node_id)
    assert first.command_id == sent.command_id and second.payload == payload
    detail = data(world.query(LIFECYCLE, {"id": conflict_id}, role="viewer"))["conflict"]
    assert detail["dispatch"]["commands"] == [{"nodeId": ship.node_id,
                                               "commandId": str(second.command_id)}]
    assert detail["acks"] == []  # the ship's answer to the new command is awaited
    last = list(conflicts.repository.event_store.get(case.id))[-1]
    assert type(last).__name__ == "Redispatched"
    assert (last.node_id, last.reason) == (ship.node_id, "the table is enabled for sync now")
    assert last.actor.startswith("user:")


def test_the_console_shows_why_a_case_expired(world: ConsoleWorld):
    with another_ship(world) as ship:
        conflict_id = world.make_conflict()
    case = world.apps.conflicts.get_case(uuid.UUID(conflict_id))
    case.expire("EVIDENCE_STALE", "system:arbiter", "the shore row changed before the decision")
    world.apps.conflicts.save(case)
    detail = data(world.query(LIFECYCLE, {"id": conflict_id}, role="viewer"))["conflict"]
    assert detail["state"] == "EXPIRED" and detail["decidable"] is False
    assert detail["expiry"] == {"reasonCode": "EVIDENCE_STALE", "actor": "system:arbiter",
                                "reason": "the shore row changed before the decision"}
    row = center_row(world, ship.node_id, conflict_id)
    assert row["state"] == "EXPIRED" and row["summary"]["expiry"]["reason_code"] == (
        "EVIDENCE_STALE")


# ----------------------------------------------------------------------------- read your writes


def test_a_mutation_position_lets_the_next_query_read_its_write(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    decided = decide(world, conflict_id, side="SHIP")
    token = decided["position"]["token"]
    assert token.startswith("conflict_cases:")
    document = ('query($id: String!) { conflicts(filter: {nodeId: $id}, first: 200) {'
                " items { conflictId state } } }")

    stale = data(world.query(document, {"id": world.ship.node_id}))["conflicts"]["items"]
    assert {i["conflictId"]: i["state"] for i in stale}[conflict_id] == "DETECTED"

    waiting = world.query(document, {"id": world.ship.node_id},
                          headers={"X-Tidesync-Wait-For": token})
    assert error_codes(waiting) == ["WAIT_TIMEOUT"]  # nothing runs the views yet

    with world.views_in_background(delay=0.3):
        fresh = data(world.query(document, {"id": world.ship.node_id},
                                 headers={"X-Tidesync-Wait-For": token}))
    assert {i["conflictId"]: i["state"] for i in fresh["conflicts"]["items"]}[conflict_id] == (
        "DECIDED")

    # The same wait as an argument, and the audit view has the decision with its actor.
    audit = data(world.query(
        'query($wait: String, $id: ID) { auditEvents(waitFor: $wait, first: 200,'
        " filter: {aggregateId: $id}) { items { eventType actor reason application } } }",
        {"wait": token, "id": conflict_id}, role="auditor"))["auditEvents"]["items"]
    assert {"eventType": "ConflictCase.Decided", "actor": "user:approver-user",
            "reason": "shore data is authoritative", "application": "conflict_cases"} in audit

    for header in ("no_such_app:5", "conflict_cases:999999999", "garbage"):
        body = world.query("{ nodes { items { nodeId } } }",
                           headers={"X-Tidesync-Wait-For": header})
        assert error_codes(body) == ["BAD_USER_INPUT"], header


def test_aggregate_history_replays_a_case_for_auditors(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    decide(world, conflict_id, side="SHIP")
    document = """query($id: ID!, $version: Int, $diff: Int) {
      aggregateHistory(kind: "conflict_case", id: $id, version: $version, diffFrom: $diff) {
        kind aggregateId events { version eventType actor reason }
        state { version digest state } changes { path change } } }"""
    history = data(world.query(document, {"id": conflict_id, "diff": 1},
                               role="auditor"))["aggregateHistory"]
    assert [e["eventType"] for e in history["events"]] == [
        "ConflictCase.Detected", "ConflictCase.Decided"]
    assert history["events"][1]["actor"] == "user:approver-user"
    assert history["state"]["version"] == 2 and history["state"]["state"]["state"] == "DECIDED"
    decision = history["state"]["state"]["decision"]
    assert "decided_value" not in decision and len(decision["decided_value_sha256"]) == 64
    assert {"path": "state", "change": "changed"} in history["changes"]
    first = data(world.query(document, {"id": conflict_id, "version": 1},
                             role="auditor"))["aggregateHistory"]
    assert first["state"]["state"]["state"] == "DETECTED"
    evidence = first["state"]["state"]["evidence"][0]  # a summary here: no row images
    assert evidence["differing_columns"] == ["name", "qty"]
    assert not {"current_row", "incoming_after", "incoming_before"} & set(evidence)
    body = world.query(document, {"id": conflict_id, "version": 9}, role="auditor")
    assert error_codes(body) == ["BAD_USER_INPUT"]
    missing = world.query(document, {"id": str(uuid.uuid4())}, role="auditor")
    assert data(missing)["aggregateHistory"] is None


# ----------------------------------------------------------------------------- other commands


def test_node_register_rotate_revoke_with_secrets_shown_once(world: ConsoleWorld):
    node_id = f"it-console-{uuid.uuid4().hex[:6]}"
    issue = """mutation($input: RegisterNodeInput!) { registerNode(input: $input) {
      __typename ... on NodeSecretIssued { nodeId credentialNumber secret position { token } }
      ... on NodeError { code } } }"""
    registered = data(world.query(issue, {"input": {"nodeId": node_id, "reason": "new ship"}}))[
        "registerNode"]
    assert registered["__typename"] == "NodeSecretIssued"
    assert registered["credentialNumber"] == 1 and len(registered["secret"]) == 43
    again = data(world.query(issue, {"input": {"nodeId": node_id, "reason": "twice"}}))
    assert again["registerNode"] == {"__typename": "NodeError", "code": "ALREADY_REGISTERED"}

    rotated = data(world.query(
        'mutation($id: String!) { rotateNodeCredentials(input: {nodeId: $id, reason: "yearly",'
        " overlapHours: 1}) { __typename ... on NodeSecretIssued { credentialNumber secret } } }",
        {"id": node_id}))["rotateNodeCredentials"]
    assert rotated["credentialNumber"] == 2 and rotated["secret"] != registered["secret"]

    revoked = data(world.query(
        'mutation($id: String!) { revokeNode(input: {nodeId: $id, reason: "decommissioned"}) {'
        " __typename ... on NodeRevokedSuccess { position { token } } } }",
        {"id": node_id}))["revokeNode"]
    with world.views_in_background():
        node = data(world.query(
            'query($id: String!) { node(nodeId: $id) { nodeId status revokedAt } }',
            {"id": node_id}, role="viewer",
            headers={"X-Tidesync-Wait-For": revoked["position"]["token"]}))["node"]
    assert node["status"] == "REVOKED" and node["revokedAt"] is not None
    history = data(world.query(
        'query($id: ID!) { aggregateHistory(kind: "node", id: $id) { state { state } } }',
        {"id": str(uuid.uuid5(uuid.UUID("6a4e2f10-3b7c-5d9e-8f21-4c6b8a0d2e57"), node_id))},
        role="auditor"))["aggregateHistory"]
    rendered = json.dumps(history)
    assert "aesgcm1:" not in rendered and registered["secret"] not in rendered


def test_an_operator_replays_rejected_events_of_one_class(world: ConsoleWorld):
    node_id = world.ship.node_id
    record = RecordKey.of("shipdb", "no_such_table", {"id": 1})
    source = SourceCoordinates(node_id, 0, "sync.cdc.test.other", 0, 0)
    event_id = event_id_for(source, record, Operation.INSERT)
    event = ChangeEvent(
        event_id=event_id, origin_node_id=node_id, source_connector_id="test",
        source_topic=source.topic, source_partition=0, source_position=0, record=record,
        operation=Operation.INSERT, captured_at=dt.datetime(2019, 11, 1, tzinfo=dt.UTC),
        after={"id": 1}, result_revision=Revision(uuid.uuid4().bytes), source_sequence=1)
    receive(world.pool, node_id, [event])
    world.apply_all()
    summary = data(world.query(
        'query($n: String) { jobSummary(nodeId: $n) { state result errorClass events } }',
        {"n": node_id}, role="viewer"))["jobSummary"]
    assert {"state": "TERMINAL", "result": "REJECTED", "errorClass": "TARGET_SCHEMA",
            "events": 1} in summary

    replay = """mutation($n: String) { replayJobs(input: {errorClass: TARGET_SCHEMA,
      reason: "table created", nodeId: $n}) { __typename
      ... on JobsReplayed { events position { token } } ... on JobError { code } } }"""
    replayed = data(world.query(replay, {"n": node_id}, role="operator"))["replayJobs"]
    assert replayed["__typename"] == "JobsReplayed" and replayed["events"] == 1
    assert replayed["position"]["token"].startswith("apply_jobs:")
    with world.pool.connection() as conn:
        assert conn.execute("SELECT state FROM inbox_event WHERE event_id = %s",
                            (event_id,)).fetchone() == ("PENDING",)
    empty = world.query('mutation { replayJobs(input: {errorClass: DATA, reason: " "}) {'
                        " ... on JobError { code } } }", role="operator")
    assert data(empty)["replayJobs"] == {"code": "REASON_REQUIRED"}


def test_an_operator_rebuilds_a_view_and_it_is_audited(world: ConsoleWorld):
    world.make_conflict()
    rebuilt = data(world.query(
        'mutation { rebuildProjection(input: {name: "conflict_center", reason: "fix"}) {'
        " __typename ... on ProjectionRebuild { view state processed position { token } } } }",
        role="operator"))["rebuildProjection"]
    assert rebuilt["__typename"] == "ProjectionRebuild" and rebuilt["state"] == "COMPLETED"
    assert rebuilt["processed"] >= 1
    views = data(world.query("{ projections { name behind feeds { name application position"
                             " head } } }", role="viewer"))["projections"]
    assert "conflict_center" in {view["name"] for view in views}
    with world.views_in_background():
        audit = data(world.query(
            "{ auditEvents(first: 200, filter: {application: \"operations\"}) {"
            " items { eventType actor reason } } }", role="auditor",
            headers={"X-Tidesync-Wait-For": rebuilt["position"]["token"]}))
    assert {"eventType": "OperatorAction.Completed", "actor": "user:operator-user",
            "reason": "rebuild switched in"} in audit["auditEvents"]["items"]


def test_receipts_page_by_cursor_per_node(world: ConsoleWorld):
    world.make_conflict()
    document = """query($n: String!, $after: String) { receipts(nodeId: $n, first: 1,
      after: $after) { items { seq result eventId } pageInfo { endCursor hasNextPage } } }"""
    seqs: list[int] = []
    after = None
    while True:
        page = data(world.query(document, {"n": world.ship.node_id, "after": after},
                                role="viewer"))["receipts"]
        seqs += [item["seq"] for item in page["items"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert len(seqs) >= 2 and seqs == sorted(set(seqs))
    results = data(world.query('query($n: String!) { receipts(nodeId: $n, first: 200,'
                               " result: CONFLICT_RECORDED) { items { result } } }",
                               {"n": world.ship.node_id}))["receipts"]["items"]
    assert results and {item["result"] for item in results} == {"CONFLICT_RECORDED"}


# ----------------------------------------------------------------------------- limits


def test_page_sizes_are_capped(world: ConsoleWorld):
    body = world.query("{ nodes(first: 1000) { items { nodeId } } }")
    assert error_codes(body) == ["GRAPHQL_VALIDATION_FAILED"]
    assert error_reasons(body) == ["PAGE_TOO_LARGE"]
    body = world.query("query($n: Int) { nodes(first: $n) { items { nodeId } } }", {"n": 1000})
    assert error_codes(body) == ["BAD_USER_INPUT"] and body["data"] is None
    assert error_reasons(body) == ["PAGE_TOO_LARGE"]
    body = world.query("query($n: Int) { nodes(first: $n) { items { nodeId } } }", {"n": 0})
    assert error_reasons(body) == ["PAGE_TOO_LARGE"]


def test_costly_and_alias_heavy_queries_are_refused_before_running(world: ConsoleWorld):
    costly = """{ conflicts(first: 200) { items { detail { evidence { columns {
      shore { value } ship { value } shipBefore { value } } } } } } }"""
    assert error_reasons(world.query(costly)) == ["QUERY_TOO_COSTLY"]
    # 3 aliases here plus 5 in a fragment spread three times: 18, over the default 15
    # (counting the fragment once would give 8).
    aliases = ("fragment F on Query { a: me { name } b: me { name } c: me { name }"
               " d: me { name } e: me { name } }\n"
               "{ ...F x: me { name } ...F y: me { name } ...F z: me { name } }")
    assert error_reasons(world.query(aliases)) == ["TOO_MANY_ALIASES"]


def test_introspection_is_off_unless_configured(world: ConsoleWorld):
    for document in ("{ __schema { types { name } } }", '{ __type(name: "Query") { name } }'):
        body = world.query(document)
        assert body["data"] is None and body["errors"]
    assert data(world.query("{ __typename me { __typename } }"))["__typename"] == "Query"
    page = world.client.get("/graphql", headers={"Accept": "text/html"})
    assert page.status_code == 401  # no GraphiQL page either


def test_queries_over_get_and_oversized_bodies_are_refused(world: ConsoleWorld):
    response = world.client.get("/graphql", params={"query": "{ me { name } }"},
                                headers={"Authorization": f"Bearer {world.tokens['admin']}"})
    assert response.status_code in (400, 405)
    big = "{ me { name } }" + " " * (70 * 1024)
    response = world.post(big, token=world.tokens["admin"])
    assert response.status_code == 413 and error_reasons(response.json()) == ["BODY_TOO_LARGE"]
    for body in (b"[1, 2]", b"\xff\xfe", b"42"):
        response = world.client.post(
            "/graphql", content=body, headers={
                "Authorization": f"Bearer {world.tokens['admin']}",
                "Content-Type": "application/json"})
        assert response.status_code == 400


def test_unexpected_failures_are_masked_and_logged_with_an_id(world: ConsoleWorld, caplog):
    with world.pool.connection() as conn:
        conn.execute("ALTER TABLE conflict_center RENAME TO conflict_center_away")
        conn.commit()
    try:
        with caplog.at_level(logging.ERROR, logger="tidesync.graphql.errors"):
            response = world.post("{ conflicts { items { conflictId } } }",
                                  token=world.tokens["viewer"])
    finally:
        with world.pool.connection() as conn:
            conn.execute("ALTER TABLE conflict_center_away RENAME TO conflict_center")
            conn.commit()
    assert response.status_code == 200
    error = response.json()["errors"][0]
    assert error["message"] == "internal error"
    assert error["extensions"]["code"] == "INTERNAL_SERVER_ERROR"
    for leak in ("conflict_center", "relation", "SELECT", "Traceback", "psycopg"):
        assert leak not in response.text
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert error["extensions"]["errorId"] in logged and "UndefinedTable" in logged


def test_errors_about_the_request_carry_a_code(world: ConsoleWorld):
    assert error_codes(world.query("{ me { name ")) == ["GRAPHQL_PARSE_FAILED"]
    assert error_codes(world.query("{ me { nonsense } }")) == ["GRAPHQL_VALIDATION_FAILED"]
    body = world.query("query($n: Int) { nodes(first: $n) { items { nodeId } } }",
                       {"n": "many"})
    assert error_codes(body) == ["GRAPHQL_VALIDATION_FAILED"]


def test_privileged_reads_are_recorded_as_operator_actions(world: ConsoleWorld):
    conflict_id = world.make_conflict()
    viewer = data(world.query(CONFLICT_DETAIL, {"id": conflict_id}, role="viewer"))
    assert viewer["conflict"]["comparison"]
    data(world.query(CONFLICT_DETAIL, {"id": conflict_id}, role="approver"))
    world.run_views()

    actions = data(world.query(
        '{ auditEvents(first: 200, filter: {application: "operations",'
        ' eventType: "OperatorAction.Requested"}) { items { actor reason aggregateId } } }',
        role="auditor"))["auditEvents"]["items"]
    assert not [a for a in actions if a["actor"] == "user:viewer-user"]  # no values shown
    approver = [a for a in actions if a["actor"] == "user:approver-user"]
    assert approver and {a["reason"] for a in approver} == {"console query"}
    states = [data(world.query(
        'query($id: ID!) { aggregateHistory(kind: "operator_action", id: $id) {'
        " state { state } } }", {"id": a["aggregateId"]}, role="auditor"))[
        "aggregateHistory"]["state"]["state"] for a in approver]
    assert {"action": "read_conflict_evidence", "target": conflict_id} in [
        {"action": s["action"], "target": s["target"]} for s in states]


def test_a_nodes_eta_rests_on_its_reported_backlog_and_throughput(world: ConsoleWorld):
    node_id = f"it-console-eta-{uuid.uuid4().hex[:6]}"
    registered = data(world.query(
        'mutation($id: String!) { registerNode(input: {nodeId: $id, reason: "new ship"}) {'
        " ... on NodeSecretIssued { position { token } } } }", {"id": node_id}))["registerNode"]
    world.console.node_service(sealing=False).change_link(
        node_id, NodeLink.of(128 * 1024), Actor("ops", "VSAT plan"), dt.datetime.now(dt.UTC))
    query = """query($id: String!) { node(nodeId: $id) { eta { remainingBytes confidence
      effectiveBytesPerSecond physicalBytesPerSecond inflowBytesPerSecond
      netDrainBytesPerSecond uplinkLimitBytesPerSecond transferSeconds p50 p90 reason } } }"""
    with world.views_in_background():
        eta = data(world.query(query, {"id": node_id}, role="viewer", headers={
            "X-Tidesync-Wait-For": registered["position"]["token"]}))["node"]["eta"]
    assert (eta["confidence"], eta["remainingBytes"], eta["p50"]) == ("NONE", None, None)
    assert "no backlog" in eta["reason"] and eta["uplinkLimitBytesPerSecond"] == 131072

    # Twenty minutes of heartbeats: 60 KB confirmed a minute (66 KB sent), the backlog from
    # 3.0 MB down to 2.73 MB across two partitions while 1.2 MB was confirmed.
    with world.pool.connection() as conn:
        for minute in range(1, 21):
            conn.execute(
                "INSERT INTO metric_sample (node_id, sampled_at, dimension, kind, direction,"
                " received_at, window_seconds, payload_bytes_confirmed, physical_bytes,"
                " active_transfer_seconds) VALUES (%s, now() - %s * interval '1 minute',"
                " 'THROUGHPUT/UPLINK/60', 'THROUGHPUT', 'UPLINK',"
                " now() - %s * interval '1 minute', 60, 60000, 66000, 60)",
                (node_id, minute, minute))
        for minute, halves in ((20, 1_500_000), (0, 1_365_000)):
            for partition in (0, 1):
                conn.execute(
                    "INSERT INTO metric_sample (node_id, sampled_at, dimension, kind, direction,"
                    " received_at, topic, source_partition, backlog_bytes,"
                    " estimated_compressed_bytes) VALUES (%s, now() - %s * interval '1 minute',"
                    " %s, 'BACKLOG', 'UPLINK', now() - %s * interval '1 minute', 'sync.cdc.x',"
                    " %s, %s, %s)",
                    (node_id, minute, f"BACKLOG/UPLINK/sync.cdc.x/{partition}", minute,
                     partition, halves * 4, halves))
    eta = data(world.query(query, {"id": node_id}, role="viewer"))["node"]["eta"]
    assert eta["confidence"] == "NORMAL" and eta["remainingBytes"] == 2_730_000
    assert (eta["effectiveBytesPerSecond"], eta["physicalBytesPerSecond"]) == (1000.0, 1100.0)
    assert abs(eta["inflowBytesPerSecond"] - 775.0) < 1e-6
    assert abs(eta["netDrainBytesPerSecond"] - 225.0) < 1e-6
    assert abs(eta["transferSeconds"] - 2_730_000 / 225) < 0.01
    assert eta["p50"] is not None and eta["p90"] is not None


def test_an_eta_counts_only_the_hours_the_backlogs_rules_may_send(world: ConsoleWorld):
    node_id = f"it-console-eta-{uuid.uuid4().hex[:6]}"
    with world.pool.connection() as conn:
        # Ten minutes of heartbeats at 1,000 B/s of payload; 7.2 MB left (two hours of
        # transfer), all of it the `noon` rule's; the node reads its schedules in Oslo time.
        conn.execute("INSERT INTO node_heartbeat (node_id, received_at, sent_at,"
                     " protocol_version, client_version, active_config_version, health,"
                     " timezone) VALUES (%s, now(), now(), '1.0', 't', '', '[]',"
                     " 'Europe/Oslo')", (node_id,))
        for minute in range(1, 11):
            conn.execute(
                "INSERT INTO metric_sample (node_id, sampled_at, dimension, kind, direction,"
                " received_at, window_seconds, payload_bytes_confirmed, physical_bytes,"
                " active_transfer_seconds) VALUES (%s, now() - %s * interval '1 minute',"
                " 'THROUGHPUT', 'THROUGHPUT', 'UPLINK', now() - %s * interval '1 minute', 60,"
                " 60000, 60000, 60)", (node_id, minute, minute))
        conn.execute(
            "INSERT INTO metric_sample (node_id, sampled_at, dimension, kind, direction,"
            " received_at, topic, source_partition, rule_id, backlog_bytes,"
            " estimated_compressed_bytes) VALUES (%s, now(), 'BACKLOG', 'BACKLOG', 'UPLINK',"
            " now(), 'sync.cdc.x', 0, 'noon', 30000000, 7200000)", (node_id,))
    anytime = fetch_eta(world.pool, node_id)
    assert anytime.transfer_seconds == 7200.0 and not anytime.within_windows
    assert anytime.p50 == anytime.computed_at + dt.timedelta(hours=2)
    # One open hour a day in Oslo, starting two to three hours from now (on the hour): the
    # second hour of transfer ends when that window closes tomorrow.
    oslo = zoneinfo.ZoneInfo("Europe/Oslo")
    opens = (anytime.computed_at.astimezone(oslo) + dt.timedelta(hours=3)).hour
    window = f"{opens:02d}:00-{(opens + 1) % 24:02d}:00"
    daily = fetch_eta(world.pool, node_id, lambda: {"noon": window})
    assert daily.within_windows and daily.p50 is not None
    local = daily.p50.astimezone(oslo)
    assert (local.hour, local.minute) == ((opens + 1) % 24, 0)
    assert dt.timedelta(days=1) < daily.p50 - daily.computed_at < dt.timedelta(days=2)
    # A rule without a schedule holding backlog: the link may carry it at any time.
    assert not fetch_eta(world.pool, node_id, lambda: {"noon": ""}).within_windows


def test_an_admin_sets_a_nodes_uplink_limit_its_eta_shows(world: ConsoleWorld):
    node_id = f"it-console-uplink-{uuid.uuid4().hex[:6]}"
    data(world.query('mutation($id: String!) { registerNode(input: {nodeId: $id, reason: "new"})'
                     " { __typename } }", {"id": node_id}))
    set_uplink = """mutation($id: String!, $rate: Int!, $reason: String!) {
      setNodeUplink(input: {nodeId: $id, rateBytesPerSecond: $rate, reason: $reason}) {
        __typename ... on NodeUplinkSet { rateBytesPerSecond burstBytes position { token } }
        ... on NodeError { code message } } }"""
    done = data(world.query(set_uplink, {"id": node_id, "rate": 131072, "reason": "VSAT plan"}))[
        "setNodeUplink"]
    assert done["__typename"] == "NodeUplinkSet"
    assert (done["rateBytesPerSecond"], done["burstBytes"]) == (131072, 16384)
    refused = data(world.query(set_uplink, {"id": node_id, "rate": 100, "reason": "typo"}))[
        "setNodeUplink"]
    assert refused["code"] == "INVALID_UPLINK" and "1024" in refused["message"]
    unexplained = data(world.query(set_uplink, {"id": node_id, "rate": 65536, "reason": " "}))[
        "setNodeUplink"]
    assert unexplained["code"] == "REASON_REQUIRED"
    with world.views_in_background():
        eta = data(world.query(
            'query($id: String!) { node(nodeId: $id) { eta { uplinkLimitBytesPerSecond } } }',
            {"id": node_id}, role="viewer",
            headers={"X-Tidesync-Wait-For": done["position"]["token"]}))["node"]["eta"]
    assert eta["uplinkLimitBytesPerSecond"] == 131072
