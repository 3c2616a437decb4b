"""The root of tidesync's errors.

Every error tidesync raises on purpose derives from `TidesyncError`, so an entrypoint can tell
"tidesync refused or could not do this, for a reason it names" from a bug. Errors that mean a
store, service, peer or server cannot be reached now (the same call may work later) derive from
`Unavailable`. `code` is a stable, upper-case reason code; subclasses narrow it.
"""

from __future__ import annotations


class TidesyncError(Exception):
    """An error tidesync raises on purpose; `code` names the reason for machines."""

    code: str = "TIDESYNC_ERROR"


class Unavailable(TidesyncError):
    """Something tidesync needs cannot be reached now; the same call may succeed later."""

    code: str = "UNAVAILABLE"
