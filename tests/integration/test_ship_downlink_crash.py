"""`tidesync ship run` killed with SIGKILL after a shore command reached the ship's MariaDB and
before its result was recorded or acked: the restarted client pulls the command again and
answers COMMAND_ALREADY_APPLIED (the `_sync_applied` ledger tells), and the applied_command row
written before the apply proved the write the whole time. The shore is an in-test HTTP server
speaking the /sync/v1 commands contract (the real shore endpoints are built separately)."""

from __future__ import annotations

import http.server
import os
import secrets
import signal
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.shore_support import run_sql
from tests.integration.test_ship_downlink import SHIP_NODE, ship_db  # noqa: F401
from tests.integration.test_ship_downlink_support import SHORE, CommandLog, FakeShore
from tidesync.domain.change_event import Revision
from tidesync.domain.node import secret_text
from tidesync.ship.state import COMMANDS_CURSOR, SQLiteShipState
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.signing import RESPONSE_SIGNATURE_HEADER, sign_response

pytestmark = pytest.mark.services

REPOSITORY = Path(__file__).resolve().parents[2]
SHIP_SECRET = secrets.token_bytes(32)


@contextmanager
def serving(shore: FakeShore) -> Iterator[str]:
    """The fake shore over HTTP with zstd bodies. It does not check the ship's signatures but
    signs its answers as the shore does (the ship acts on no unsigned answer)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self, message: object) -> None:
            body = codec.compress(message)  # type: ignore[arg-type]
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Encoding", "zstd")
            self.send_header("Content-Length", str(len(body)))
            self.send_header(RESPONSE_SIGNATURE_HEADER, sign_response(
                SHIP_SECRET, self.headers, self.command, self.path, 200, body))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/sync/v1/commands":
                self._answer(shore.commands(query.get("cursor", ""), int(query["limit"])))
            else:
                self._answer(pb.ReceiptsPage(next_cursor=query.get("cursor", "")))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"] or 0))
            if self.path == "/sync/v1/command-acks":
                message = codec.parse_message(codec.decompress_bytes(raw, 1 << 24, 1 << 26),
                                              pb.CommandAcks)
                self._answer(shore.command_acks(message))
            else:
                self._answer(pb.HeartbeatResponse())

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def ship_env(url: str, state_path: Path, instance: object, bootstrap: str,
             **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TIDESYNC_")}
    env.update({
        "TIDESYNC_SHIP__NODE_ID": SHIP_NODE, "TIDESYNC_SHIP__SHORE_URL": url,
        "TIDESYNC_SHIP__SECRET": secret_text(SHIP_SECRET),
        "TIDESYNC_SHIP__STATE_PATH": str(state_path),
        "TIDESYNC_SHIP__KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        # No CDC topic matches: this test is about the downlink only.
        "TIDESYNC_SHIP__TOPIC_PATTERN": rf"^sync\.cdc\.none{secrets.token_hex(4)}\.",
        "TIDESYNC_SHIP__SHORE_NODE_ID": SHORE,
        "TIDESYNC_SHIP__COMMANDS_INTERVAL_SECONDS": "1",
        "TIDESYNC_SHIP__HEARTBEAT_INTERVAL_SECONDS": "1",
        "TIDESYNC_SHIP_TARGET__KIND": "mysql",
        "TIDESYNC_SHIP_TARGET__HOST": instance.host,  # type: ignore[attr-defined]
        "TIDESYNC_SHIP_TARGET__PORT": str(instance.port),  # type: ignore[attr-defined]
        "TIDESYNC_SHIP_TARGET__USER": instance.user,  # type: ignore[attr-defined]
        "TIDESYNC_SHIP_TARGET__PASSWORD": instance.password,  # type: ignore[attr-defined]
        **extra,
    })
    return env


def ship_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidesync", "ship", "run", "--until-idle",
                           "--timeout", "60"], env=env, cwd=REPOSITORY, capture_output=True,
                          text=True, timeout=120)


def test_sigkill_between_apply_and_ack_answers_already_applied_on_restart(
        ship_mariadb, ship_db, kafka_broker, tmp_path):  # noqa: F811
    shore = FakeShore(CommandLog())
    command, event_id = shore.log.row_change(ship_db, "items", {"id": 1}, pb.INSERT,
                                             {"name": "pump", "qty": 3})
    later, later_id = shore.log.row_change(ship_db, "items", {"id": 2}, pb.INSERT,
                                           {"name": "hose", "qty": 1})
    state_path = tmp_path / "ship.sqlite"
    with serving(shore) as url:
        env = ship_env(url, state_path, ship_mariadb, kafka_broker.bootstrap_servers)
        killed = ship_run({**env, "TIDESYNC_FAILPOINTS": "ship_after_command_apply=kill"})
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        # The row and its ledger entry are committed; no result, no ack yet.
        revision = Revision(command.row_change.result_revision)
        assert run_sql(ship_mariadb, ship_db, "SELECT id, _sync_revision, _sync_origin,"
                       " _sync_event_id FROM items") == [(1, revision.text, SHORE, str(event_id))]
        assert shore.acks == []
        state = SQLiteShipState(state_path, SHIP_NODE, "g", read_only=True)
        try:
            assert state.applied_command(event_id.bytes) == ("APPLYING", None, None)
            assert state.cursor(COMMANDS_CURSOR) == ""
        finally:
            state.close()

        restarted = ship_run(env)
        assert restarted.returncode == 0, restarted.stderr[-3000:]
    first, second = shore.ack_of(command), shore.ack_of(later)
    assert [(a.result, a.reason_code) for a in first] == [
        (pb.COMMAND_ALREADY_APPLIED, "IN_LEDGER")]
    assert first[0].local_revision == revision.value
    assert [a.result for a in second] == [pb.COMMAND_APPLIED]
    assert run_sql(ship_mariadb, ship_db, "SELECT count(*) FROM _sync_applied") == [(2,)]
    state = SQLiteShipState(state_path, SHIP_NODE, "g", read_only=True)
    try:
        assert state.applied_command(event_id.bytes) == (
            "DONE", "COMMAND_ALREADY_APPLIED", "IN_LEDGER")
        assert state.applied_command(later_id.bytes) == ("DONE", "COMMAND_APPLIED", None)
        assert state.cursor(COMMANDS_CURSOR) == "2"
        assert state.pending_ack_count() == 0
    finally:
        state.close()
