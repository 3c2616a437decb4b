"""`tidesync rules …`: draft, validate, approve, publish and roll back sync rule versions, and
see them and where they run (§8.2).

`register_commands` is called by `tidesync.entrypoints.cli` while it builds the parser.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from eventsourcing.persistence import PersistenceError

from tidesync.apps.rules import (
    MAX_DOCUMENT_BYTES,
    RuleReleasesApplication,
    RuleSummary,
    parse_release_ref,
    rule_from_toml,
)
from tidesync.bootstrap.rules import open_activation_reports, open_rule_releases, shore_schemas
from tidesync.config import Config, load_config
from tidesync.domain.errors import TidesyncError
from tidesync.domain.rules.release import NodeActivation, RuleActivationReports, RuleRelease
from tidesync.entrypoints.operator import actor_of, add_audit_arguments

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

Run = Callable[[RuleReleasesApplication, argparse.Namespace], int]


def register_commands(commands: Commands) -> None:
    """Add `rules draft|validate|approve|publish|rollback|list|show|status`."""
    rules = commands.add_parser("rules", help="draft, validate, approve, publish and roll back"
                                              " sync rules")
    sub = rules.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    sub.required = True

    draft = sub.add_parser("draft", help="store a rule file as the next version of its rule")
    draft.add_argument("file", metavar="FILE.toml", help="the rule file (docs/rules_releases.md)")
    add_audit_arguments(draft, default_reason="draft rule", what="drafts it")
    draft.set_defaults(handler=_handler(_run_draft))

    validate = sub.add_parser("validate", help="check a DRAFT version (newest if no @VERSION)"
                                               " against itself and the shore's table")
    validate.add_argument("ref", metavar="ID[@VERSION]")
    validate.add_argument("--static", action="store_true",
                          help="check only the rule itself, not the shore target's table")
    add_audit_arguments(validate, default_reason="validate rule", what="validates it")
    validate.set_defaults(handler=_handler(_run_validate))

    for name, text, handler in (
            ("approve", "approve a VALIDATED version", _run_approve),
            ("publish", "offer an APPROVED version to the ships it selects", _run_publish)):
        command = sub.add_parser(name, help=text)
        command.add_argument("ref", metavar="ID@VERSION")
        add_audit_arguments(command, default_reason=None)
        command.set_defaults(handler=_handler(handler))

    rollback = sub.add_parser("rollback", help="withdraw the offered version and offer the one"
                                               " active before it again")
    rollback.add_argument("rule_id", metavar="ID")
    add_audit_arguments(rollback, default_reason=None)
    rollback.set_defaults(handler=_handler(_run_rollback))

    listing = sub.add_parser("list", help="every rule: newest version and what ships run")
    listing.add_argument("--json", action="store_true", help="print JSON lines")
    listing.set_defaults(handler=_handler(_run_list))

    show = sub.add_parser("show", help="a rule's versions, or one version in full")
    show.add_argument("ref", metavar="ID[@VERSION]")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_handler(_run_show))

    status = sub.add_parser("status", help="the offered version and what each node reports")
    status.add_argument("rule_id", metavar="ID")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=_handler(_run_status))


# ----------------------------------------------------------------------------- commands


def _run_draft(app: RuleReleasesApplication, args: argparse.Namespace) -> int:
    rule = app.draft(rule_from_toml(_read_rule_file(args.file)), actor_of(args), args.reason,
                     _trace())
    print(f"drafted {rule.rule_id}@{rule.version} (DRAFT); next: tidesync rules validate"
          f" {rule.rule_id}@{rule.version}")
    return 0


def _run_validate(app: RuleReleasesApplication, args: argparse.Namespace) -> int:
    rule_id, version = _ref(app, args.ref)
    with contextlib.ExitStack() as stack:
        schema = None if args.static else stack.enter_context(shore_schemas(args.cfg.target))
        problems = app.validate(rule_id, version, actor_of(args), args.reason, schema, _trace())
    if problems:
        print(f"{rule_id}@{version} stays DRAFT: {len(problems)} problem(s)", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    checked = "the rule itself" if args.static else "the rule and the shore's table"
    print(f"{rule_id}@{version} VALIDATED ({checked})")
    return 0


def _run_approve(app: RuleReleasesApplication, args: argparse.Namespace) -> int:
    rule_id, version = _exact_ref(args.ref)
    app.approve(rule_id, version, actor_of(args), args.reason, _trace())
    print(f"{rule_id}@{version} APPROVED")
    return 0


def _run_publish(app: RuleReleasesApplication, args: argparse.Namespace) -> int:
    rule_id, version = _exact_ref(args.ref)
    app.publish(rule_id, version, actor_of(args), args.reason, _trace())
    print(f"{rule_id}@{version} DISTRIBUTING: ships it selects are offered it; it becomes"
          " ACTIVE when every one of them runs it")
    return 0


def _run_rollback(app: RuleReleasesApplication, args: argparse.Namespace) -> int:
    rule_id = args.rule_id
    left, target = app.rollback(rule_id, actor_of(args), args.reason, _trace())
    if target is None:
        print(f"{rule_id}@{left} SUPERSEDED; no version was active before it, so ships are"
              f" offered no version of {rule_id} now")
    else:
        print(f"{rule_id}@{left} SUPERSEDED; {rule_id}@{target} ROLLBACK_TARGET: offered again"
              " until every selected node runs it")
    return 0


def _run_list(app: RuleReleasesApplication, args: argparse.Namespace) -> int:
    summaries = app.list()
    if args.json:
        for summary in summaries:
            print(json.dumps(_summary_json(summary)))
        return 0
    if not summaries:
        print("no rules drafted yet")
        return 0
    print(f"{'RULE':<32} {'NEWEST':>6} {'STATUS':<16} {'OFFERED':>7} {'STATUS':<16} CHANGED")
    for s in summaries:
        offered = "-" if s.offered_version is None else str(s.offered_version)
        print(f"{s.rule_id:<32} {s.latest_version:>6} {s.latest_status.value:<16} {offered:>7}"
              f" {s.offered_status.value if s.offered_status else '-':<16}"
              f" {s.changed_at.isoformat()}")
    return 0


def _run_show(app: RuleReleasesApplication, args: argparse.Namespace) -> int:
    rule_id, version = parse_release_ref(args.ref)
    if version is not None:
        release = app.release(rule_id, version)
        if args.json:
            print(json.dumps(release_json(release), indent=2))
        else:
            _print_release(release)
        return 0
    releases = app.releases(rule_id)
    if args.json:
        print(json.dumps([release_json(release) for release in releases], indent=2))
        return 0
    print(f"{'VERSION':>7} {'STATUS':<16} {'AUTHOR':<24} {'CHECKSUM':<16} CHANGED")
    for release in releases:
        print(f"{release.rule_version:>7} {release.status.value:<16} {release.author:<24}"
              f" {release.checksum[:16]:<16} {release.changed_at.isoformat()}")
    return 0


def _run_status(app: RuleReleasesApplication, args: argparse.Namespace) -> int:
    rule_id = args.rule_id
    summary = next((s for s in app.list() if s.rule_id == rule_id), None)
    if summary is None:
        app.versions(rule_id)  # raises "no rule ... has been drafted"
    with open_activation_reports(args.cfg) as reports:
        activations = _activations(reports, rule_id)
    if args.json:
        print(json.dumps({"rule": _summary_json(summary) if summary else None,
                          "nodes": [_activation_json(a) for a in activations]}, indent=2))
        return 0
    if summary is not None and summary.offered_version is not None:
        print(f"{rule_id}: ships are offered version {summary.offered_version}"
              f" ({summary.offered_status})")
    else:
        print(f"{rule_id}: no version is offered to ships")
    if not activations:
        print("no node has reported this rule yet")
        return 0
    print(f"{'NODE':<24} {'ACTIVE':>6} {'CANDIDATE':>9} {'VALIDATION':<12} REPORTED")
    for a in activations:
        print(f"{a.node_id:<24} {a.active_version:>6} {a.candidate_version:>9}"
              f" {a.validation:<12} {a.reported_at.isoformat()}")
        for problem in a.problems:
            print(f"    {problem}")
    return 0


# ----------------------------------------------------------------------------- rendering


def release_json(release: RuleRelease) -> dict[str, object]:
    return {
        "rule_id": release.rule_id, "version": release.rule_version,
        "status": release.status.value, "author": release.author,
        "checksum": release.checksum, "problems": release.problems,
        "rule": release.rule.document(),
        "transitions": [{"status": t.status.value, "actor": t.actor, "reason": t.reason,
                         "at": t.at.isoformat()} for t in release.transitions],
    }


def _print_release(release: RuleRelease) -> None:
    print(f"rule: {release.name}")
    print(f"status: {release.status.value}")
    print(f"author: {release.author}")
    print(f"checksum: {release.checksum}")
    for problem in release.problems:
        print(f"problem: {problem}")
    print("history:")
    for t in release.transitions:
        print(f"  {t.at.isoformat()}  {t.status.value:<16} {t.actor}  {t.reason}")
    print("content:")
    print(json.dumps(release.rule.document(), indent=2, ensure_ascii=False))


def _summary_json(summary: RuleSummary) -> dict[str, object]:
    return {
        "rule_id": summary.rule_id, "latest_version": summary.latest_version,
        "latest_status": summary.latest_status.value,
        "offered_version": summary.offered_version,
        "offered_status": None if summary.offered_status is None else
        summary.offered_status.value,
        "changed_at": summary.changed_at.isoformat(),
    }


def _activation_json(activation: NodeActivation) -> dict[str, object]:
    return {"node_id": activation.node_id, "active_version": activation.active_version,
            "candidate_version": activation.candidate_version,
            "validation": activation.validation, "problems": list(activation.problems),
            "reported_at": activation.reported_at.isoformat()}


def _activations(reports: RuleActivationReports, rule_id: str) -> list[NodeActivation]:
    return sorted(reports.activations(rule_id), key=lambda a: a.node_id)


# ----------------------------------------------------------------------------- plumbing


def _trace() -> str:
    return uuid.uuid4().hex


def _read_rule_file(name: str) -> str:
    path = Path(name)
    if path.stat().st_size > MAX_DOCUMENT_BYTES:
        raise ValueError(f"{name}: a rule file has at most {MAX_DOCUMENT_BYTES // 1024} KiB")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name}: not UTF-8 text") from None


def _ref(app: RuleReleasesApplication, text: str) -> tuple[str, int]:
    """ID@VERSION, or ID for its newest version."""
    rule_id, version = parse_release_ref(text)
    return rule_id, app.versions(rule_id).latest if version is None else version


def _exact_ref(text: str) -> tuple[str, int]:
    rule_id, version = parse_release_ref(text)
    if version is None:
        raise ValueError(f"name the version: {rule_id}@VERSION")
    return rule_id, version


def _handler(run: Run) -> Callable[[argparse.Namespace], int]:
    """A command over the rule releases application; expected failures print one line and
    exit 1."""

    def handle(args: argparse.Namespace) -> int:
        args.cfg = load_config(args.config)
        try:
            with _application(args.cfg) as app:
                return run(app, args)
        except (TidesyncError, OSError, ValueError) as error:
            print(f"tidesync rules: {_message(error)}", file=sys.stderr)
            return 1
        except PersistenceError as error:
            print(f"tidesync rules: event store unavailable ({type(error).__name__})",
                  file=sys.stderr)
            return 1

    return handle


def _message(error: Exception) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{error.filename or ''}: {error.strerror}".lstrip(": ")
    return str(error)


@contextlib.contextmanager
def _application(config: Config) -> Iterator[RuleReleasesApplication]:
    app = open_rule_releases(config)
    try:
        yield app
    finally:
        app.close()
