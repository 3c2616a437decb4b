"""The console over HTTP at /graphql: a pure-ASGI guard (body size, bearer token) in front of
strawberry's view, which masks errors before they are encoded.

Every answer is GraphQL JSON, refusals before execution too: 401 without a valid token of an
active user, 413 beyond the body limit, 503 while the user store is unreachable, 400 (or 405,
415) for a body that is not one GraphQL request object, for GET and for refused text.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from cross_web import HTTPException
from graphql import GraphQLError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Message, Receive, Scope, Send
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLHTTPResponse, process_result
from strawberry.types import ExecutionResult

from tidesync.domain.errors import ErrorCode as DomainCode
from tidesync.domain.errors import TidesyncError
from tidesync.graphql.accounts import Principal
from tidesync.graphql.console import Console
from tidesync.graphql.context import Context
from tidesync.graphql.errors import ErrorCode, ErrorReason, Unavailable, client_error, mask
from tidesync.graphql.schema import build_schema
from tidesync.graphql.text import UNSTORABLE_MESSAGE, unstorable
from tidesync.graphql.threads import blocking

log = logging.getLogger(__name__)

PRINCIPAL_KEY = "tidesync.principal"
MAX_TOKEN_CHARS = 200
_SUGGESTION = re.compile(r"\s*Did you mean [^?]*\?")


class RequestRefused(HTTPException, TidesyncError):
    """A request refused before execution, answered as a GraphQL error with a code."""

    code = DomainCode.INVALID_INPUT

    def __init__(self, status: int, message: str, code: ErrorCode = ErrorCode.BAD_REQUEST,
                 reason: ErrorReason | None = None) -> None:
        super().__init__(status, message)
        self.client_code = code
        self.error_reason = reason


class ConsoleView(GraphQL[Context, None]):
    """strawberry's ASGI view with the console's context and error mask."""

    def __init__(self, console: Console) -> None:
        introspection = console.settings.introspection
        super().__init__(build_schema(console.settings),
                         graphql_ide="graphiql" if introspection else None,
                         allow_queries_via_get=False, multipart_uploads_enabled=False,
                         subscription_protocols=())
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # strawberry answers its own refusals (GET, batches, content types) as plain text.
        try:
            response = await self.run(Request(scope=scope, receive=receive))
        except RequestRefused as refused:
            response = _error_response(refused.status_code, refused.client_code, refused.reason,
                                       refused.error_reason)
        except HTTPException as refused:
            code = (ErrorCode.UNAUTHENTICATED if refused.status_code == 401
                    else ErrorCode.BAD_REQUEST)
            response = _error_response(refused.status_code, code, refused.reason)
        await response(scope, receive, send)

    async def get_context(self, request: Any, response: Any) -> Context:
        principal = request.scope.get(PRINCIPAL_KEY)
        if not isinstance(principal, Principal):
            raise HTTPException(401, "a bearer token is required")
        return Context(self.console, principal, request)

    async def process_result(self, request: Request,
                             result: ExecutionResult) -> GraphQLHTTPResponse:
        if result.errors:
            result.errors = [self._unsuggested(mask(error)) for error in result.errors]
        return process_result(result)

    def _unsuggested(self, error: GraphQLError) -> GraphQLError:
        """Without introspection, "Did you mean …?" would list the schema bit by bit."""
        if self.console.settings.introspection or "Did you mean" not in error.message:
            return error
        error.message = _SUGGESTION.sub("", error.message)
        error.args = (error.message,)
        return error

    def decode_json(self, data: str | bytes) -> object:
        try:
            document = json.loads(data)
        except ValueError:  # Also bytes that are not UTF-8.
            raise RequestRefused(400, "the body is not JSON", reason=ErrorReason.NOT_JSON,
                                 ) from None
        if not isinstance(document, dict):
            raise RequestRefused(400, "the body must be one GraphQL request object")
        if unstorable(document):
            raise RequestRefused(400, UNSTORABLE_MESSAGE, ErrorCode.BAD_USER_INPUT,
                                 ErrorReason.UNSTORABLE_TEXT)
        return document


class ConsoleEndpoint:
    """ASGI app for /graphql: checks size and credentials, then hands over to the view."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.view = ConsoleView(console)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await _answer(scope, receive, send, 404, ErrorCode.BAD_REQUEST, "not found")
            return
        headers = Headers(scope=scope)
        if self._ide_page(scope, headers):
            await HTMLResponse(self.view.graphql_ide_html)(scope, receive, send)
            return
        body = await _read_body(receive, self.console.settings.max_body_bytes, headers)
        if body is None:
            await _answer(scope, receive, send, 413, ErrorCode.BAD_REQUEST,
                          f"the request body exceeds {self.console.settings.max_body_bytes}"
                          " bytes", ErrorReason.BODY_TOO_LARGE)
            return
        principal = await self._principal(headers)
        if isinstance(principal, Response):
            await principal(scope, receive, send)
            return
        await self.view({**scope, PRINCIPAL_KEY: principal}, _replay(body), send)

    def _ide_page(self, scope: Scope, headers: Headers) -> bool:
        return (self.console.settings.introspection and scope["method"] == "GET"
                and "text/html" in headers.get("accept", ""))

    async def _principal(self, headers: Headers) -> Principal | Response:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
            return _error_response(401, ErrorCode.UNAUTHENTICATED,
                                   "a bearer token is required (Authorization: Bearer …)")
        try:
            principal = await blocking(self.console.authenticator.authenticate, token)
        except Unavailable:
            return _error_response(503, ErrorCode.UNAVAILABLE,
                                   "the user store is unavailable; retry shortly")
        if principal is None:
            return _error_response(401, ErrorCode.UNAUTHENTICATED,
                                   "the token is not valid, has expired, or its user is"
                                   " revoked")
        return principal


async def _read_body(receive: Receive, limit: int, headers: Headers) -> bytes | None:
    """The whole body, or None when it is (or says it is) larger than `limit`."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _error_response(status: int, code: ErrorCode, message: str,
                    reason: ErrorReason | None = None) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if status == 503:
        headers["Retry-After"] = "5"
    body = json.dumps({"data": None, "errors": [client_error(code, message, reason)]})
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def _answer(scope: Scope, receive: Receive, send: Send, status: int, code: ErrorCode,
                  message: str, reason: ErrorReason | None = None) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await _error_response(status, code, message, reason)(scope, receive, send)
