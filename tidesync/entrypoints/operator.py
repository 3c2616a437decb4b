"""What every operator command line asks for the audit trail: who (`--actor`, default the OS
user, recorded as `user:NAME`) and why (`--reason`)."""

from __future__ import annotations

import argparse
import getpass

from tidesync.domain.actor import user_actor


def add_audit_arguments(parser: argparse.ArgumentParser, default_reason: str | None,
                        what: str = "does this") -> None:
    """`--actor`, and `--reason` (required when there is no default)."""
    parser.add_argument("--actor", default=None,
                        help=f"who {what}, for the audit trail (default: the OS user)")
    if default_reason is None:
        parser.add_argument("--reason", required=True, help="why, for the audit trail")
    else:
        parser.add_argument("--reason", default=default_reason,
                            help="why, for the audit trail (default: %(default)s)")


def actor_of(args: argparse.Namespace) -> str:
    """`user:NAME` for `--actor NAME`, else for the OS user running the command."""
    return user_actor(args.actor or getpass.getuser())
