"""The activation step of rule releases (§8.2): a release being distributed (or rolled back to)
becomes ACTIVE once every node it selects reports running it.

It runs from the shore worker loop, at most once per interval. A release that selects no
registered node stays DISTRIBUTING: nothing proves it runs anywhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from tidesync.domain.actor import system_actor
from tidesync.domain.errors import TidesyncError
from tidesync.domain.node import NodeProfile
from tidesync.domain.rules.release import (
    ROLLING_OUT,
    NodeActivation,
    ReleasedRules,
    RuleActivationReports,
)
from tidesync.domain.rules.sync_rule import SyncRule

log = logging.getLogger(__name__)

ACTOR = system_actor("rules")
ACTIVATION_INTERVAL_SECONDS = 15.0
_FAILED = "RULE_FAILED"
_MAX_LOGGED = 10_000
"""Failures remembered as already logged (forgotten all at once beyond this)."""


class NodeProfiles(Protocol):
    """The nodes that count (registered, not revoked) with their groups and tags
    (`NodesApplication` has it)."""

    def active_profiles(self) -> Mapping[str, NodeProfile]: ...


class RuleActivationStep:
    """Marks offered releases ACTIVE once every selected node runs them, and logs nodes that
    report a release does not fit them (once per node, rule, version and problems)."""

    def __init__(self, released: ReleasedRules, reports: RuleActivationReports,
                 nodes: NodeProfiles, interval: float = ACTIVATION_INTERVAL_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.released, self.reports, self.nodes = released, reports, nodes
        self.interval, self.monotonic = interval, monotonic
        self._last_run: float | None = None
        self._logged: set[tuple[str, str, int, tuple[str, ...]]] = set()

    def run_once(self) -> int:
        """One pass when the interval has passed since the last; returns how many releases
        became ACTIVE."""
        now = self.monotonic()
        if self._last_run is not None and now - self._last_run < self.interval:
            return 0
        self._last_run = now
        return self.check()

    def check(self) -> int:
        """One pass now: every waiting release whose selected nodes all run it becomes
        ACTIVE."""
        waiting = [rule for rule, status in self.released.offered() if status in ROLLING_OUT]
        if not waiting:
            return 0
        profiles = self.nodes.active_profiles()
        return sum(self._settle(rule, profiles) for rule in waiting)

    def _settle(self, rule: SyncRule, profiles: Mapping[str, NodeProfile]) -> int:
        selected = {node_id for node_id, profile in profiles.items()
                    if rule.selector.matches(node_id, profile.groups, profile.tags)}
        reports = {report.node_id: report for report in self.reports.activations(rule.rule_id)
                   if report.node_id in selected}
        self._log_failures(rule, reports.values())
        running = sum(1 for report in reports.values()
                      if report.active_version == rule.version)
        if not selected or running < len(selected):
            return 0
        return self._activate(rule, len(selected))

    def _activate(self, rule: SyncRule, nodes: int) -> int:
        reason = f"all {nodes} selected nodes run version {rule.version}"
        try:
            self.released.mark_active(rule.rule_id, rule.version, ACTOR, reason)
        except TidesyncError as error:
            # Another worker may have done it a moment ago; the next pass sees the outcome.
            log.info("rule %s version %d not marked active (%s)", rule.rule_id, rule.version,
                     error.code)
            return 0
        log.info("rule %s version %d is active on every selected node (%d)", rule.rule_id,
                 rule.version, nodes)
        return 1

    def _log_failures(self, rule: SyncRule, reports: Iterable[NodeActivation]) -> None:
        for report in reports:
            if report.validation != _FAILED or report.candidate_version != rule.version:
                continue
            key = (report.node_id, rule.rule_id, rule.version, report.problems)
            if key in self._logged:
                continue
            if len(self._logged) >= _MAX_LOGGED:
                self._logged.clear()
            self._logged.add(key)
            # Problems name columns and tables only; repr keeps a ship's text on one line.
            log.warning("node %s cannot run rule %s version %d: %r", report.node_id,
                        rule.rule_id, rule.version, report.problems)

