"""The console's settings (the `[console]` section of the configuration)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConsoleSettings:
    """The GraphQL console at /graphql: what it lets clients see and the limits of a request."""

    # Schema listing (introspection and the GraphiQL page) is off unless switched on.
    introspection: bool = False
    # Per request: selection depth, aliases (counted through fragments), estimated cost (each
    # field 1, times the page size of the lists it sits in), parser tokens, body bytes.
    max_depth: int = 10
    max_aliases: int = 15
    max_cost: int = 20_000
    max_tokens: int = 2_000
    max_body_bytes: int = 64 * 1024
    # Page sizes: what a list returns unless `first` says otherwise, and the largest allowed.
    default_page_size: int = 50
    max_page_size: int = 200
    # How long a read waits for the read models to pass a position it names (read your
    # writes), and how long an authenticated token is trusted before its user is read again
    # (a revoke takes effect within that).
    wait_timeout_ms: int = 5_000
    auth_cache_ms: int = 2_000
    # Read-your-writes waits open at once, per user and in all (more are refused with
    # WAIT_TIMEOUT, reason TOO_MANY_WAITS); all waits of one request share wait_timeout_ms.
    max_waits_per_user: int = 4
    max_waits_total: int = 32
    # How long a console token is accepted after it was issued (`users reissue` or the
    # `reissueUserToken` mutation issue a new one).
    token_lifetime_hours: int = 90 * 24
    # Evidence columns whose values only auditors and admins see: an array of
    # db.table.column patterns with shell wildcards (e.g. "crew.*.passport_no").
    sensitive_columns: tuple[str, ...] = ()

    def validate(self) -> list[str]:
        problems = []
        for name in ("max_depth", "max_aliases", "max_cost", "max_tokens", "max_body_bytes",
                     "default_page_size", "max_page_size", "max_waits_per_user",
                     "max_waits_total", "token_lifetime_hours"):
            if getattr(self, name) < 1:
                problems.append(f"console.{name}: must be >= 1")
        for name in ("wait_timeout_ms", "auth_cache_ms"):
            if getattr(self, name) < 0:
                problems.append(f"console.{name}: must be >= 0")
        if self.max_page_size > 1000:
            problems.append("console.max_page_size: must be <= 1000")
        if self.default_page_size > self.max_page_size:
            problems.append("console.default_page_size: must be <= max_page_size")
        for item in self.sensitive_columns:
            if item.count(".") != 2:
                problems.append(f"console.sensitive_columns: {item!r} is not db.table.column")
        return problems
