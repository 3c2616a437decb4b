"""The shore HTTP server: the Starlette application and its uvicorn runner.

The sync API and the console mount onto this app; `/livez` says the process answers,
`/readyz` and `/healthz` report event store health from a cached probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

import tidesync
from tidesync.bootstrap.console import build_console
from tidesync.bootstrap.event_store import describe_event_store
from tidesync.bootstrap.ingress import build_ingress
from tidesync.bootstrap.shore import attach_downlink
from tidesync.config import Config, ShoreConfig
from tidesync.domain.errors import TidesyncError
from tidesync.entrypoints.health import EventStoreCheck, HealthProbe
from tidesync.graphql.console import Console
from tidesync.graphql.http import ConsoleEndpoint
from tidesync.ingress.routes import Ingress
from tidesync.ingress.settings import ShoreHttpSettings

log = logging.getLogger(__name__)


def create_app(config: Config, ingress: Ingress | None = None,
               console: Console | None = None, health: HealthProbe | None = None) -> Starlette:
    """The shore app: `/livez`, `/readyz`, `/healthz`, `/version`, the sync API `/sync/v1/*`
    and the GraphQL console `/graphql` (each built from the config unless given)."""
    sync_api = ingress if ingress is not None else build_ingress(config)
    if sync_api.downlink is None:
        attach_downlink(config, sync_api)
    if console is None:
        console = build_console(config)
    store_check: EventStoreCheck | None = None
    if health is None:
        store_check = EventStoreCheck(config)
        health = HealthProbe(store_check)
    probe = health

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(sync_api.start)
        await run_in_threadpool(console.start)
        try:
            yield
        finally:
            await run_in_threadpool(console.close)
            await run_in_threadpool(sync_api.close)
            if store_check is not None:
                await run_in_threadpool(store_check.close)

    async def livez(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ALIVE"})

    async def readyz(request: Request) -> JSONResponse:
        current = await probe.current()
        if not current.ready:
            return _unavailable()
        return JSONResponse({"status": "READY"})

    async def healthz(request: Request) -> JSONResponse:
        current = await probe.current()
        if not current.ready:
            return _unavailable()
        return JSONResponse({"status": "HEALTHY", "event_store_position": current.position})

    async def version(request: Request) -> JSONResponse:
        return JSONResponse({"tidesync": tidesync.__version__})

    return Starlette(routes=[
        Route("/livez", livez, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        *sync_api.routes(),
        Route("/graphql", ConsoleEndpoint(console), methods=["GET", "POST"]),
    ], lifespan=lifespan)


def _unavailable() -> JSONResponse:
    return JSONResponse({"status": "UNAVAILABLE", "event_store": "unreachable"},
                        status_code=503, headers={"Retry-After": "5"})


@dataclass(frozen=True)
class ServerTls:
    """The files of TLS served by uvicorn itself; a client CA asks clients for certificates."""

    cert_file: str
    key_file: str
    client_ca_file: str = ""
    client_cert_required: bool = True

    @classmethod
    def of(cls, shore: ShoreConfig) -> ServerTls | None:
        """The `[shore]` TLS settings, or None when the shore serves plain http."""
        if not shore.tls_cert_file:
            return None
        return cls(shore.tls_cert_file, shore.tls_key_file, shore.tls_client_ca_file,
                   shore.tls_client_cert_required)

    def uvicorn_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"ssl_certfile": self.cert_file,
                                   "ssl_keyfile": self.key_file or None}
        if self.client_ca_file:
            options["ssl_ca_certs"] = self.client_ca_file
            options["ssl_cert_reqs"] = (ssl.CERT_REQUIRED if self.client_cert_required
                                        else ssl.CERT_OPTIONAL)
        return options


class CertificateIdentityProtocol(H11Protocol):
    """uvicorn's h11 protocol, telling the app which client certificate the connection proved.

    uvicorn verifies client certificates but leaves them out of the ASGI scope; this puts the
    subject into the ASGI TLS extension (`extensions.tls.client_cert_name`, RFC 4514), so the
    sync API matches the certificate's name to the node that signed the request.
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        name = certificate_name(transport.get_extra_info("ssl_object"))
        if name is None:
            return
        inner = self.app

        async def app(scope: Any, receive: Any, send: Any) -> None:
            scope.setdefault("extensions", {})["tls"] = {"client_cert_name": name,
                                                         "client_cert_error": None}
            await inner(scope, receive, send)

        self.app = app


def certificate_name(ssl_object: ssl.SSLObject | None) -> str | None:
    """The RFC 4514 subject of the peer's verified certificate, or None without one."""
    if ssl_object is None:
        return None
    certificate = ssl_object.getpeercert()
    if not certificate:
        return None
    subject: Any = certificate.get("subject", ())
    parts = [f"{'CN' if key == 'commonName' else key}={value}"
             for rdn in subject for key, value in rdn]
    return ",".join(reversed(parts)) or None


def build_server(config: Config) -> uvicorn.Server:
    """A uvicorn server for the app; `server.servers[0].sockets` tell the bound port once up."""
    return build_server_for(create_app(config), config.shore.listen_host,
                            config.shore.listen_port, ServerTls.of(config.shore),
                            keep_alive_seconds=config.shore.keep_alive_seconds)


def build_server_for(app: Starlette, host: str, port: int, tls: ServerTls | None = None, *,
                     keep_alive_seconds: int = ShoreHttpSettings.keep_alive_seconds
                     ) -> uvicorn.Server:
    # proxy_headers off: scope["client"] must stay the peer address, which is what the
    # trusted-proxy check of client identities relies on. The keep-alive timeout outlasts the
    # ship's own idle limit, so an idle ship never sends on a connection being closed.
    uv_config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
        proxy_headers=False, http=CertificateIdentityProtocol,
        timeout_keep_alive=keep_alive_seconds,
        **(tls.uvicorn_options() if tls is not None else {}),
    )
    return uvicorn.Server(uv_config)


def bound_url(server: uvicorn.Server) -> str:
    """The http(s) URL the server actually listens on (resolves port 0)."""
    sockets = [s for srv in server.servers for s in srv.sockets]
    host, port = sockets[0].getsockname()[:2]
    scheme = "https" if server.config.is_ssl else "http"
    return f"{scheme}://{host}:{port}"


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


class ServerStartError(TidesyncError, RuntimeError):
    """The server could not start listening."""


class BackgroundServer:
    """Runs an app on uvicorn in a daemon thread (tests, benchmarks): `with BackgroundServer(app)
    as server:` waits until it listens; `server.url` is its address; leaving stops it."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0,
                 startup_timeout: float = 30.0, tls: ServerTls | None = None, *,
                 keep_alive_seconds: int = ShoreHttpSettings.keep_alive_seconds) -> None:
        self.server = build_server_for(app, host, port, tls,
                                       keep_alive_seconds=keep_alive_seconds)
        self.startup_timeout = startup_timeout
        self._thread = threading.Thread(target=self.server.run, name="shore-server", daemon=True)
        self.url = ""

    def start(self) -> BackgroundServer:
        self._thread.start()
        waited = 0.0
        while not self.server.started:
            if not self._thread.is_alive() or waited > self.startup_timeout:
                raise ServerStartError("the shore server did not start")
            self._thread.join(0.02)
            waited += 0.02
        self.url = bound_url(self.server)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def serve_and_report(config: Config, duration: float | None) -> int:
    """Serve until stopped (or `duration`), printing where the shore listens once it does."""

    def ready(url: str) -> None:
        print(f"tidesync shore listening on {url}", flush=True)
        print(f"  event store: {describe(config)}", flush=True)
        print(f"  health:      {url}/healthz", flush=True)
        if duration is None:
            print("  press Ctrl-C to stop", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config, ready, duration))
    return 0
