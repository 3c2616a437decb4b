"""The ship link's failures: what went wrong with a request, and what the client does next.

Kept apart from the transport (`tidesync.ship.transport`, which re-exports them) so that the
pipeline's modules can name them without the HTTP machinery.
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass

from tidesync.domain.errors import ErrorCode, TidesyncError

CLOCK_SKEW_REASON = "AUTH_EXPIRED_TIMESTAMP"
_RETRYABLE_REASONS = frozenset({CLOCK_SKEW_REASON, "AUTH_REPLAYED"})
"""401s that a new request fixes (a corrected clock, a fresh request id): never a block."""


class Disposition(enum.Enum):
    """What the client does after a failed request."""

    RETRY = "RETRY"            # back off and send the same thing again
    SPLIT = "SPLIT"            # the body is too large: send fewer events
    BLOCK_NODE = "BLOCK_NODE"  # identity or protocol refused: stop uploading, report BLOCKED


class LinkReason(enum.StrEnum):
    NETWORK_ERROR = "NETWORK_ERROR"
    TIMEOUT = "TIMEOUT"
    BAD_RESPONSE = "BAD_RESPONSE"
    CLOCK_SKEW = "CLOCK_SKEW"
    RESPONSE_UNSIGNED = "RESPONSE_UNSIGNED"
    RESPONSE_FORGED = "RESPONSE_FORGED"
    STALLED = "STALLED"
    """Given up by the client: it was on its way when the link went silent and had not ended
    when the link answered again (see `HttpShoreLink.abandon`)."""


class LinkError(TidesyncError):
    """A request that did not produce a usable answer."""

    code = ErrorCode.LINK_DOWN

    disposition: Disposition = Disposition.RETRY
    answer_lost: bool = False
    """The whole request went out and its answer did not come back: the shore may have
    acted on it (an upload's fate is then asked before the batch goes again)."""
    body_cut: bool = False
    """The connection failed while the body was being written: part of it may have arrived
    (an upload's fate is asked too: the shore may keep that part)."""

    def __init__(self, reason: str, message: str, *, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason, self.status, self.retry_after = reason, status, retry_after


class LinkDown(LinkError):
    """No answer: connection refused or reset, DNS, TLS or a timeout. Always retried."""


def link_is_down(error: LinkError) -> bool:
    """Whether the request got no answer at all (the network, not the shore, failed)."""
    return isinstance(error, LinkDown) and error.reason in (LinkReason.NETWORK_ERROR,
                                                            LinkReason.TIMEOUT)


class ConnectionClosed(LinkDown):
    """The peer hung up or reset the connection under the request."""


@dataclass(frozen=True)
class BatchUnknown:
    """The shore has no answer to a batch but keeps the first `resume_from` bytes of its body
    (an upload cut off mid-way): only the rest needs to go."""

    resume_from: int


class ShoreRefused(LinkError):
    """The shore answered with an error status and (normally) an ErrorResponse."""

    code = ErrorCode.SHORE_REFUSED

    def __init__(self, reason: str, message: str, *, status: int,
                 retry_after: float | None = None,
                 server_time: dt.datetime | None = None) -> None:
        super().__init__(reason, message, status=status, retry_after=retry_after)
        self.disposition = disposition_of(status, reason)
        self.server_time = server_time
        self.resume_from = 0
        """BATCH_UNKNOWN: the bytes of the batch's body the shore kept from a cut upload."""


def disposition_of(status: int, reason: str = "") -> Disposition:
    if status in (408, 429) or status >= 500 or reason in _RETRYABLE_REASONS:
        return Disposition.RETRY
    if status == 413:
        return Disposition.SPLIT
    # 401/403 identity, 426 protocol; any other 4xx is a request this client cannot fix
    # by sending it again.
    return Disposition.BLOCK_NODE
