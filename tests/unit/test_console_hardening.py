"""Console hardening without services: bounded read-your-writes waits (per user, in total,
one budget per request), keyed digests, refused text, the last admin, storable view text.

The users application runs on the library's in-memory store here."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib

import psycopg
import pytest
from graphql import parse, validate

from tests.clocks import ManualClock
from tidesync.apps.users import UsersApplication, UserService
from tidesync.domain.evidence import evidence_digest
from tidesync.domain.user import LastAdmin, Role, UnstorableText
from tidesync.graphql.accounts import TokenAuthenticator
from tidesync.graphql.digests import Digests
from tidesync.graphql.errors import BadUserInput
from tidesync.graphql.schema import build_schema
from tidesync.graphql.settings import ConsoleSettings
from tidesync.graphql.text import UnstorableTextRule, unstorable
from tidesync.graphql.waits import RequestWaits, TooManyWaits, WaitGate
from tidesync.projections.failures import failure_reason
from tidesync.projections.text import storable

# ----------------------------------------------------------------------------- waits


class FakeTime:
    """A monotonic clock that only moves when a wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def never_passed(remaining: list[str]) -> list[str]:
    return remaining


def test_waits_are_limited_per_user_and_in_total():
    gate = WaitGate(per_user=2, total=3)
    with gate.admit("user:a"), gate.admit("user:a"):
        with pytest.raises(TooManyWaits) as refused, gate.admit("user:a"):
            pass
        assert refused.value.extensions == {"code": "WAIT_TIMEOUT", "reason": "TOO_MANY_WAITS"}
        with gate.admit("user:b"), pytest.raises(TooManyWaits), gate.admit("user:c"):
            pass
    with gate.admit("user:a"), gate.admit("user:a"), gate.admit("user:c"):
        pass  # all released again


def test_all_waits_of_one_request_share_one_budget():
    time = FakeTime()
    waits = RequestWaits(WaitGate(4, 8), "user:a", budget=5.0, monotonic=time.monotonic,
                         sleep=time.sleep)
    assert asyncio.run(waits.until_passed(["apply_jobs:9"], never_passed)) is False
    assert time.now == pytest.approx(5.0)
    # A second wait in the same request finds the budget spent: it does not wait again.
    assert asyncio.run(waits.until_passed(["nodes:3"], never_passed)) is False
    assert time.now == pytest.approx(5.0)


def test_a_wait_ends_as_soon_as_the_read_models_pass():
    time = FakeTime()
    checks: list[int] = []

    async def passes_on_third_check(remaining: list[str]) -> list[str]:
        checks.append(1)
        return remaining if len(checks) < 3 else []

    waits = RequestWaits(WaitGate(1, 1), "user:a", budget=5.0, monotonic=time.monotonic,
                         sleep=time.sleep)
    assert asyncio.run(waits.until_passed(["apply_jobs:9"], passes_on_third_check)) is True
    assert len(checks) == 3


def test_wait_limits_are_settings_validated():
    assert ConsoleSettings(max_waits_per_user=0, max_waits_total=0).validate() == [
        "console.max_waits_per_user: must be >= 1", "console.max_waits_total: must be >= 1"]


# ----------------------------------------------------------------------------- digests


def test_evidence_digests_are_keyed_and_equal_only_within_case_and_column():
    digests = Digests(bytes(32))
    value = ["int", 100]
    shown = digests.evidence("c1", "qty", value)
    assert shown == digests.evidence("c1", "qty", ["int", 100])
    assert shown != digests.evidence("c2", "qty", value)
    assert shown != digests.evidence("c1", "min", value)
    assert shown != Digests(bytes([1] * 32)).evidence("c1", "qty", value)
    assert shown not in {evidence_digest("c1", "qty", ["int", n]) for n in range(1000)}


def test_record_key_digests_can_be_matched_in_sql_from_the_pads():
    digests = Digests(bytes(range(32)))
    inner, outer = digests.record_key_pads()
    stored = hashlib.sha256(b"rule\x1fkey").hexdigest()
    in_sql = hashlib.sha256(outer + hashlib.sha256(inner + stored.encode()).digest())
    assert in_sql.hexdigest() == digests.record_key(stored)
    assert digests.record_key(stored) != stored


def test_record_head_cursors_are_sealed():
    digests = Digests(bytes(32))
    cursor = digests.seal_cursor(["rule", "abc123"])
    assert digests.open_cursor(cursor, 2) == ["rule", "abc123"]
    with pytest.raises(BadUserInput):
        Digests(bytes([7] * 32)).open_cursor(cursor, 2)
    with pytest.raises(BadUserInput):
        digests.open_cursor("W10", 2)  # base64 of "[]", unsealed


# ----------------------------------------------------------------------------- refused text


@pytest.mark.parametrize("text", ["a\x00b", "half \ud800", "\udfff"])
def test_unstorable_text_is_found_anywhere_in_a_request(text):
    assert unstorable(text)
    assert unstorable({"input": {"reason": text}})
    assert unstorable({"list": ["ok", text]}) and unstorable({text: 1})
    assert not unstorable({"input": {"reason": "é ✓ 𝄞", "n": 3}})


def test_string_literals_with_nul_are_refused_while_validating():
    schema = build_schema(ConsoleSettings())._schema
    document = parse('mutation { addUser(input: {name: "x", role: VIEWER, '
                     'reason: "a\\u0000b"}) { __typename } }')
    [error] = validate(schema, document, [UnstorableTextRule])
    assert error.extensions == {"code": "BAD_USER_INPUT", "reason": "UNSTORABLE_TEXT"}


def test_users_refuse_unstorable_reasons():
    service = UserService(UsersApplication())
    with pytest.raises(UnstorableText) as refused:
        service.add("nul-user", Role.VIEWER, "user:admin", "a\x00b")
    assert refused.value.code.value == "UNSTORABLE_TEXT"
    service.add("ok-user", Role.VIEWER, "user:admin", "fine")
    with pytest.raises(UnstorableText):
        service.revoke("ok-user", "user:admin", "bad \udc80")


def test_the_last_active_admin_cannot_be_revoked():
    service = UserService(UsersApplication())
    service.add("root", Role.ADMIN, "user:setup", "first admin")
    with pytest.raises(LastAdmin) as refused:
        service.revoke("root", "user:root", "leaving")
    assert refused.value.code.value == "LAST_ADMIN"
    service.add("second", Role.ADMIN, "user:root", "cover")
    service.revoke("root", "user:second", "leaving")
    with pytest.raises(LastAdmin):
        service.revoke("second", "user:second", "leaving too")


def test_tokens_expire_and_a_reissued_token_replaces_the_old_one():
    clock = ManualClock()
    app = UsersApplication()
    service = UserService(app, clock=clock)
    first = service.add("ann", Role.OPERATOR, "user:admin", "night shift").token
    authenticator = TokenAuthenticator(lambda: app, ttl=0, clock=clock,
                                       token_lifetime=dt.timedelta(hours=24))
    assert authenticator.authenticate(first) is not None
    clock.advance(dt.timedelta(hours=23, minutes=59))
    assert authenticator.authenticate(first) is not None
    clock.advance(dt.timedelta(minutes=1))
    assert authenticator.authenticate(first) is None  # expired

    second = service.reissue("ann", "user:admin", "expired").token
    principal = authenticator.authenticate(second)
    assert principal is not None and principal.name == "ann"
    assert authenticator.authenticate(first) is None
    clock.advance(dt.timedelta(hours=24))
    assert authenticator.authenticate(second) is None


# ----------------------------------------------------------------------------- read side


def test_views_store_text_without_nul_or_lone_surrogates():
    assert storable({"reason": "a\x00b", "k\x00": ["\ud800", 1, None]}) == {
        "reason": "a\ufffdb", "k\ufffd": ["\ufffd", 1, None]}


def test_view_failures_carry_a_reason_code_not_a_message():
    assert failure_reason(psycopg.DataError("quotes a value")) == "VALUE_REFUSED"
    assert failure_reason(KeyError("secret")) == "PROJECTION_ERROR"
    assert failure_reason(LastAdmin("x")) == "LAST_ADMIN"
