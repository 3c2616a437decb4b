"""`tidesync nodes …` on the embedded default (a private PostgreSQL server under
tidesync-data/, the key file beside it)."""

from __future__ import annotations

import json
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidesync.domain.node import secret_from_text
from tidesync.embedded_store import stop_server
from tidesync.entrypoints.cli import main

pytestmark = pytest.mark.services


@pytest.fixture
def workdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # A short directory of its own: the server's socket path may not pass 107 bytes, which
    # pytest's per-test directories (longer under parallel workers) can.
    path = Path(tempfile.mkdtemp(prefix="tidesync-nodes-"))
    monkeypatch.chdir(path)
    for name in ("TIDESYNC_CONFIG", "TIDESYNC_SHORE__MASTER_KEY"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield path
    finally:
        stop_server(path / "tidesync-data" / "postgres")
        shutil.rmtree(path, ignore_errors=True)


def stored_bytes(data_dir: Path) -> bytes:
    """Every byte the server wrote: tables, indexes and the write-ahead log."""
    return b"".join(path.read_bytes() for path in sorted(data_dir.rglob("*"))
                    if path.is_file() and not path.is_symlink())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_register_shows_the_secret_once_and_keeps_it_sealed(
    workdir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "nodes", "register", "ship-0042", "--actor", "alice")
    assert code == 0
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert lines["node"] == "ship-0042"
    secret = lines["secret"]
    assert len(secret_from_text(secret)) == 32
    assert "shown only now" in err
    key_file = workdir / "tidesync-data" / "master.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    store = stored_bytes(workdir / "tidesync-data" / "postgres")
    assert b"ship-0042" in store  # the node is stored ...
    assert secret.encode() not in store  # ... its secret only sealed
    code, out, _ = run(capsys, "nodes", "list", "--json")
    assert code == 0 and secret not in out


def test_node_commands_and_their_errors(workdir: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "nodes", "register", "ship-1")[0] == 0
    code, _, err = run(capsys, "nodes", "register", "ship-1")
    assert code == 1 and "ship-1 is already registered" in err
    code, _, err = run(capsys, "nodes", "register", "Ship_1")
    assert code == 1 and "must match" in err
    code, out, _ = run(capsys, "nodes", "rotate", "ship-1", "--overlap-hours", "2")
    assert code == 0 and "secret: " in out
    with pytest.raises(SystemExit):
        main(["nodes", "revoke", "ship-1"])  # --reason is required
    capsys.readouterr()
    assert run(capsys, "nodes", "revoke", "ship-1", "--reason", "sold")[0] == 0
    code, _, err = run(capsys, "nodes", "rotate", "ship-1")
    assert code == 1 and "revoked" in err
    code, _, err = run(capsys, "nodes", "revoke", "ship-9", "--reason", "x")
    assert code == 1 and "not registered" in err
    code, out, _ = run(capsys, "nodes", "list", "--json")
    (listed,) = [json.loads(line) for line in out.splitlines()]
    assert listed["node_id"] == "ship-1" and listed["status"] == "REVOKED"
    assert listed["revoke_reason"] == "sold"
    code, out, _ = run(capsys, "nodes", "list")
    assert code == 0 and "ship-1" in out and "REVOKED" in out


def test_a_lost_key_file_is_never_replaced_once_nodes_are_registered(
    workdir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "nodes", "register", "ship-1")[0] == 0
    key_file = workdir / "tidesync-data" / "master.key"
    key_file.unlink()
    code, _, err = run(capsys, "nodes", "register", "ship-2")
    assert code == 1 and f"master key file {key_file} does not exist" in err
    assert not key_file.exists()  # no new key that would open none of the sealed secrets


def test_groups_and_tags_are_set_shown_and_listed(
    workdir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "nodes", "register", "ship-1")[0] == 0
    with pytest.raises(SystemExit):
        main(["nodes", "profile", "ship-1", "--group", "north"])  # --reason is required
    capsys.readouterr()
    code, out, _ = run(capsys, "nodes", "profile", "ship-1", "--group", "north-sea",
                       "--group", "tankers", "--tag", "ice-class", "--reason", "new route")
    assert code == 0 and "groups north-sea,tankers, tags ice-class" in out
    code, out, _ = run(capsys, "nodes", "show", "ship-1", "--json")
    shown = json.loads(out)
    assert (shown["groups"], shown["tags"]) == (["north-sea", "tankers"], ["ice-class"])
    code, out, _ = run(capsys, "nodes", "show", "ship-1")
    assert code == 0 and "groups: north-sea,tankers" in out and "tags: ice-class" in out
    code, out, _ = run(capsys, "nodes", "list")
    assert code == 0 and "north-sea,tankers" in out and "ice-class" in out
    code, _, err = run(capsys, "nodes", "profile", "ship-1", "--group", "North Sea",
                       "--reason", "typo")
    assert code == 1 and "must match" in err
    code, _, err = run(capsys, "nodes", "show", "ship-9")
    assert code == 1 and "not registered" in err
    assert run(capsys, "nodes", "profile", "ship-1", "--reason", "left the fleet")[0] == 0
    (listed,) = [json.loads(line) for line in run(capsys, "nodes", "list", "--json")[1]
                 .splitlines()]
    assert (listed["groups"], listed["tags"]) == ([], [])


def test_an_uplink_limit_is_set_shown_listed_and_lifted(
    workdir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "nodes", "register", "ship-1")[0] == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "nodes", "uplink", "ship-1", "--rate", "128KiB",
                       "--reason", "VSAT plan")
    assert code == 0 and "uplink 131072 B/s, burst 16384 B" in out
    shown = json.loads(run(capsys, "nodes", "show", "ship-1", "--json")[1])
    assert (shown["uplink_rate_bytes_per_sec"], shown["uplink_burst_bytes"]) == (131072, 16384)
    code, out, _ = run(capsys, "nodes", "list")
    assert code == 0 and "131072" in out
    code, _, err = run(capsys, "nodes", "uplink", "ship-1", "--rate", "100", "--reason", "x")
    assert code == 1 and "must be 0 (none) or 1024" in err
    with pytest.raises(SystemExit):
        main(["nodes", "uplink", "ship-1", "--rate", "lots", "--reason", "x"])
    capsys.readouterr()
    code, out, _ = run(capsys, "nodes", "uplink", "ship-1", "--rate", "0",
                       "--reason", "unmetered")
    assert code == 0 and "no limit set on the shore" in out
