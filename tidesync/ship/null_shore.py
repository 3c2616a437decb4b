"""A shore without a network, for measuring the ship client alone (`python -m benchmarks ship`).

It answers the way `tidesync shore serve` does when nothing goes wrong: an upload's events
RECEIVED, named by offset ranges (the `?answer=ranges` form every ship asks for), and each
receipts page up to `limit` of the events received since the last page APPLIED, by ranges
too. So the client
takes the path it takes on a fleet: each event is recorded, answered received, then made
terminal by a receipt. It decodes nothing.
"""

from __future__ import annotations

import threading

from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.transport import LinkCounters
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.ranges import Stream, encode_ranges


class NullShoreLink:
    """A shore that receives every upload and applies every event it received."""

    def __init__(self) -> None:
        self.counters = LinkCounters()
        self.uploaded = 0
        self._received: list[tuple[Stream, int]] = []  # not yet in a receipts page
        self._pages = 0
        self._lock = threading.Lock()  # uploads answer on their own threads

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        received = [(Stream(event.source_topic, event.source_partition, event.replay_epoch),
                     event.source_position) for event in batch.events]
        strings, groups = encode_ranges(received)
        with self._lock:
            self.counters.physical_bytes += len(batch.body)
            self.uploaded += len(batch.events)
            self._received += received
        return pb.UploadBatchResponse(batch_id=batch.batch_id.bytes, strings=strings,
                                      received=groups)

    def receipts(self, cursor: str, limit: int) -> pb.ReceiptsPage:
        with self._lock:
            applied, self._received = self._received[:limit], self._received[limit:]
            more = bool(self._received)
            self._pages += 1
            page = self._pages
        if not applied:
            return pb.ReceiptsPage(next_cursor=cursor)
        strings, groups = encode_ranges(applied)
        return pb.ReceiptsPage(next_cursor=str(page), strings=strings, applied=groups,
                               has_more=more)

    def heartbeat(self, message: pb.Heartbeat) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse()

    def commands(self, cursor: str, limit: int) -> pb.CommandsPage:
        return pb.CommandsPage(next_cursor=cursor)

    def command_acks(self, message: pb.CommandAcks) -> pb.CommandAcksResponse:
        return pb.CommandAcksResponse(
            accepted_command_ids=[ack.command_id for ack in message.acks])

    def config(self) -> pb.ConfigResponse:
        return pb.ConfigResponse()

    def probe(self) -> bool:
        return True

    def close(self) -> None:
        pass
