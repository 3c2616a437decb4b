"""The settings of the business database a node applies changes to (`[target]`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TargetConfig:
    """The business database the shore applies changes to, and this node's id on its rows."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "tidesync"
    password: str = field(default="", metadata={"secret": True})
    database: str = ""
    node_id: str = "shore"
    # The embedded default's business database: when set, the target is this SQLite file
    # (every source database maps to its main database) and the MySQL settings are unused.
    sqlite_path: str = ""
    # Every MySQL connection: how long to wait to connect, for an answer and to send, and
    # how long a statement waits for a row or metadata lock. A read timeout longer than the
    # lock wait keeps a statement waiting for a lock from being taken for a dead link; a
    # COMMIT without an answer within it is "outcome unknown", resolved from the ledger.
    connect_timeout_seconds: int = 10
    read_timeout_seconds: int = 60
    write_timeout_seconds: int = 60
    lock_wait_timeout_seconds: int = 20
    # The fleet revision key: `target enable` derives the revisions of rows a table already
    # holds from their content under this key, so identical rows on ships and shore get the
    # same revision. Every node of the fleet must use a copy of the same file.
    revision_key_file: str = ""

    def validate(self) -> list[str]:
        problems = []
        if not 1 <= self.port <= 65535:
            problems.append("target.port: must be 1..65535")
        if not self.node_id:
            problems.append("target.node_id: must not be empty")
        for name in ("connect_timeout_seconds", "read_timeout_seconds", "write_timeout_seconds",
                     "lock_wait_timeout_seconds"):
            if getattr(self, name) < 1:
                problems.append(f"target.{name}: must be >= 1")
        if self.read_timeout_seconds <= self.lock_wait_timeout_seconds:
            problems.append("target.read_timeout_seconds: must be longer than"
                            " lock_wait_timeout_seconds")
        return problems
