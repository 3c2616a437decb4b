"""Reconciliation commands on the wire: a RECONCILE turn and a SNAPSHOT_KEYS repair as the
ship reads them in its commands page (messages and key lists zstd-compressed JSON)."""

from __future__ import annotations

import json

from tidesync.domain.downlink_command import ReconcilePayload, SnapshotKeysPayload
from tidesync.target.reconciliation import pack
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import NameTable


def reconcile_to_wire(payload: ReconcilePayload | SnapshotKeysPayload, names: NameTable,
                      out: pb.DownlinkCommand) -> None:
    if isinstance(payload, ReconcilePayload):
        out.reconcile.exchange_id = payload.exchange_id.bytes
        out.reconcile.round = payload.round
        out.reconcile.ship_table_ref = names.ref(payload.ship_table)
        out.reconcile.message = pack(payload.message.encode())
        return
    request = out.snapshot_keys
    request.exchange_id = payload.exchange_id.bytes
    request.ship_table_ref = names.ref(payload.ship_table)
    request.keys = pack(json.dumps([list(key) for key in payload.keys],
                                   separators=(",", ":"), ensure_ascii=False).encode())
    request.actor = payload.actor
    request.reason = payload.reason
