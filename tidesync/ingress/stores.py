"""What the sync API needs of its tables: small protocols that the PostgreSQL adapters
satisfy (and tests may fake), and the bundle of them the routes use.

Each store has a public method that opens its own transaction and an `_underscore` twin that
runs inside the caller's, so a request's replay check and its writes commit together.
"""

from __future__ import annotations

import datetime as dt
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from tidesync.ingress.auth import NonceStore
from tidesync.wire import sync_pb2 as pb

Conn = TypeVar("Conn")
Conn_co = TypeVar("Conn_co", covariant=True)
Conn_contra = TypeVar("Conn_contra", contravariant=True)


class SyncDatabase(Protocol[Conn_co]):
    """Where the sync tables live: one transaction per request."""

    def transaction(self) -> AbstractContextManager[Conn_co]:
        """A connection inside one transaction, committed when the block ends; raises
        StoreUnavailable when the database is down or busy beyond its timeout."""
        ...

    def start(self) -> None:
        """Connect and bring the schema up to date (blocking; failures are logged)."""
        ...

    def close(self) -> None: ...


class NonceCache(Protocol[Conn_contra]):
    """The request ids already used per node, persisted so a replay fails after a restart."""

    def remember(self, node_id: str, request_id: str, expires_at: dt.datetime,
                 now: dt.datetime) -> bool:
        """Record the id; False if it is already recorded and not yet expired."""
        ...

    def within(self, conn: Conn_contra) -> NonceStore:
        """This cache inside the caller's transaction: an id counts as used only if that
        transaction commits."""
        ...


class Inbox(Protocol[Conn_contra]):
    """Durable receive (§10.2): a batch's new events and its body in one transaction."""

    def receive(self, node_id: str, raw: bytes, batch: pb.UploadBatch,
                now: dt.datetime) -> pb.UploadBatchResponse: ...

    def _receive(self, conn: Conn_contra, node_id: str, raw: bytes, batch: pb.UploadBatch,
                 now: dt.datetime) -> pb.UploadBatchResponse: ...


class ReceiptsReader(Protocol[Conn_contra]):
    """A node's terminal results after a cursor, oldest first."""

    def page(self, node_id: str, after_seq: int, limit: int) -> pb.ReceiptsPage: ...

    def _page(self, conn: Conn_contra, node_id: str, after_seq: int,
              limit: int) -> pb.ReceiptsPage: ...

    def _compact_page(self, conn: Conn_contra, node_id: str, after_seq: int,
                      limit: int) -> pb.ReceiptsPage:
        """The same page with plain APPLIED results as offset ranges."""
        ...


class HeartbeatStore(Protocol[Conn_contra]):
    """The latest heartbeat per node and its metric samples; raises BadHeartbeat for values
    that cannot be stored."""

    def record(self, node_id: str, heartbeat: pb.Heartbeat, now: dt.datetime) -> None: ...

    def _record(self, conn: Conn_contra, node_id: str, heartbeat: pb.Heartbeat,
                now: dt.datetime) -> None: ...


class DictionaryStore(Protocol[Conn_contra]):
    """The zstd dictionaries nodes sent, by node and id (the SHA-256 of the content)."""

    def find(self, node_id: str, dictionary_id: bytes) -> bytes | None: ...

    def _keep(self, conn: Conn_contra, node_id: str, dictionary_id: bytes, content: bytes,
              now: dt.datetime) -> None: ...


class UploadAnswers(Protocol[Conn_contra]):
    """What the shore answered each node's batches, by batch id, for a few days."""

    def _remember(self, conn: Conn_contra, node_id: str, batch_id: bytes,
                  answer: pb.UploadBatchResponse, now: dt.datetime) -> None: ...

    def _recall(self, conn: Conn_contra, node_id: str, batch_id: bytes,
                now: dt.datetime) -> pb.UploadBatchResponse | None: ...


@dataclass
class SyncTables(Generic[Conn]):
    """The sync API's tables on one database, all taking that database's connections."""

    database: SyncDatabase[Conn]
    nonces: NonceCache[Conn]
    inbox: Inbox[Conn]
    receipts: ReceiptsReader[Conn]
    heartbeats: HeartbeatStore[Conn]
    dictionaries: DictionaryStore[Conn] | None = None
    """None: the server takes no zstd dictionaries (ships then send without them)."""
    answers: UploadAnswers[Conn] | None = None
    """None: upload answers are not kept (a ship asking for one is told it is unknown)."""
