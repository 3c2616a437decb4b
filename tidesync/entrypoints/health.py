"""The shore's health: a probe of the event store run at most once per interval, whatever the
number of callers, so unauthenticated `/healthz` and `/readyz` requests cost no database work.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment
from starlette.concurrency import run_in_threadpool

from tidesync.bootstrap.event_store import event_store_env
from tidesync.config import Config

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 5.0
"""Seconds a probe result answers health requests before the next probe."""


@dataclass(frozen=True, slots=True)
class Health:
    """The outcome of the last probe: the event store's newest notification id, or why not."""

    ready: bool
    position: int | None
    checked_at: float


class HealthProbe:
    """Runs `check` (blocking; returns the event store position, raises when unreachable)
    in the thread pool at most once per `interval` seconds; every other caller gets the last
    result, even while a probe runs."""

    def __init__(self, check: Callable[[], int], interval: float = DEFAULT_INTERVAL,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._check, self._interval, self._monotonic = check, interval, monotonic
        self._last: Health | None = None
        self._lock = asyncio.Lock()

    async def current(self) -> Health:
        last = self._last
        if last is not None and (self._fresh(last) or self._lock.locked()):
            return last
        async with self._lock:
            last = self._last
            if last is None or not self._fresh(last):
                last = self._last = await run_in_threadpool(self._probe)
            return last

    def _fresh(self, health: Health) -> bool:
        return self._monotonic() - health.checked_at < self._interval

    def _probe(self) -> Health:
        try:
            position = self._check()
        except Exception as error:  # noqa: BLE001 - any driver failure means "not ready"
            log.warning("event store unreachable: %s", type(error).__name__)
            return Health(False, None, self._monotonic())
        return Health(True, position, self._monotonic())


class EventStoreCheck:
    """Reads the event store's newest notification id through one recorder kept open, so a
    probe is one query (not a new connection, lock and schema check each time)."""

    def __init__(self, config: Config, name: str = "shore_health") -> None:
        self._env = Environment(name, event_store_env(config.event_store))
        self._factory: Any = None
        self._recorder: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            try:
                if self._recorder is None:
                    self._factory = InfrastructureFactory.construct(self._env)
                    self._recorder = self._factory.application_recorder()
                return int(self._recorder.max_notification_id() or 0)
            except Exception:
                self._close()  # Reconnect on the next probe.
                raise

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._factory is not None:
            self._factory.close()
        self._factory = self._recorder = None
