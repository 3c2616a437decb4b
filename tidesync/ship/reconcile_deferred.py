"""The one error of the ship's reconciliation that the downlink loop handles: a turn answered
later. Kept apart from `tidesync.ship.reconcile` so the client imports no database toolkit
unless it reconciles.
"""

from __future__ import annotations

from tidesync.domain.errors import Unavailable


class ReconcileDeferred(Unavailable):
    """The business database or the shore could not be reached: the turn is answered later."""

    reason_code = "RECONCILE_RETRYING"
