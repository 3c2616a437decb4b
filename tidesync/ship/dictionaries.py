"""zstd dictionaries of the ship's upload bodies: trained on its own recent batches, used only
while they measurably make bodies smaller, sent to the shore before the first body that needs
them, and sent again whenever the shore says it does not hold one.

`BatchDictionaries` compresses bodies (the batcher's `BodyCompressor`): it keeps the latest
batches as samples, trains a dictionary now and then and compares, on the newest samples it
did not train on, their compressed size without a dictionary, with the one in use and with
the new one; a dictionary is used only while it saves at least `min_saving` of the bytes.
`DictionaryLink` wraps the shore link: it sends a new dictionary before the next upload and
answers an UNKNOWN_DICTIONARY refusal by sending the dictionary again (or, if that fails, the
same batch without it), so the client never sees the difference.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import zstandard

from tidesync.ship.batcher import OutgoingBatch
from tidesync.ship.transport import (
    Disposition,
    LinkError,
    ShoreLink,
    ShoreRefused,
    link_is_down,
)
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.dictionaries import (
    MAX_DICTIONARY_BYTES,
    compress_with,
    dictionary_id,
    named_dictionary,
)
from tidesync.wire.protocol import UPLOAD_V2_VERSION, WireReason

log = logging.getLogger(__name__)

_KNOWN = 4
"""Dictionaries remembered by id (the one in use, the one waiting, recent ones)."""
_RETRY_SECONDS = 60.0
_MAX_FAILURES = 3
"""Dictionary uploads refused or answered unreadably before dictionaries are given up."""


@dataclass(frozen=True, slots=True)
class ShipDictionary:
    name: bytes
    """Its id: the SHA-256 of `content`."""
    content: bytes
    dictionary: zstandard.ZstdCompressionDict


@dataclass(frozen=True, slots=True)
class Measurement:
    """Compressed bytes of the newest samples: without a dictionary, with the one in use,
    with the one just trained."""

    plain: int
    current: int | None
    trained: int | None


class BatchDictionaries:
    """Samples, training and the dictionary in use (see the module's docstring)."""

    def __init__(self, max_bytes: int = 16 * 1024, *, min_samples: int = 24,
                 retrain_every: int = 256, max_samples: int = 96, sample_bytes: int = 32 * 1024,
                 min_saving: float = 0.05) -> None:
        if not 256 <= max_bytes <= MAX_DICTIONARY_BYTES:
            raise ValueError(f"a dictionary holds 256..{MAX_DICTIONARY_BYTES} bytes")
        if min_samples < 4 or retrain_every < min_samples or max_samples < min_samples:
            raise ValueError("dictionary samples: 4 <= min_samples <= retrain_every,"
                             " max_samples")
        self.max_bytes, self.min_samples, self.retrain_every = max_bytes, min_samples, retrain_every
        self.sample_bytes, self.min_saving = sample_bytes, min_saving
        self.samples: deque[bytes] = deque(maxlen=max_samples)
        self.since_training = 0
        self.active: ShipDictionary | None = None
        """The dictionary bodies are compressed with (the shore holds it)."""
        self.waiting: ShipDictionary | None = None
        """A dictionary that pays and that the shore does not hold yet."""
        self.known: OrderedDict[bytes, ShipDictionary] = OrderedDict()
        self.disabled = False
        self.last: Measurement | None = None
        self._lock = threading.Lock()
        """Bodies are made on the client's thread, answers arrive on upload threads."""

    # ------------------------------------------------------------------ compressing

    def compress(self, raw: bytes, level: int) -> bytes:
        """The body of a serialized batch: with the dictionary in use, else plain zstd."""
        if not self.disabled:
            self.samples.append(raw[:self.sample_bytes])
            self.since_training += 1
            if self._training_due():
                self.train(level)
        active = self.active
        if active is None:
            return codec.compress_bytes(raw, level)
        return compress_with(raw, active.dictionary, active.name, level)

    def plain(self, body: bytes, level: int = codec.DEFAULT_LEVEL) -> bytes | None:
        """The same batch without its dictionary (None: not one this process made)."""
        name, frame = named_dictionary(body)
        known = self.known.get(name) if name is not None else None
        if known is None:
            return None
        raw = zstandard.ZstdDecompressor(dict_data=known.dictionary).decompress(frame)
        return codec.compress_bytes(raw, level)

    # ------------------------------------------------------------------ training

    def _training_due(self) -> bool:
        if len(self.samples) < self.min_samples:
            return False
        if self.active is None and self.waiting is None:
            return self.since_training >= self.min_samples
        return self.since_training >= self.retrain_every

    def train(self, level: int = codec.DEFAULT_LEVEL) -> Measurement | None:
        """Train on all samples but the newest quarter, measure on those, and choose the
        dictionary to use: the smaller of the one in use and the new one, if it saves at
        least `min_saving` against plain zstd; else none."""
        self.since_training = 0
        samples = list(self.samples)
        held = samples[-max(2, len(samples) // 4):]
        training: list[bytes | bytearray | memoryview] = list(samples[:-len(held)])
        try:
            trained = zstandard.train_dictionary(self.max_bytes, training, level=level)
        except zstandard.ZstdError:
            log.info("no zstd dictionary could be trained on %d batches", len(training))
            return None
        content = trained.as_bytes()
        new = ShipDictionary(dictionary_id(content), content, trained)
        current = self.active or self.waiting
        measured = Measurement(_size(held, None, level),
                               None if current is None else _size(held, current, level),
                               _size(held, new, level))
        self.last = measured
        goal = measured.plain * (1 - self.min_saving)
        with self._lock:
            if self.disabled:
                return None
            if measured.trained is not None and measured.trained <= goal and (
                    measured.current is None or measured.trained < measured.current * 0.98):
                self._remember(new)
                self.waiting = new
            elif measured.current is not None and measured.current > goal:
                self.active = self.waiting = None  # stopped paying: plain zstd from now on
        log.info("zstd dictionary: plain %d B, in use %s B, trained %s B on the newest %d"
                 " batches; %s", measured.plain, measured.current, measured.trained, len(held),
                 "new one chosen" if self.waiting is new else
                 "none pays" if self.active is None and self.waiting is None else "kept")
        return measured

    def _remember(self, dictionary: ShipDictionary) -> None:
        self.known[dictionary.name] = dictionary
        self.known.move_to_end(dictionary.name)
        while len(self.known) > _KNOWN:
            self.known.popitem(last=False)

    # ------------------------------------------------------------------ the shore's side

    def accepted(self, dictionary: ShipDictionary) -> None:
        """The shore holds `dictionary`: bodies use it from now on."""
        with self._lock:
            if self.waiting is dictionary:
                self.active, self.waiting = dictionary, None

    def forget(self, name: bytes) -> None:
        """The shore does not hold the dictionary `name`: send it again before using it."""
        with self._lock:
            if self.active is not None and self.active.name == name:
                self.active, self.waiting = None, self.waiting or self.active

    def disable(self) -> None:
        """The shore takes no dictionaries: plain zstd for the rest of this process."""
        with self._lock:
            self.disabled = True
            self.active = self.waiting = None
            self.samples.clear()


def _size(samples: list[bytes], dictionary: ShipDictionary | None, level: int) -> int:
    compressor = (zstandard.ZstdCompressor(level=level) if dictionary is None else
                  zstandard.ZstdCompressor(level=level, dict_data=dictionary.dictionary,
                                           write_dict_id=False))
    return sum(len(compressor.compress(sample)) for sample in samples)


class DictionaryCarrier(ShoreLink, Protocol):
    """A shore link that can also send a dictionary."""

    def send_dictionary(self, message: pb.WireDictionary) -> pb.WireDictionaryResponse: ...


class DictionaryLink:
    """The shore link, with dictionaries sent when bodies need them (see the module)."""

    def __init__(self, link: DictionaryCarrier, dictionaries: BatchDictionaries, node_id: str,
                 *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.link, self.dictionaries, self.node_id = link, dictionaries, node_id
        self.monotonic = monotonic
        self.retry_at = 0.0
        self.failures = 0
        self.sent = 0
        self._sending = threading.Lock()
        """Uploads run on several threads; one of them sends a waiting dictionary."""

    def upload(self, batch: OutgoingBatch) -> pb.UploadBatchResponse:
        self._send_waiting()
        try:
            return self.link.upload(batch)
        except ShoreRefused as refused:
            name, _ = named_dictionary(batch.body)
            if name is None:
                raise
            if refused.reason == WireReason.UNSUPPORTED_PROTOCOL:
                self.dictionaries.disable()
                raise
            if refused.reason != WireReason.UNKNOWN_DICTIONARY:
                raise
            log.info("the shore does not hold this node's zstd dictionary: sending it again")
            self.dictionaries.forget(name)
        self.retry_at = 0.0
        self._send_waiting()
        active = self.dictionaries.active
        if active is None or active.name != name:
            body = self.dictionaries.plain(batch.body, codec.DEFAULT_LEVEL)
            if body is None:
                raise LinkError(WireReason.UNKNOWN_DICTIONARY,
                                "the batch's dictionary is gone; it is built again")
            batch = dataclasses.replace(batch, body=body, resume_from=0)
        return self.link.upload(batch)

    def _send_waiting(self) -> None:
        if self.dictionaries.waiting is None or not self._sending.acquire(blocking=False):
            return
        try:
            self._send_one()
        finally:
            self._sending.release()

    def _send_one(self) -> None:
        waiting = self.dictionaries.waiting
        now = self.monotonic()
        if waiting is None or now < self.retry_at:
            return
        message = pb.WireDictionary(protocol_version=UPLOAD_V2_VERSION, node_id=self.node_id,
                                    dictionary=waiting.content)
        try:
            answer = self.link.send_dictionary(message)
        except LinkError as error:
            self.retry_at = now + _RETRY_SECONDS
            refused = isinstance(error, ShoreRefused)
            if refused and error.disposition is not Disposition.RETRY:
                self._give_up(f"the shore refused it ({error.reason})")
            elif not refused and not link_is_down(error):
                # An answer that is not the shore's (a server without this endpoint
                # answers unsigned): a few of them and dictionaries are given up.
                self.failures += 1
                if self.failures >= _MAX_FAILURES:
                    self._give_up(f"no usable answer ({error.reason})")
            return
        if answer.dictionary_id != waiting.name:
            self._give_up("the shore named it by another id")
            return
        self.failures = 0
        self.sent += 1
        self.dictionaries.accepted(waiting)
        log.info("zstd dictionary of %d bytes sent to the shore; batches use it from now on",
                 len(waiting.content))

    def _give_up(self, why: str) -> None:
        self.dictionaries.disable()
        log.warning("upload batches go without a zstd dictionary: %s", why)

    # ------------------------------------------------------------------ the rest of the link

    def receipts(self, cursor: str, limit: int) -> pb.ReceiptsPage:
        return self.link.receipts(cursor, limit)

    def heartbeat(self, message: pb.Heartbeat) -> pb.HeartbeatResponse:
        return self.link.heartbeat(message)

    def commands(self, cursor: str, limit: int) -> pb.CommandsPage:
        return self.link.commands(cursor, limit)

    def command_acks(self, message: pb.CommandAcks) -> pb.CommandAcksResponse:
        return self.link.command_acks(message)

    def config(self) -> pb.ConfigResponse:
        return self.link.config()

    def __getattr__(self, name: str) -> Any:
        # probe, close, counters, clock_offset: the wrapped link's own.
        return getattr(self.link, name)
