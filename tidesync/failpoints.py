"""Named fault-injection points for crash tests: `TIDESYNC_FAILPOINTS=name=action,...`.

The only action is `kill` (SIGKILL this process at that point, as a power cut would).
Unset in production, a failpoint costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "TIDESYNC_FAILPOINTS"


def _configured() -> dict[str, str]:
    spec = os.environ.get(ENV, "")
    pairs = (item.partition("=") for item in spec.split(",") if item.strip())
    return {name.strip(): action.strip() for name, _, action in pairs}


_ACTIVE = _configured()


def hit(name: str) -> None:
    """Run the action configured for `name`, if any."""
    if _ACTIVE.get(name) == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
