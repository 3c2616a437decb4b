"""The shore master key and the sealing of node signing secrets with it (AES-256-GCM).

HMAC verification needs the secrets themselves, so they are stored encrypted, never hashed.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tidesync.domain.errors import ErrorCode, TidesyncError

log = logging.getLogger(__name__)

KEY_BYTES = 32
_NONCE_BYTES = 12
_SEALED_PREFIX = "aesgcm1:"


class MasterKeyError(TidesyncError):
    """The master key is missing, malformed, readable by others, or does not open a secret."""

    code = ErrorCode.MASTER_KEY


def load_master_key(key_text: str, key_file: str | Path, *, create: bool = False) -> bytes:
    """The key from `key_text` (base64, the `shore.master_key` setting) when set, else from
    `key_file` (`shore.master_key_file`).

    With `create`, a missing file is created with a fresh random key and mode 0600. A file
    that group or others can read is refused.
    """
    if key_text:
        return _decode_key(key_text, "shore.master_key")
    path = Path(key_file)
    if not path.exists():
        if not create:
            raise MasterKeyError(f"master key file {path} does not exist")
        _create_key_file(path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise MasterKeyError(f"master key file {path} must not be accessible to group or others"
                             f" (mode {stat.S_IMODE(mode):o}; chmod 600 it)")
    return _decode_key(path.read_text(encoding="ascii").strip(), str(path))


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    key_text = base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii") + "\n"
    # O_EXCL: two first registrations racing must not end with two different keys.
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w", encoding="ascii") as file:
        file.write(key_text)
    log.warning("created a new master key in %s: keep a copy; node secrets cannot be opened"
                " without it", path.resolve())


def _decode_key(text: str, origin: str) -> bytes:
    try:
        key = base64.b64decode(text, validate=True)
    except binascii.Error as error:
        raise MasterKeyError(f"{origin}: not base64") from error
    if len(key) != KEY_BYTES:
        raise MasterKeyError(f"{origin}: must hold {KEY_BYTES} bytes, has {len(key)}")
    return key


class SecretBox:
    """Seals and opens node secrets. The node id and credential number are authenticated
    data, so a sealed secret copied onto another node or credential does not open."""

    def __init__(self, master_key: bytes) -> None:
        self._aead = AESGCM(master_key)

    def seal(self, secret: bytes, node_id: str, number: int, nonce: bytes) -> str:
        """The sealed text of `secret`; `nonce` is 12 fresh random bytes from the caller."""
        if len(nonce) != _NONCE_BYTES:
            raise ValueError(f"the nonce must be {_NONCE_BYTES} bytes")
        sealed = self._aead.encrypt(nonce, secret, _associated(node_id, number))
        return _SEALED_PREFIX + base64.b64encode(nonce + sealed).decode("ascii")

    def open(self, sealed: str, node_id: str, number: int) -> bytes:
        if not sealed.startswith(_SEALED_PREFIX):
            raise MasterKeyError("unknown sealed secret format")
        try:
            raw = base64.b64decode(sealed[len(_SEALED_PREFIX):], validate=True)
            return self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:],
                                      _associated(node_id, number))
        except (binascii.Error, InvalidTag, ValueError) as error:
            raise MasterKeyError("the master key does not open this node's secret") from error


def _associated(node_id: str, number: int) -> bytes:
    return f"tidesync-node-secret\n{node_id}\n{number}".encode()
