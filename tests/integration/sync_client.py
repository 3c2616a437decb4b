"""A small signed /sync/v1 client over http.client, as a ship would talk to the shore."""

from __future__ import annotations

import datetime as dt
import http.client
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import zstandard

from tidesync.ingress.auth import sign_request
from tidesync.wire import codec
from tidesync.wire import sync_pb2 as pb


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def message(self, cls: type[codec.M]) -> codec.M:
        raw = zstandard.ZstdDecompressor().decompress(self.body) if self.body else b""
        return codec.parse_message(raw, cls)

    def error(self) -> pb.ErrorResponse:
        return self.message(pb.ErrorResponse)


@dataclass
class SyncClient:
    url: str
    node_id: str
    secret: bytes
    clock: Callable[[], dt.datetime]
    sent_request_ids: list[str] = field(default_factory=list)

    def request(self, method: str, target: str, body: bytes = b"", *,
                request_id: str | None = None, headers: dict[str, str] | None = None,
                signed_at: dt.datetime | None = None, sign_body: bytes | None = None,
                secret: bytes | None = None) -> Answer:
        request_id = request_id or str(uuid.uuid4())
        self.sent_request_ids.append(request_id)
        signed = sign_request(self.node_id, secret or self.secret, method, target,
                              body if sign_body is None else sign_body,
                              signed_at or self.clock(), request_id)
        all_headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd",
                       **signed, **(headers or {})}
        return send(self.url, method, target, body, all_headers)

    def upload(self, body: bytes, **kw: object) -> Answer:
        return self.request("POST", "/sync/v1/batches", body, **kw)  # type: ignore[arg-type]

    def heartbeat(self, heartbeat: pb.Heartbeat, **kw: object) -> Answer:
        return self.request("POST", "/sync/v1/heartbeat", codec.compress(heartbeat),
                            **kw)  # type: ignore[arg-type]

    def receipts(self, cursor: str = "", limit: int | None = None,
                 version: str = codec.PROTOCOL_VERSION) -> Answer:
        query = {"cursor": cursor} if cursor else {}
        if limit is not None:
            query["limit"] = str(limit)
        target = "/sync/v1/receipts" + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {codec.PROTOCOL_VERSION_HEADER: version} if version else {}
        return self.request("GET", target, headers=headers)


    def config(self, version: str = codec.PROTOCOL_VERSION) -> Answer:
        headers = {codec.PROTOCOL_VERSION_HEADER: version} if version else {}
        return self.request("GET", "/sync/v1/config", headers=headers)


def send(url: str, method: str, target: str, body: bytes, headers: dict[str, str],
         timeout: float = 60.0) -> Answer:
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port,
                                            timeout=timeout)
    try:
        connection.request(method, target, body=body or None, headers=headers)
        response = connection.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()},
                      response.read())
    finally:
        connection.close()
