"""`ship_reconciler`, as `tidesync ship run` wires it: built on the shore's first turn, then
answering from the `[ship_target]` database over the link like the reconciler itself."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import zstandard

from tests.unit.test_reconcile_digests import NOW, _rows, _side, _table
from tidesync.bootstrap.ship_reconcile import DeferredReconciler, ship_reconciler
from tidesync.config import Config, ShipConfig, ShipTargetConfig, ShipTargetKind
from tidesync.domain.downlink_command import CommandResult, ReconcilePayload
from tidesync.target import reconciliation
from tidesync.wire import sync_pb2 as pb


class AnsweringLink:
    """The link's reconcile_answer: keeps what the ship posted."""

    def __init__(self) -> None:
        self.posted: list[pb.ReconcileAnswer] = []

    def reconcile_answer(self, message: pb.ReconcileAnswer) -> pb.ReconcileAnswerResponse:
        self.posted.append(message)
        return pb.ReconcileAnswerResponse(accepted=True)


def _config(ship_db: Path) -> Config:
    return Config(ship=ShipConfig(node_id="ship-7"),
                  ship_target=ShipTargetConfig(kind=ShipTargetKind.SQLITE,
                                               sqlite_path=str(ship_db)))


def test_a_link_that_cannot_post_answers_gets_no_reconciler(tmp_path: Path) -> None:
    assert ship_reconciler(_config(tmp_path / "ship.sqlite"), object()) is None


def test_the_reconciler_is_built_on_the_first_turn_and_answers_it(tmp_path: Path) -> None:
    rows = _rows(400)
    _table(tmp_path / "shore.sqlite", rows)
    _table(tmp_path / "ship.sqlite", {key: qty + (key[0] == 2) for key, qty in rows.items()})
    link = AnsweringLink()
    reconciler = ship_reconciler(_config(tmp_path / "ship.sqlite"), link)
    assert isinstance(reconciler, DeferredReconciler) and not reconciler.loaded

    with _side(tmp_path / "shore.sqlite") as shore:
        first = reconciliation.start(*shore, "table:main.stock", NOW)
    turn = ReconcilePayload(uuid.uuid4(), first.round, "main.stock",
                            reconciliation.encode(first).decode())
    outcome = reconciler.answer(turn, b"command-1")

    assert reconciler.loaded
    assert outcome.result is CommandResult.COMMAND_APPLIED
    assert [(p.node_id, p.exchange_id, p.command_id) for p in link.posted] == [
        ("ship-7", turn.exchange_id.bytes, b"command-1")]
    answer = reconciliation.decode(
        zstandard.ZstdDecompressor().decompress(link.posted[0].message))
    assert answer.round == first.round + 1 and not answer.done  # site 2 differs: go deeper


def test_the_wiring_loads_no_sqlalchemy_before_the_first_turn(tmp_path: Path) -> None:
    probe = ("import sys\n"
             "from tidesync.bootstrap.ship_reconcile import ship_reconciler\n"
             "from tidesync.config import Config\n"
             "class Link:\n"
             "    def reconcile_answer(self, message): ...\n"
             "assert ship_reconciler(Config(), Link()) is not None\n"
             "print('sqlalchemy' in sys.modules)\n")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, timeout=120).stdout.split()
    assert loaded == ["False"]
