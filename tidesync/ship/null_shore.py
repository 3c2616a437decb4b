"""A shore without a network, for measuring the ship client alone (`python -m benchmarks ship`).

It answers the way `tidesync shore serve` does when nothing goes wrong: an upload's events
RECEIVED, named by offset ranges (the `?answer=ranges` form every ship asks for), and each
receipts page up to `limit` of the events received since the last page APPLIED, by ranges
too. So the client takes the path it takes on a fleet: each event is recorded, answered
received, then made terminal by a receipt. It decodes nothing.
"""

from __future__ import annotations

import threading
from array import array
from collections import deque

from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.transport import LinkCounters
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.ranges import Stream, encode_ranges


class NullShoreLink:
    """A shore that receives every upload and applies every event it received."""

    def __init__(self) -> None:
        self.counters = LinkCounters()
        self.uploaded = 0
        # Received, not yet in a receipts page: runs of offsets of one stream, in order
        # (8 bytes an event: this shore shares the measured process).
        self._received: deque[tuple[Stream, array[int]]] = deque()
        self._waiting = 0
        self._pages = 0
        self._lock = threading.Lock()  # uploads answer on their own threads

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        runs: dict[Stream, array[int]] = {}
        for event in batch.events:
            stream = Stream(event.source_topic, event.source_partition, event.replay_epoch)
            runs.setdefault(stream, array("q")).append(event.source_position)
        strings, groups = encode_ranges((stream, offset) for stream, offsets in runs.items()
                                        for offset in offsets)
        with self._lock:
            self.counters.physical_bytes += len(batch.body)
            self.uploaded += len(batch.events)
            self._received.extend(runs.items())
            self._waiting += len(batch.events)
        return pb.UploadBatchResponse(batch_id=batch.batch_id.bytes, strings=strings,
                                      received=groups)

    def receipts(self, cursor: str, limit: int) -> pb.ReceiptsPage:
        applied: list[tuple[Stream, int]] = []
        with self._lock:
            while self._received and len(applied) < limit:
                stream, offsets = self._received.popleft()
                take = limit - len(applied)
                if len(offsets) > take:
                    self._received.appendleft((stream, offsets[take:]))
                applied += ((stream, offset) for offset in offsets[:take])
            self._waiting -= len(applied)
            more = self._waiting > 0
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
