"""The zstd dictionaries ships send (POST /sync/v1/dictionaries): kept per node by id in
PostgreSQL, at most MAX_PER_NODE each, and held loaded in a small cache (a dictionary never
changes under its id, so a cached one is never stale).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from typing import Any

import zstandard
from psycopg_pool import ConnectionPool

from tidesync.ingress.database import Connection, transaction
from tidesync.ingress.stores import DictionaryStore
from tidesync.wire.dictionaries import DictionaryLookup, load_dictionary

MAX_PER_NODE = 4
"""Dictionaries kept per node: the latest ones it sent."""
CACHE_ENTRIES = 64
"""Loaded dictionaries held in memory (each at most 64 KiB plus zstd's tables)."""

_KEEP = (
    "INSERT INTO wire_dictionary (origin_node_id, dictionary_id, content, received_at)"
    " VALUES (%(node)s, %(id)s, %(content)s, %(now)s)"
    " ON CONFLICT (origin_node_id, dictionary_id) DO UPDATE SET received_at = %(now)s"
)
_PRUNE = (
    "DELETE FROM wire_dictionary WHERE origin_node_id = %(node)s AND dictionary_id NOT IN ("
    " SELECT dictionary_id FROM wire_dictionary WHERE origin_node_id = %(node)s"
    " ORDER BY received_at DESC, dictionary_id LIMIT %(keep)s)"
)
_FIND = "SELECT content FROM wire_dictionary WHERE origin_node_id = %s AND dictionary_id = %s"


class PostgresDictionaries:
    """The `wire_dictionary` table (migration 0066)."""

    def __init__(self, pool: ConnectionPool[Connection]) -> None:
        self.pool = pool

    def find(self, node_id: str, dictionary_id: bytes) -> bytes | None:
        with transaction(self.pool) as conn:
            row = conn.execute(_FIND, (node_id, dictionary_id)).fetchone()
        return None if row is None else bytes(row[0])

    def _keep(self, conn: Connection, node_id: str, dictionary_id: bytes, content: bytes,
              now: dt.datetime) -> None:
        values = {"node": node_id, "id": dictionary_id, "content": content, "now": now,
                  "keep": MAX_PER_NODE}
        conn.execute(_KEEP, values)
        conn.execute(_PRUNE, values)


class DictionaryCache:
    """Loaded dictionaries by (node, id), the least recently used dropped first."""

    def __init__(self, store: DictionaryStore[Any] | None,
                 entries: int = CACHE_ENTRIES) -> None:
        self.store, self.entries = store, entries
        self._loaded: OrderedDict[tuple[str, bytes], zstandard.ZstdCompressionDict] = (
            OrderedDict())
        self._lock = threading.Lock()

    def put(self, node_id: str, dictionary_id: bytes,
            dictionary: zstandard.ZstdCompressionDict) -> None:
        with self._lock:
            self._loaded[(node_id, dictionary_id)] = dictionary
            self._loaded.move_to_end((node_id, dictionary_id))
            while len(self._loaded) > self.entries:
                self._loaded.popitem(last=False)

    def get(self, node_id: str, dictionary_id: bytes) -> zstandard.ZstdCompressionDict | None:
        """The node's dictionary of that id, from memory or the store (None: not kept)."""
        with self._lock:
            found = self._loaded.get((node_id, dictionary_id))
            if found is not None:
                self._loaded.move_to_end((node_id, dictionary_id))
                return found
        content = self.store.find(node_id, dictionary_id) if self.store is not None else None
        if content is None:
            return None
        dictionary = load_dictionary(content)
        self.put(node_id, dictionary_id, dictionary)
        return dictionary

    def lookup(self, node_id: str) -> DictionaryLookup:
        """The lookup of one node's dictionaries, for reading its upload bodies."""
        return lambda dictionary_id: self.get(node_id, dictionary_id)
