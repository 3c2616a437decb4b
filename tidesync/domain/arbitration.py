"""Automatic conflict policies (§11.4): shore wins, or last writer wins on a business time.

Pure functions over a case's latest evidence. An outcome either names the side that wins or
says why a person has to decide; nothing here guesses.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from dataclasses import dataclass

from tidesync.domain.conflict_case import DecisionSide
from tidesync.domain.evidence import EvidenceValueError, decode_value

UPDATED_AT_COLUMN = "_sync_updated_at"
"""Stamped by the writing side's triggers at write time: the clock a business time is held to."""


class PolicyName(enum.StrEnum):
    MANUAL = "MANUAL"
    SHORE_WINS = "SHORE_WINS"
    LAST_WRITER_WINS = "LAST_WRITER_WINS"


class ManualReason(enum.StrEnum):
    """Why an automatic policy handed the case to a person (stable codes)."""

    POLICY_MANUAL = "POLICY_MANUAL"
    TIME_MISSING = "LWW_TIME_MISSING"
    TIME_MALFORMED = "LWW_TIME_MALFORMED"
    TIME_OUT_OF_SKEW = "LWW_TIME_OUT_OF_SKEW"
    ROW_DELETED = "LWW_ROW_DELETED"


@dataclass(frozen=True)
class Policy:
    name: PolicyName
    time_column: str = ""
    max_skew: dt.timedelta = dt.timedelta(minutes=5)
    lower_node_id_wins: bool = True


@dataclass(frozen=True)
class PolicyOutcome:
    """`side` None: a person decides, `reason_code` says why."""

    side: DecisionSide | None
    reason_code: str
    reason: str


def arbitrate(policy: Policy, evidence: Mapping[str, object], shore_node_id: str,
              now: dt.datetime) -> PolicyOutcome:
    """What `policy` decides for the case whose latest evidence is `evidence`."""
    if policy.name is PolicyName.SHORE_WINS:
        return PolicyOutcome(DecisionSide.SHORE, "SHORE_WINS", "policy: the shore version wins")
    if policy.name is PolicyName.LAST_WRITER_WINS:
        return _last_writer_wins(policy, evidence, shore_node_id, now)
    return PolicyOutcome(None, ManualReason.POLICY_MANUAL, "policy: a person decides")


def _last_writer_wins(policy: Policy, evidence: Mapping[str, object], shore_node_id: str,
                      now: dt.datetime) -> PolicyOutcome:
    shore = _columns(evidence.get("current_row"))
    ship = _columns(evidence.get("incoming_after"))
    if shore is None or ship is None:
        return PolicyOutcome(None, ManualReason.ROW_DELETED,
                             "one side deleted the row: it has no business time to compare")
    ship_node = str(evidence.get("origin_node_id") or "")
    times: dict[str, dt.datetime] = {}
    for side, image, fallback in (("shore", shore, now),
                                  ("ship", ship, _moment(evidence.get("captured_at")) or now)):
        if policy.time_column not in image or image[policy.time_column] == ["null"]:
            return PolicyOutcome(None, ManualReason.TIME_MISSING,
                                 f"the {side} version has no {policy.time_column}")
        moment = _decoded_moment(image[policy.time_column])
        if moment is None:
            return PolicyOutcome(None, ManualReason.TIME_MALFORMED,
                                 f"the {side} version's {policy.time_column} is not a time")
        stamp = _decoded_moment(image.get(UPDATED_AT_COLUMN)) or fallback
        if moment > stamp + policy.max_skew:
            return PolicyOutcome(None, ManualReason.TIME_OUT_OF_SKEW,
                                 f"the {side} version's {policy.time_column} is later than its "
                                 "write by more than the allowed clock skew")
        times[side] = moment
    if times["shore"] != times["ship"]:
        side = DecisionSide.SHORE if times["shore"] > times["ship"] else DecisionSide.SHIP
        return PolicyOutcome(side, f"LWW_{side}_LATER",
                             f"policy: the later {policy.time_column} wins ({side.lower()})")
    shore_wins = (shore_node_id < ship_node) == policy.lower_node_id_wins
    side = DecisionSide.SHORE if shore_wins else DecisionSide.SHIP
    direction = "lower" if policy.lower_node_id_wins else "higher"
    return PolicyOutcome(side, f"LWW_TIE_{side}",
                         f"policy: equal times, the {direction} node id wins ({side.lower()})")


def _columns(image: object) -> dict[str, object] | None:
    if not isinstance(image, list | tuple):
        return None
    return {str(pair[0]): pair[1] for pair in image if isinstance(pair, list | tuple)}


def _decoded_moment(tagged: object) -> dt.datetime | None:
    if tagged is None:
        return None
    try:
        value = decode_value(tagged)
    except (EvidenceValueError, TypeError, ValueError):
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    return None


def _moment(text: object) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
