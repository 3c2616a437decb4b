"""`tidesync users …` (console users: add and reissue print a bearer token once, list, revoke) and
`tidesync console schema` (the GraphQL schema in SDL).

`register_commands` is called by `tidesync.entrypoints.cli` while it builds the parser.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tidesync.apps.users import UsersApplication, UserService
from tidesync.bootstrap.event_store import event_store_env
from tidesync.config import Config, load_config
from tidesync.domain.user import Role, UserError
from tidesync.entrypoints.operator import actor_of, add_audit_arguments
from tidesync.graphql.schema import schema_sdl

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

ROLES = ("viewer", "operator", "approver", "auditor", "admin")


def register_commands(commands: Commands) -> None:
    """Add `users add|list|revoke` and `console schema`."""
    users = commands.add_parser("users", help="console users and their bearer tokens")
    user_commands = users.add_subparsers(dest="users_command", metavar="SUBCOMMAND")
    user_commands.required = True

    add = user_commands.add_parser("add", help="add a user and print its token (shown once)")
    add.add_argument("name", metavar="NAME",
                     help="1-63 of a-z, 0-9, '.', '_' and '-', starting alphanumeric")
    add.add_argument("--role", required=True, choices=ROLES, help="what the user may do")
    add_audit_arguments(add, default_reason="add console user")
    add.set_defaults(handler=_run_add)

    listing = user_commands.add_parser("list", help="list console users")
    listing.add_argument("--json", action="store_true", help="print JSON lines")
    listing.set_defaults(handler=_run_list)

    reissue = user_commands.add_parser(
        "reissue", help="issue the user a new token (printed once; the old one is refused)")
    reissue.add_argument("name", metavar="NAME")
    add_audit_arguments(reissue, default_reason=None)
    reissue.set_defaults(handler=_run_reissue)

    revoke = user_commands.add_parser("revoke", help="refuse the user's token from now on")
    revoke.add_argument("name", metavar="NAME")
    add_audit_arguments(revoke, default_reason=None)
    revoke.set_defaults(handler=_run_revoke)

    console = commands.add_parser("console", help="the GraphQL console")
    console_commands = console.add_subparsers(dest="console_command", metavar="SUBCOMMAND")
    console_commands.required = True
    schema = console_commands.add_parser("schema", help="print the GraphQL schema (SDL)")
    schema.set_defaults(handler=_run_schema)


# ----------------------------------------------------------------------------- handlers


def _run_add(args: argparse.Namespace) -> int:
    def run(service: UserService) -> None:
        issued = service.add(args.name, Role(args.role), actor_of(args), args.reason,
                             uuid.uuid4().hex)
        print(f"user: {issued.name} ({issued.role.value})")
        print(f"token: {issued.token}")
        print("The token is shown only now: send it as 'Authorization: Bearer <token>'.",
              file=sys.stderr)

    return _with_service(args, run)


def _run_reissue(args: argparse.Namespace) -> int:
    def run(service: UserService) -> None:
        issued = service.reissue(args.name, actor_of(args), args.reason, uuid.uuid4().hex)
        print(f"user: {issued.name} ({issued.role.value})")
        print(f"token: {issued.token}")
        print("The token is shown only now; the previous one is refused from now on.",
              file=sys.stderr)

    return _with_service(args, run)


def _run_list(args: argparse.Namespace) -> int:
    def run(service: UserService) -> None:
        summaries = service.list()
        if args.json:
            for s in summaries:
                print(json.dumps({"name": s.name, "role": s.role.value,
                                  "status": s.status.value, "added_by": s.added_by,
                                  "revoke_reason": s.revoke_reason}))
            return
        print(f"{'USER':<32} {'ROLE':<9} {'STATUS':<8} ADDED BY")
        for s in summaries:
            print(f"{s.name:<32} {s.role.value:<9} {s.status.value:<8} {s.added_by}")

    return _with_service(args, run)


def _run_revoke(args: argparse.Namespace) -> int:
    def run(service: UserService) -> None:
        service.revoke(args.name, actor_of(args), args.reason, uuid.uuid4().hex)
        print(f"user {args.name} revoked")

    return _with_service(args, run)


def _run_schema(args: argparse.Namespace) -> int:
    print(schema_sdl(load_config(args.config).console))
    return 0


# ----------------------------------------------------------------------------- plumbing


def _with_service(args: argparse.Namespace, run: Callable[[UserService], None]) -> int:
    """Run a user command; expected failures print one line and exit 1."""
    from eventsourcing.persistence import PersistenceError

    config = load_config(args.config)
    try:
        with _service(config) as service:
            run(service)
    except UserError as error:
        print(f"tidesync users: {error} ({error.code.value})", file=sys.stderr)
        return 1
    except PersistenceError as error:
        print(f"tidesync users: event store unavailable ({type(error).__name__})",
              file=sys.stderr)
        return 1
    return 0


@contextmanager
def _service(config: Config) -> Iterator[UserService]:
    app = UsersApplication(env=event_store_env(config.event_store))
    try:
        yield UserService(app)
    finally:
        app.close()
