"""Text the console accepts: nothing a PostgreSQL text column cannot hold (NUL) and no lone
UTF-16 surrogate, refused at the edge (reason UNSTORABLE_TEXT) before anything is stored."""

from __future__ import annotations

import re

from graphql import GraphQLError, StringValueNode, ValidationRule

from tidesync.graphql.errors import ErrorCode, ErrorReason

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

UNSTORABLE_MESSAGE = "text may not contain NUL characters or lone UTF-16 surrogates"


def unstorable(value: object) -> bool:
    """Whether any text in the value (strings, and keys and items of JSON data) is refused."""
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is not None
    if isinstance(value, dict):
        return any(unstorable(key) or unstorable(item) for key, item in value.items())
    if isinstance(value, list):
        return any(unstorable(item) for item in value)
    return False


class UnstorableTextRule(ValidationRule):
    """Refuses string literals in the document that hold refused text (`"\\u0000"`)."""

    def enter_string_value(self, node: StringValueNode, *_: object) -> None:
        if unstorable(node.value):
            self.report_error(GraphQLError(UNSTORABLE_MESSAGE, node, extensions={
                "code": ErrorCode.BAD_USER_INPUT.value,
                "reason": ErrorReason.UNSTORABLE_TEXT.value}))
