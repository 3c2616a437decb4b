"""Keyed digests of business values for roles that may not see them: HMAC-SHA256 under the
console's digest key, so a digest cannot be checked against guessed values without the key.

Evidence digests are scoped to one conflict and column (equal digests there: equal values);
record key digests are one per record, so a conflict and its record head show the same one.
Record head cursors hold the raw key digest, so they are sealed (AES-GCM) under the same key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tidesync.graphql.errors import BadUserInput

_BLOCK = 64  # SHA-256's block size, for HMAC computed in SQL
_NONCE_BYTES = 12


class Digests:
    """Keyed digests and sealed cursors under one 32-byte key."""

    def __init__(self, key: bytes) -> None:
        self._evidence_key = _subkey(key, b"evidence")
        self._record_key = _subkey(key, b"record-key")
        self._cursor = AESGCM(_subkey(key, b"cursor"))

    def evidence(self, scope: str, column: str, tagged: object) -> str:
        body = json.dumps([scope, column, tagged], separators=(",", ":"), ensure_ascii=False)
        return hmac.new(self._evidence_key, body.encode(), hashlib.sha256).hexdigest()[:32]

    def record_key(self, key_digest: str) -> str:
        """The shown digest of a record key (from its stored sha256 `key_digest`)."""
        return hmac.new(self._record_key, key_digest.encode(), hashlib.sha256).hexdigest()

    def record_key_pads(self) -> tuple[bytes, bytes]:
        """The inner and outer HMAC pads of the record key digest's key, so SQL can compute
        `sha256(outer || sha256(inner || key_digest))` with core functions."""
        key = self._record_key.ljust(_BLOCK, b"\0")
        return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)

    def seal_cursor(self, key: Sequence[object]) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        text = json.dumps([str(part) for part in key], separators=(",", ":")).encode()
        sealed = nonce + self._cursor.encrypt(nonce, text, b"cursor")
        return base64.urlsafe_b64encode(sealed).decode("ascii").rstrip("=")

    def open_cursor(self, cursor: str | None, arity: int) -> list[object] | None:
        if cursor is None:
            return None
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            key = json.loads(self._cursor.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:],
                                                  b"cursor"))
        except (binascii.Error, InvalidTag, ValueError):
            raise BadUserInput("not a cursor from this list") from None
        if not isinstance(key, list) or len(key) != arity:
            raise BadUserInput("not a cursor from this list")
        return key


def _subkey(key: bytes, purpose: bytes) -> bytes:
    return hmac.new(key, b"tidesync console digests\n" + purpose, hashlib.sha256).digest()
