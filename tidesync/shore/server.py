"""The shore HTTP server: the Starlette application and its uvicorn runner.

The sync API and the console mount onto this app; `/healthz` reports event store health.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import tidesync
from tidesync.bootstrap import check_event_store, describe_event_store
from tidesync.config import Config

log = logging.getLogger(__name__)


def create_app(config: Config) -> Starlette:
    async def healthz(request: Request) -> JSONResponse:
        try:
            position = await run_in_threadpool(check_event_store, config)
        except Exception as error:  # noqa: BLE001 - any driver failure means "unhealthy"
            log.warning("event store unreachable: %s", type(error).__name__)
            return JSONResponse(
                {"status": "UNAVAILABLE", "event_store": "unreachable"},
                status_code=503, headers={"Retry-After": "5"},
            )
        return JSONResponse({"status": "HEALTHY", "event_store_position": position})

    async def version(request: Request) -> JSONResponse:
        return JSONResponse({"tidesync": tidesync.__version__})

    return Starlette(routes=[
        Route("/healthz", healthz, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
    ])


def build_server(config: Config) -> uvicorn.Server:
    """A uvicorn server for the app; `server.servers[0].sockets` tell the bound port once up."""
    uv_config = uvicorn.Config(
        create_app(config), host=config.shore.listen_host, port=config.shore.listen_port,
        log_level="warning", access_log=False, lifespan="on",
    )
    return uvicorn.Server(uv_config)


def bound_url(server: uvicorn.Server) -> str:
    """The http URL the server actually listens on (resolves port 0)."""
    sockets = [s for srv in server.servers for s in srv.sockets]
    host, port = sockets[0].getsockname()[:2]
    return f"http://{host}:{port}"


def describe(config: Config) -> str:
    return describe_event_store(config.event_store)


async def serve(config: Config, on_ready: Callable[[str], None],
                duration: float | None = None) -> None:
    """Run the server; call `on_ready(url)` once it listens; stop after `duration` seconds."""
    server = build_server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task  # Re-raise the startup failure (e.g. the port is taken).
            raise ServerStartError("the shore server stopped during startup")
        await asyncio.sleep(0.05)
    on_ready(bound_url(server))
    if duration is not None:
        await asyncio.sleep(duration)
        server.should_exit = True
    await task


class ServerStartError(RuntimeError):
    """The server could not start listening."""
