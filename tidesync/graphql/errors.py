"""Errors the console shows clients, and the mask for everything else.

Deliberate errors carry a stable `code` (the usual GraphQL server categories) and, where one
category covers several causes, a `reason`; any other exception reaches the client only as
"internal error" with an id, and is logged under that id (type and traceback, no message).
"""

from __future__ import annotations

import enum
import logging
import traceback
import uuid
from typing import Any

from graphql import GraphQLError

log = logging.getLogger(__name__)


class ErrorCode(enum.StrEnum):
    """What kind of error: the caller's (first six) or the server's (last three)."""

    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    BAD_USER_INPUT = "BAD_USER_INPUT"
    BAD_REQUEST = "BAD_REQUEST"
    GRAPHQL_PARSE_FAILED = "GRAPHQL_PARSE_FAILED"
    GRAPHQL_VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"
    WAIT_TIMEOUT = "WAIT_TIMEOUT"
    UNAVAILABLE = "UNAVAILABLE"
    INTERNAL_SERVER_ERROR = "INTERNAL_SERVER_ERROR"


class ErrorReason(enum.StrEnum):
    """The cause, where a code covers several."""

    QUERY_TOO_DEEP = "QUERY_TOO_DEEP"
    TOO_MANY_ALIASES = "TOO_MANY_ALIASES"
    QUERY_TOO_COSTLY = "QUERY_TOO_COSTLY"
    PAGE_TOO_LARGE = "PAGE_TOO_LARGE"
    BODY_TOO_LARGE = "BODY_TOO_LARGE"
    UNSTORABLE_TEXT = "UNSTORABLE_TEXT"
    NOT_JSON = "NOT_JSON"
    TOO_MANY_WAITS = "TOO_MANY_WAITS"


class ConsoleError(GraphQLError):
    """An error meant for the client: its message is safe to show."""

    code = ErrorCode.INTERNAL_SERVER_ERROR

    def __init__(self, message: str, **extensions: Any) -> None:
        super().__init__(message, extensions={"code": self.code.value, **extensions})


class Unauthenticated(ConsoleError):
    code = ErrorCode.UNAUTHENTICATED


class Forbidden(ConsoleError):
    code = ErrorCode.FORBIDDEN


class BadUserInput(ConsoleError):
    code = ErrorCode.BAD_USER_INPUT


class PageTooLarge(BadUserInput):
    def __init__(self, message: str) -> None:
        super().__init__(message, reason=ErrorReason.PAGE_TOO_LARGE.value)


class WaitTimeout(ConsoleError):
    code = ErrorCode.WAIT_TIMEOUT


class Unavailable(ConsoleError):
    code = ErrorCode.UNAVAILABLE


def client_error(code: ErrorCode, message: str,
                 reason: ErrorReason | None = None) -> dict[str, object]:
    """A GraphQL error object for answers given before execution (authentication, limits)."""
    extensions: dict[str, str] = {"code": code.value}
    if reason is not None:
        extensions["reason"] = reason.value
    return {"message": message, "extensions": extensions}


def limit_error(reason: ErrorReason, message: str) -> GraphQLError:
    """A request refused by a limit during validation."""
    return GraphQLError(message, extensions={
        "code": ErrorCode.GRAPHQL_VALIDATION_FAILED.value, "reason": reason.value})


def mask(error: GraphQLError) -> GraphQLError:
    """The error as the client may see it.

    Kept: errors about the request itself (parse, validation, coercion: no original
    exception; given a code when they have none) and deliberately raised GraphQLErrors
    (ConsoleErrors, permission refusals). Anything else is replaced, and logged with an id
    the client gets to quote.
    """
    original = error.original_error
    if original is None or isinstance(original, GraphQLError):
        if not (error.extensions or {}).get("code"):
            error.extensions = {**(error.extensions or {}), "code": _code_of(error).value}
        return error
    error_id = uuid.uuid4().hex
    frames = "".join(traceback.format_tb(original.__traceback__))
    log.error("console request failed [%s] at %s: %s\n%s", error_id,
              ".".join(str(p) for p in error.path or ()), type(original).__name__, frames)
    return GraphQLError("internal error", nodes=error.nodes, path=error.path,
                        extensions={"code": ErrorCode.INTERNAL_SERVER_ERROR.value,
                                    "errorId": error_id})



def _code_of(error: GraphQLError) -> ErrorCode:
    if error.path:
        return ErrorCode.INTERNAL_SERVER_ERROR  # e.g. a null where the schema promises none
    if error.message.startswith("Syntax Error"):
        return ErrorCode.GRAPHQL_PARSE_FAILED
    return ErrorCode.GRAPHQL_VALIDATION_FAILED
