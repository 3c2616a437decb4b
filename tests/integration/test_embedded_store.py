"""The embedded default's event store: a private PostgreSQL server in a data directory,
shared by the processes that open it, surviving a killed parent, and used by the tests when
no server answers on 127.0.0.1:5432."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from tidesync.apps.nodes import NodesApplication
from tidesync.bootstrap.event_store import event_store_env, postgres_conninfo
from tidesync.config import EventStoreConfig, EventStoreKind
from tidesync.embedded_store import EmbeddedPostgres, EmbeddedStoreError, stop_server

pytestmark = pytest.mark.services

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import psycopg
    from tidesync.embedded_store import EmbeddedPostgres
    server = EmbeddedPostgres.shared(Path(sys.argv[1]))
    server.ensure_database("fleet")
    with psycopg.connect(server.dsn("fleet"), autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS marks (n integer)")
        conn.execute("INSERT INTO marks VALUES (%s)", (int(sys.argv[2]),))
    print("ready", flush=True)
    if sys.argv[3] == "stdin":
        sys.stdin.read()  # until the test closes it: then a normal exit
    else:
        time.sleep(float(sys.argv[3]))
""")


def hold(data_dir: Path, mark: int, seconds: float | str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(data_dir), str(mark), str(seconds)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def postmaster_pid(data_dir: Path) -> int | None:
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except FileNotFoundError:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def marks(server: EmbeddedPostgres) -> list[int]:
    with psycopg.connect(server.dsn("fleet")) as conn:
        return [row[0] for row in conn.execute("SELECT n FROM marks ORDER BY n")]


def test_a_killed_holder_leaves_the_server_running_and_the_next_start_reuses_it(
        tmp_path: Path) -> None:
    data_dir = tmp_path / "pg"
    child = hold(data_dir, 1, 60)
    running = postmaster_pid(data_dir)
    assert running is not None
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert postmaster_pid(data_dir) == running  # the server outlives its killed parent

    server = EmbeddedPostgres.shared(data_dir)
    assert postmaster_pid(data_dir) == running  # joined, not started again
    assert marks(server) == [1]  # what the killed process committed is there
    # The killed process never let go; we are the last live holder, so we stop it.
    server.stop()
    assert postmaster_pid(data_dir) is None
    # Started again in the same process after an operator's stop.
    again = EmbeddedPostgres.shared(data_dir)
    stop_server(data_dir)
    assert postmaster_pid(data_dir) is None
    again = EmbeddedPostgres.shared(data_dir)
    try:
        assert marks(again) == [1]
    finally:
        stop_server(data_dir)


def test_processes_share_one_server_and_the_last_one_stops_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "pg"
    first = hold(data_dir, 1, "stdin")
    pid = postmaster_pid(data_dir)
    second = hold(data_dir, 2, 0)
    assert second.wait(timeout=30) == 0
    assert postmaster_pid(data_dir) == pid  # the first still holds it
    assert first.stdin is not None
    first.stdin.close()  # the last holder exits normally ...
    assert first.wait(timeout=30) == 0
    assert postmaster_pid(data_dir) is None  # ... and stops the server
    again = EmbeddedPostgres.shared(data_dir)
    try:
        assert marks(again) == [1, 2]
    finally:
        again.stop()
    assert postmaster_pid(data_dir) is None


def test_an_embedded_event_store_config_reaches_its_own_server(tmp_path: Path) -> None:
    store = EventStoreConfig(kind=EventStoreKind.EMBEDDED, embedded_dir=str(tmp_path / "pg"),
                             postgres_dbname="shore")
    try:
        app = NodesApplication(env=event_store_env(store))
        app.close()
        with psycopg.connect(postgres_conninfo(store)) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("shore",)
            assert conn.info.host == str((tmp_path / "pg").resolve())  # a socket, no port
    finally:
        stop_server(tmp_path / "pg")


def test_an_unusable_data_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(EmbeddedStoreError, match="cannot start PostgreSQL"):
        EmbeddedPostgres.shared(blocker / "pg")


def test_tests_use_an_embedded_server_when_asked_or_when_none_answers() -> None:
    script = textwrap.dedent("""
        from tidesync.localservices import PostgresDatabase
        database = PostgresDatabase().create()
        with database.connect() as conn:
            print(conn.info.host, conn.execute("SELECT version()").fetchone()[0].split()[1])
        database.drop()
    """)
    env = {**os.environ, "TIDESYNC_TEST_PG": "embedded"}
    env.pop("TIDESYNC_TEST_PG_DSN", None)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    host, version = result.stdout.split()
    assert host.startswith("/") and "tidesync-pg-" in host  # a private socket directory
    assert version.startswith("18.")
    assert not Path(host).exists()  # stopped and removed when the process exited


def test_a_directory_too_long_for_a_private_socket_is_refused(tmp_path: Path) -> None:
    """The server trusts its socket's callers: the socket must stay in the 0700 data directory,
    so a path too long for it is refused before anything is created (never moved to a shared
    runtime directory)."""
    deep = tmp_path.joinpath(*(["d" * 40] * 3), "postgres")
    with pytest.raises(EmbeddedStoreError, match="too long for its private socket"):
        EmbeddedPostgres.shared(deep)
    assert not deep.exists()
    with pytest.raises(EmbeddedStoreError, match=r"event_store\.embedded_dir"):
        event_store_env(EventStoreConfig(kind=EventStoreKind.EMBEDDED, embedded_dir=str(deep)))
