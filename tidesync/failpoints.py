"""Named fault-injection points for crash tests: `TIDESYNC_FAILPOINTS=name=action,...`.

Actions: `kill` (SIGKILL this process at that point, as a power cut would) and `stop`
(SIGSTOP it there, as a long pause would, until someone sends SIGCONT).
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
    action = _ACTIVE.get(name)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
