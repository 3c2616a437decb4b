"""Subcommands of `tidesync` for this component.

`register_commands` is called by `tidesync.cli` while it builds the parser.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def register_commands(commands: Commands) -> None:
    """Add this component's subcommands (none yet)."""
