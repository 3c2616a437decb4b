"""The per-request context: who asks, the console's services, per-request DataLoaders, and
blocking reads run off the event loop after waiting for the positions a request names."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import strawberry
from starlette.requests import Request

from tidesync.graphql.accounts import Principal
from tidesync.graphql.console import Console, PrivilegedRead
from tidesync.graphql.errors import BadUserInput, WaitTimeout
from tidesync.graphql.loaders import Loaders, make_loaders
from tidesync.graphql.positions import BadPosition, Position, parse_positions
from tidesync.graphql.threads import blocking
from tidesync.graphql.waits import RequestWaits

T = TypeVar("T")

WAIT_HEADER = "x-tidesync-wait-for"


@dataclass
class Context:
    console: Console
    principal: Principal
    request: Request
    loaders: Loaders = field(init=False)
    waits: RequestWaits = field(init=False)
    _header_wait: asyncio.Task[None] | None = field(default=None, init=False)
    _trace_id: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.loaders = make_loaders(self.console, lambda: self.actor, lambda: self.trace_id)
        self.waits = RequestWaits(self.console.wait_gate, self.actor,
                                  self.console.settings.wait_timeout_ms / 1000)

    async def audit_read(self, what: str, target: str) -> None:
        """Record that this request showed business values or audit data (§17.3)."""
        await self.loaders.privileged_read.load(PrivilegedRead(what, target))

    @property
    def actor(self) -> str:
        return self.principal.actor

    @property
    def trace_id(self) -> str:
        """The caller's trace id (X-Trace-Id, at most 64 visible characters), else a new one."""
        if self._trace_id is None:
            given = self.request.headers.get("x-trace-id", "")
            self._trace_id = (given if given.isprintable() and 0 < len(given) <= 64
                              else uuid.uuid4().hex)
        return self._trace_id

    async def read(self, fn: Callable[..., T], *args: Any, wait_for: str | None = None) -> T:
        """A blocking read, after the read models passed the positions this request names
        (the X-Tidesync-Wait-For header once per request, plus `wait_for`)."""
        await self.catch_up(wait_for)
        return await blocking(fn, *args)

    async def catch_up(self, wait_for: str | None = None) -> None:
        header = self.request.headers.get(WAIT_HEADER, "")
        if header and self._header_wait is None:
            self._header_wait = asyncio.ensure_future(self._wait(header))
        if self._header_wait is not None:
            await self._header_wait
        if wait_for:
            await self._wait(wait_for)

    async def _wait(self, text: str) -> None:
        waits = await blocking(self.console.waits)
        try:
            positions = parse_positions(text, waits.applications)
        except BadPosition as error:
            raise BadUserInput(str(error)) from None
        if not all(await blocking(lambda: [waits.written(p) for p in positions])):
            raise BadUserInput("nothing has been written at that position yet")
        if not positions:
            return

        async def pending(remaining: list[Position]) -> list[Position]:
            return await blocking(waits.pending, remaining)

        if not await self.waits.until_passed(positions, pending):
            raise WaitTimeout("the read models have not reached the requested position yet;"
                              " retry shortly", positions=[p.token for p in positions])


Info = strawberry.Info[Context, None]

__all__ = ["Context", "Info", "Position", "blocking"]
