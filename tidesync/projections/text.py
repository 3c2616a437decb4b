"""Text as a view can store it: PostgreSQL refuses NUL characters (text and jsonb) and UTF-8
cannot carry lone surrogates, so both become U+FFFD in view rows. The events keep the exact
text; a view that stored it this way can be rebuilt from them."""

from __future__ import annotations

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(value: object) -> object:
    """The value with every string in it (dict keys too) made storable."""
    if isinstance(value, str):
        return _UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def storable_text(value: object) -> str | None:
    """A text column's value: None stays NULL, anything else its storable str()."""
    return None if value is None else _UNSTORABLE.sub(REPLACEMENT, str(value))
