"""Rule releases in the GraphQL console on real PostgreSQL: who may draft, validate, approve,
publish and roll back; four-eyes; the answers' codes; and a rule with its history and where it
runs. The shore target is a SQLite file (rule validation reads its tables' schemas)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.integration.console_support import (
    MASTER_KEY,
    TEST_SETTINGS,
    config_for,
    data,
    small_pools,
)
from tidesync.apps.master_key import SecretBox
from tidesync.apps.settings import RulesSettings
from tidesync.apps.users import UsersApplication, UserService
from tidesync.bootstrap.console import console_digest_key, console_stores
from tidesync.bootstrap.rules import shore_schemas
from tidesync.config import TargetConfig
from tidesync.domain.rules.release import NodeActivation
from tidesync.domain.user import Role
from tidesync.entrypoints.http import create_app
from tidesync.graphql.console import Console
from tidesync.localservices import PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.target.contract import TargetApplier

pytestmark = pytest.mark.services

REPORTED = dt.datetime.now(dt.UTC).replace(microsecond=0)


class Reports:
    """Per-node activation reports as the heartbeat store answers them (in memory)."""

    def activations(self, rule_id: str) -> list[NodeActivation]:
        return [NodeActivation("ship-2", 0, 1, "RULE_FAILED", ("no column rank",), REPORTED),
                NodeActivation("ship-1", 1, 1, "RULE_VALID", (), REPORTED)]


@dataclasses.dataclass
class RulesConsole:
    client: TestClient
    tokens: dict[str, str]
    shore: Console

    def query(self, query: str, variables: dict[str, Any] | None = None,
              role: str = "admin") -> dict[str, Any]:
        response = self.client.post("/graphql", json={"query": query,
                                                      "variables": variables or {}},
                                    headers={"Authorization": f"Bearer {self.tokens[role]}"})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def no_target() -> TargetApplier:
    raise AssertionError("rule commands never apply rows")


@pytest.fixture(scope="module")
def console(pg_database, tmp_path_factory) -> Iterator[RulesConsole]:
    database = PostgresDatabase().create()
    target = Path(tmp_path_factory.mktemp("shore")) / "shore.sqlite"
    with contextlib.closing(sqlite3.connect(target)) as connection:
        connection.execute("CREATE TABLE crew (id INTEGER PRIMARY KEY, name TEXT, rank TEXT)")
        connection.commit()
    try:
        migrate_postgres(database.dsn)
        env = {**database.eventsourcing_env(), **RulesSettings(four_eyes=True).env()}
        stores = dataclasses.replace(
            console_stores(env, database.dsn, no_target, lambda: SecretBox(MASTER_KEY),
                           lambda: console_digest_key(MASTER_KEY)),
            rule_schemas=lambda: shore_schemas(TargetConfig(sqlite_path=str(target))),
            rule_activations=lambda pool: Reports())
        shore = Console(TEST_SETTINGS, stores)
        config = dataclasses.replace(config_for(database), console=TEST_SETTINGS)
        with TestClient(create_app(config, console=shore)) as client:
            users = UsersApplication(env=small_pools(database.eventsourcing_env()))
            service = UserService(users)
            tokens = {role.value: service.add(f"{role.value}-user", role, "test",
                                              "console test user").token for role in Role}
            tokens["operator2"] = service.add("operator-two", Role.OPERATOR, "test",
                                              "a second operator").token
            users.close()
            yield RulesConsole(client, tokens, shore)
    finally:
        database.drop()


DOCUMENT = """
id = "{rule_id}"
direction = "UPLINK"
source = "shipdb.crew"
key = ["id"]
[select]
groups = ["tankers"]
"""

DRAFT = """mutation($d: String!, $r: String!) { draftRule(input: {document: $d, reason: $r}) {
  __typename ... on RuleReleaseChanged { ruleId version status problems position { token } }
  ... on RuleError { code message } } }"""
VERSION_FIELDS = """{ __typename ... on RuleReleaseChanged { ruleId version status problems }
  ... on RuleError { code message } } }"""
VALIDATE = ("mutation($id: String!, $v: Int!, $r: String!, $s: Boolean!) {"
            " validateRule(input: {ruleId: $id, version: $v, reason: $r, static: $s})"
            + VERSION_FIELDS)
APPROVE = ("mutation($id: String!, $v: Int!, $r: String!) {"
           " approveRule(input: {ruleId: $id, version: $v, reason: $r})" + VERSION_FIELDS)
PUBLISH = APPROVE.replace("approveRule", "publishRule")
ROLLBACK = """mutation($id: String!, $r: String!) { rollbackRule(input: {ruleId: $id, reason: $r})
  { __typename ... on RuleRolledBack { fromVersion toVersion } ... on RuleError { code } } }"""
RULE = """query($id: String!, $v: Int) { rule(id: $id, version: $v) { ruleId version status
  author checksum problems content history { status actor reason }
  activations { nodeId activeVersion candidateVersion validation problems } } }"""
RULES = "{ rules { ruleId latestVersion latestStatus offeredVersion offeredStatus } }"


def new_rule_id() -> str:
    return f"crew-{secrets.token_hex(4)}"


def draft(console: RulesConsole, rule_id: str, role: str = "operator",
          text: str = DOCUMENT) -> dict[str, Any]:
    answer: dict[str, Any] = data(console.query(
        DRAFT, {"d": text.format(rule_id=rule_id), "r": "new rule"}, role))["draftRule"]
    return answer


def command(console: RulesConsole, query: str, role: str, **variables: Any) -> dict[str, Any]:
    body = console.query(query, {"r": "because", **variables}, role)
    answer: dict[str, Any] = next(iter(data(body).values()))
    return answer


def forbidden(console: RulesConsole, query: str, variables: dict[str, Any], role: str) -> bool:
    body = console.query(query, variables, role)
    return body["data"] is None and body["errors"][0]["extensions"]["code"] == "FORBIDDEN"


def test_roles_draft_validate_approve_and_publish_with_four_eyes(console: RulesConsole):
    rule_id = new_rule_id()
    text = {"d": DOCUMENT.format(rule_id=rule_id), "r": "x"}
    for role in ("viewer", "approver", "auditor"):
        assert forbidden(console, DRAFT, text, role)
    drafted = draft(console, rule_id)
    assert drafted["__typename"] == "RuleReleaseChanged"
    assert (drafted["version"], drafted["status"]) == (1, "DRAFT")
    assert drafted["position"]["token"].startswith("rule_releases:")

    ids = {"id": rule_id, "v": 1}
    assert forbidden(console, VALIDATE, {**ids, "r": "x", "s": False}, "approver")
    validated = command(console, VALIDATE, "operator", **ids, s=False)
    assert (validated["status"], validated["problems"]) == ("VALIDATED", [])
    assert forbidden(console, APPROVE, {**ids, "r": "x"}, "operator")
    approved = command(console, APPROVE, "approver", **ids)
    assert approved["status"] == "APPROVED"
    assert forbidden(console, PUBLISH, {**ids, "r": "x"}, "approver")
    published = command(console, PUBLISH, "operator", **ids)
    assert published["status"] == "DISTRIBUTING"

    listed = {row["ruleId"]: row for row in data(console.query(RULES, role="viewer"))["rules"]}
    assert listed[rule_id] == {"ruleId": rule_id, "latestVersion": 1,
                               "latestStatus": "DISTRIBUTING", "offeredVersion": 1,
                               "offeredStatus": "DISTRIBUTING"}
    shown = data(console.query(RULE, {"id": rule_id}, "viewer"))["rule"]
    assert shown["content"]["select"]["groups"] == ["tankers"]
    assert shown["author"] == "user:operator-user"
    assert [(h["status"], h["actor"]) for h in shown["history"]] == [
        ("DRAFT", "user:operator-user"), ("VALIDATED", "user:operator-user"),
        ("APPROVED", "user:approver-user"), ("DISTRIBUTING", "user:operator-user")]
    assert [(a["nodeId"], a["validation"], a["problems"]) for a in shown["activations"]] == [
        ("ship-1", "RULE_VALID", []), ("ship-2", "RULE_FAILED", ["no column rank"])]


def test_the_author_cannot_approve_with_four_eyes(console: RulesConsole):
    rule_id = new_rule_id()
    draft(console, rule_id, role="admin")
    command(console, VALIDATE, "admin", id=rule_id, v=1, s=True)
    refused = command(console, APPROVE, "admin", id=rule_id, v=1)
    assert refused["__typename"] == "RuleError" and refused["code"] == "FOUR_EYES"
    assert command(console, APPROVE, "approver", id=rule_id, v=1)["status"] == "APPROVED"


def test_validation_against_the_shore_table_keeps_a_misfit_draft(console: RulesConsole):
    rule_id = new_rule_id()
    draft(console, rule_id, text=DOCUMENT.replace('key = ["id"]', 'key = ["crew_no"]'))
    failed = command(console, VALIDATE, "operator", id=rule_id, v=1, s=False)
    assert failed["status"] == "DRAFT"
    assert failed["problems"] == ["key: no column crew_no in shipdb.crew"]
    shown = data(console.query(RULE, {"id": rule_id, "v": 1}))["rule"]
    assert shown["problems"] == failed["problems"] and shown["status"] == "DRAFT"


def test_refusals_are_answered_as_data_with_codes(console: RulesConsole):
    rule_id = new_rule_id()
    bad = data(console.query(DRAFT, {"d": "id = ", "r": "x"}, "operator"))["draftRule"]
    assert bad["__typename"] == "RuleError" and bad["code"] == "INVALID_RULE"
    blank = data(console.query(DRAFT, {"d": DOCUMENT.format(rule_id=rule_id), "r": " "},
                               "operator"))["draftRule"]
    assert blank["code"] == "REASON_REQUIRED"
    draft(console, rule_id)
    early = command(console, PUBLISH, "operator", id=rule_id, v=1)
    assert early["code"] == "RELEASE_STATE" and "only a APPROVED" in early["message"]
    assert command(console, APPROVE, "approver", id=rule_id, v=9)["code"] == "NOT_FOUND"
    assert command(console, ROLLBACK, "operator", id=rule_id)["code"] == "NOTHING_TO_ROLL_BACK"
    assert data(console.query(RULE, {"id": "never-drafted"}))["rule"] is None
    huge = "# " + "x" * 70_000
    response = console.client.post(
        "/graphql", json={"query": DRAFT, "variables": {"d": huge, "r": "x"}},
        headers={"Authorization": f"Bearer {console.tokens['operator']}"})
    assert response.status_code == 413
    nul = console.client.post(
        "/graphql", json={"query": DRAFT, "variables": {"d": "id = \"a\x00\"", "r": "x"}},
        headers={"Authorization": f"Bearer {console.tokens['operator']}"})
    assert nul.status_code == 400 and "NUL" in nul.text


def test_rollback_returns_to_the_active_version(console: RulesConsole):
    rule_id = new_rule_id()
    for version in (1, 2):
        draft(console, rule_id)
        command(console, VALIDATE, "operator", id=rule_id, v=version, s=True)
        command(console, APPROVE, "approver", id=rule_id, v=version)
        assert command(console, PUBLISH, "operator2", id=rule_id, v=version)["status"] == \
            "DISTRIBUTING"
        if version == 1:
            refused = command(console, PUBLISH, "operator", id=rule_id, v=1)
            assert refused["code"] == "RELEASE_STATE"
            # What the shore worker does once every selected node runs the version.
            console.shore.rule_releases().mark_active(rule_id, 1, "system:rules", "all run it")
    assert forbidden(console, ROLLBACK, {"id": rule_id, "r": "x"}, "approver")
    rolled = command(console, ROLLBACK, "operator", id=rule_id)
    assert rolled == {"__typename": "RuleRolledBack", "fromVersion": 2, "toVersion": 1}
    listed = {row["ruleId"]: row for row in data(console.query(RULES))["rules"]}
    assert (listed[rule_id]["offeredVersion"], listed[rule_id]["offeredStatus"]) == (
        1, "ROLLBACK_TARGET")
