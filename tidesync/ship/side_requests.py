"""The ship's requests other than uploads (receipts, heartbeats, config) on a worker thread of
their own, so that a slow round trip never holds up the next upload; answers are handled on the
client's thread, which owns the state store.

A link that is not remote (a test's fake, the null link) is called on the client's thread, as
before, so a test that steps the client sees each answer in the same turn.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidesync.ship.transport import LinkDown, LinkError

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    future: concurrent.futures.Future[Any]
    answered: Callable[[Any], None]
    failed: Callable[[LinkError], None]


class SideRequests:
    """At most one request of each kind under way; `collect` hands finished ones over."""

    def __init__(self, threaded: bool) -> None:
        self._executor = (concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="ship-side") if threaded else None)
        self._pending: dict[str, _Pending] = {}

    def busy(self, kind: str | None = None) -> bool:
        """A request of `kind` (of any kind, for None) is under way."""
        return bool(self._pending) if kind is None else kind in self._pending

    def start(self, kind: str, call: Callable[[], Any], answered: Callable[[Any], None],
              failed: Callable[[LinkError], None], *, wait: bool = False) -> None:
        """Send `call` (one of the link's requests); `answered` or `failed` follows on the
        client's thread. `wait`: call it here and now (a final heartbeat)."""
        if self._executor is None or wait:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            try:
                future.set_result(call())
            except Exception as error:  # noqa: BLE001 - handed over like a thread's
                future.set_exception(error)
            self._handle(kind, _Pending(future, answered, failed))
            return
        self._pending[kind] = _Pending(self._executor.submit(call), answered, failed)

    def collect(self) -> None:
        """Hand over every request that ended."""
        for kind, pending in [(k, p) for k, p in self._pending.items() if p.future.done()]:
            del self._pending[kind]
            self._handle(kind, pending)

    def _handle(self, kind: str, pending: _Pending) -> None:
        try:
            answer = pending.future.result()
        except LinkError as error:
            pending.failed(error)
            return
        except Exception as error:
            log.exception("%s request failed unexpectedly", kind)
            pending.failed(LinkDown("UNEXPECTED", str(error)[:200]))
            return
        pending.answered(answer)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
