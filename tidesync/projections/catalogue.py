"""tidesync's read side as registered: its applications, aggregate kinds and views.

The audit view follows every application listed here, and `audit history` knows every kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eventsourcing.application import Application

from tidesync.apps.apply_jobs import ApplyJobsApplication
from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.apps.downlink import DownlinkApplication
from tidesync.apps.nodes import NodesApplication
from tidesync.apps.operations import OperationsApplication
from tidesync.apps.recorder import open_application
from tidesync.apps.rules import RuleReleasesApplication
from tidesync.apps.users import UsersApplication
from tidesync.domain.conflict_case import key_digest
from tidesync.projections.audit import AuditProjection
from tidesync.projections.backlog import BacklogProjection, BacklogRefresher
from tidesync.projections.conflict_center import (
    ConflictCenterProjection,
    decision_summary,
    evidence_summary,
)
from tidesync.projections.engine import Projection
from tidesync.projections.node_overview import NodeHeartbeatRefresher, NodeOverviewProjection
from tidesync.projections.receipts import ReceiptsProjection
from tidesync.projections.record_head import RecordHeadDecisionsProjection, RecordHeadProjection
from tidesync.projections.registry import (
    AggregateKind,
    ApplicationSpec,
    Catalogue,
    ViewContext,
    ViewSettings,
    ViewSpec,
)
from tidesync.projections.states import digest

APPLY_JOBS, CONFLICT_CASES, NODES, OPERATIONS, DOWNLINK, USERS = (
    "apply_jobs", "conflict_cases", "nodes", "operations", "downlink", "users")
RULE_RELEASES = RuleReleasesApplication.name


def default_catalogue(settings: ViewSettings | None = None) -> Catalogue:
    """Everything tidesync's read side knows, with `settings` (processes pass the configured
    ones, `tidesync.bootstrap.shore.view_settings`; default: the configuration's defaults)."""
    catalogue = Catalogue(settings or ViewSettings())
    for spec in _applications():
        catalogue.add_application(spec)
    for kind in _kinds():
        catalogue.add_kind(kind)
    for view in _views():
        catalogue.add_view(view)
    return catalogue


# ----------------------------------------------------------------------------- applications


def _open_apply_jobs(env: Mapping[str, str]) -> Application[Any]:
    return open_application(ApplyJobsApplication, env)


def _open_conflict_cases(env: Mapping[str, str]) -> Application[Any]:
    return open_application(ConflictCasesApplication, env)


def _open_nodes(env: Mapping[str, str]) -> Application[Any]:
    return NodesApplication(env=dict(env))


def _open_users(env: Mapping[str, str]) -> Application[Any]:
    return UsersApplication(env=dict(env))


def _open_downlink(env: Mapping[str, str]) -> Application[Any]:
    return open_application(DownlinkApplication, env)


def _open_operations(env: Mapping[str, str]) -> Application[Any]:
    return OperationsApplication(env=dict(env))


def _open_rule_releases(env: Mapping[str, str]) -> Application[Any]:
    return RuleReleasesApplication(env=dict(env))


def _applications() -> list[ApplicationSpec]:
    return [ApplicationSpec(APPLY_JOBS, _open_apply_jobs),
            ApplicationSpec(CONFLICT_CASES, _open_conflict_cases),
            ApplicationSpec(NODES, _open_nodes),
            ApplicationSpec(OPERATIONS, _open_operations),
            ApplicationSpec(DOWNLINK, _open_downlink),
            ApplicationSpec(USERS, _open_users),
            ApplicationSpec(RULE_RELEASES, _open_rule_releases)]


# ----------------------------------------------------------------------------- kinds


def render_results(results: object) -> object:
    """ApplyJob results without record keys: each key becomes its digest (as record_head
    and conflict cases carry it)."""
    if not isinstance(results, Mapping):
        return {"sha256": digest(results)}
    shown: dict[str, object] = {}
    for event_id, result in results.items():
        if not isinstance(result, Mapping):
            shown[str(event_id)] = {"sha256": digest(result)}
            continue
        row = {key: value for key, value in result.items() if key != "record_key"}
        record_key = result.get("record_key")
        row["key_digest"] = (key_digest(str(result.get("rule_id") or ""), str(record_key))
                             if record_key else None)
        shown[str(event_id)] = row
    return shown


def render_credentials(credentials: object) -> object:
    """Node credentials without their sealed secrets (a digest each)."""
    if not isinstance(credentials, Sequence) or isinstance(credentials, str):
        return {"sha256": digest(credentials)}
    shown: list[object] = []
    for credential in credentials:
        if isinstance(credential, Mapping):
            row = {key: value for key, value in credential.items() if key != "sealed_secret"}
            row["sealed_secret_sha256"] = digest(credential.get("sealed_secret"))
            shown.append(row)
        else:
            shown.append({"sha256": digest(credential)})
    return shown


def render_ack(ack: object) -> object:
    """A ship's answer with the row it reported as a digest."""
    if not isinstance(ack, Mapping):
        return ack
    shown = {key: value for key, value in ack.items() if key != "current_row"}
    shown["current_row_sha256"] = digest(ack.get("current_row"))
    return shown


def _kinds() -> list[AggregateKind]:
    return [
        AggregateKind("apply_job", APPLY_JOBS, "tidesync.domain.apply_job:ApplyJob",
                      {"results": render_results}),
        AggregateKind("conflict_case", CONFLICT_CASES,
                      "tidesync.domain.conflict_case:ConflictCase",
                      {"evidence": evidence_summary, "decision": decision_summary}),
        AggregateKind("node", NODES, "tidesync.domain.node:Node",
                      {"credentials": render_credentials}),
        AggregateKind("operator_action", OPERATIONS,
                      "tidesync.domain.operator_action:OperatorAction"),
        AggregateKind("downlink_command", DOWNLINK,
                      "tidesync.domain.downlink_command:DownlinkCommand",
                      {"ack": render_ack}, sensitive=frozenset({"payload_json"})),
        # A user's token shows only as a digest of its digest.
        AggregateKind("user", USERS, "tidesync.domain.user:User",
                      sensitive=frozenset({"token_digest"})),
        AggregateKind("admin_roster", USERS, "tidesync.domain.user:AdminRoster"),
        AggregateKind("rule_release", RULE_RELEASES,
                      "tidesync.domain.rules.release:RuleRelease"),
        AggregateKind("rule_versions", RULE_RELEASES,
                      "tidesync.domain.rules.release:RuleVersions"),
    ]


# ----------------------------------------------------------------------------- views


def _receipts(context: ViewContext) -> Sequence[tuple[str, Projection]]:
    return [(APPLY_JOBS, ReceiptsProjection(context.table("receipt")))]


def _record_head(context: ViewContext) -> Sequence[tuple[str, Projection]]:
    head, decisions = context.table("record_head"), context.table("record_head_decision")
    return [(APPLY_JOBS, RecordHeadProjection(head, decisions)),
            (CONFLICT_CASES, RecordHeadDecisionsProjection(
                context.apps[CONFLICT_CASES], head, decisions))]


def _conflict_center(context: ViewContext) -> Sequence[tuple[str, Projection]]:
    return [(CONFLICT_CASES, ConflictCenterProjection(
        context.apps[CONFLICT_CASES], context.table("conflict_center"),
        context.settings.conflict_sla))]


def _node_overview(context: ViewContext) -> Sequence[tuple[str, Projection]]:
    return [(NODES, NodeOverviewProjection(context.apps[NODES],
                                           context.table("node_overview")))]


def _backlog(context: ViewContext) -> Sequence[tuple[str, Projection]]:
    # Counted in their rules' classes when the rule releases are open beside the jobs.
    rules = context.apps.get(RULE_RELEASES)
    return [(APPLY_JOBS, BacklogProjection(
        context.table("backlog"), context.table("backlog_event"), context.table("backlog_job"),
        rules if isinstance(rules, RuleReleasesApplication) else None))]


def _audit(context: ViewContext) -> Sequence[tuple[str, Projection]]:
    return [(spec.name, AuditProjection(spec.name, context.apps[spec.name],
                                        context.catalogue.kind_name,
                                        context.table("audit_event")))
            for spec in context.catalogue.applications]


def _views() -> list[ViewSpec]:
    return [
        ViewSpec("receipts", ("receipt",), _receipts,
                 description="terminal results in the order ships pull them",
                 applications=(APPLY_JOBS,)),
        ViewSpec("record_head", ("record_head", "record_head_decision"), _record_head,
                 description="current revision, origin and tombstone of each record"
                             " (applied results and decisions applied on the shore)",
                 applications=(APPLY_JOBS, CONFLICT_CASES), primary=APPLY_JOBS),
        ViewSpec("conflict_center", ("conflict_center",), _conflict_center,
                 description="conflict cases with evidence summaries and SLA",
                 applications=(CONFLICT_CASES,)),
        ViewSpec("node_overview", ("node_overview",), _node_overview,
                 lambda context: NodeHeartbeatRefresher(context.table("node_overview")),
                 description="node status and what its latest heartbeat reported",
                 applications=(NODES,)),
        ViewSpec("backlog", ("backlog", "backlog_event", "backlog_job"), _backlog,
                 lambda context: BacklogRefresher(context.table("backlog"),
                                                  context.table("backlog_event")),
                 description="events by node, direction, rule, priority and state"
                             " (plus the inbox and heartbeats)",
                 applications=(APPLY_JOBS,)),
        ViewSpec("audit", ("audit_event",), _audit,
                 description="operator actions of every application"),
    ]
