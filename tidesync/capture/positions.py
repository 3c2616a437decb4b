"""Where built-in capture resumes: a position per capture, saved in a small SQLite file.

MariaDB resumes from its GTID state, MySQL from a binlog file/pos, SQLite from a changelog seq.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tidesync.capture.errors import CaptureError, CaptureErrorReason


@dataclass(frozen=True, slots=True)
class CapturePosition:
    """Where capture resumes. MariaDB resumes from `gtid_state` (file/pos are kept only to show
    where that was); MySQL from `binlog_file`/`binlog_pos`; SQLite after `changelog_seq`."""

    gtid_state: str | None = None
    binlog_file: str | None = None
    binlog_pos: int | None = None
    changelog_seq: int | None = None

    def describe(self) -> str:
        parts = []
        if self.gtid_state is not None:
            parts.append(f"gtid {self.gtid_state or '(empty)'}")
        if self.binlog_file is not None:
            parts.append(f"binlog {self.binlog_file}:{self.binlog_pos}")
        if self.changelog_seq is not None:
            parts.append(f"changelog seq {self.changelog_seq}")
        return ", ".join(parts) or "(none)"


_POSITION_DDL = (
    "CREATE TABLE IF NOT EXISTS capture_position ("
    " name TEXT PRIMARY KEY, source TEXT NOT NULL, gtid_state TEXT, binlog_file TEXT,"
    " binlog_pos INTEGER, changelog_seq INTEGER, saved_at TEXT NOT NULL)"
)


class SQLitePositionStore:
    """The resume positions of the captures on this ship, one row per logical name.

    WAL and synchronous=FULL: once `save` returns, the position survives a power cut.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.execute(_POSITION_DDL)

    def load(self, name: str, source: str) -> CapturePosition | None:
        """The saved position of `name`; refuses one saved by a different kind of source."""
        row = self._db.execute(
            "SELECT source, gtid_state, binlog_file, binlog_pos, changelog_seq"
            " FROM capture_position WHERE name = ?", (name,),
        ).fetchone()
        if row is None:
            return None
        if row[0] != source:
            raise CaptureError(CaptureErrorReason.POSITION_MISMATCH,
                               f"the saved position of capture {name!r} belongs to a {row[0]} "
                               f"source, not {source}: use another logical name or position file")
        return CapturePosition(row[1], row[2], row[3], row[4])

    def saved(self, name: str) -> tuple[str, CapturePosition, str] | None:
        """(source kind, position, when it was saved) of `name`, whatever its kind."""
        row = self._db.execute(
            "SELECT source, gtid_state, binlog_file, binlog_pos, changelog_seq, saved_at"
            " FROM capture_position WHERE name = ?", (name,),
        ).fetchone()
        if row is None:
            return None
        return str(row[0]), CapturePosition(row[1], row[2], row[3], row[4]), str(row[5])

    def save(self, name: str, source: str, position: CapturePosition,
             saved_at: dt.datetime) -> None:
        self._db.execute(
            "INSERT INTO capture_position (name, source, gtid_state, binlog_file, binlog_pos,"
            " changelog_seq, saved_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE"
            " SET source = excluded.source, gtid_state = excluded.gtid_state,"
            " binlog_file = excluded.binlog_file, binlog_pos = excluded.binlog_pos,"
            " changelog_seq = excluded.changelog_seq, saved_at = excluded.saved_at",
            (name, source, position.gtid_state, position.binlog_file, position.binlog_pos,
             position.changelog_seq, saved_at.isoformat()),
        )

    def close(self) -> None:
        self._db.close()
