"""What the revision back-fill of `target enable` shares between MySQL and SQLite: where a row's
revision comes from, how large a chunk is, and how progress is told.

The back-fill gives every row without a revision one, a chunk of rows (in primary key order)
per transaction: an interruption loses at most the chunk under way, and running `target enable`
again continues with the rows still without a revision. By default the revision is derived from
the row's content under the fleet revision key (`tidesync.domain.content_revision`), so the
same row on a ship and on the shore gets the same revision; random revisions remain possible for
a table that exists on one side only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tidesync.domain.change_event import Revision
from tidesync.domain.content_revision import content_revision
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.sync_columns import METADATA_COLUMNS
from tidesync.target.table_state import TableState

DEFAULT_CHUNK_ROWS = 5_000
MAX_CHUNK_ROWS = 100_000

Progress = Callable[[int, int], None]
"""Called after each committed chunk with (rows done, rows to do)."""


class RevisionKeyRequired(TidesyncError):
    """A table holding rows was to be enabled without the fleet revision key."""

    code = ErrorCode.CONFIG_INVALID


def _no_progress(done: int, total: int) -> None:
    del done, total


@dataclass(frozen=True)
class BackfillOptions:
    """How `target enable` stamps the rows that have no revision yet.

    `revision_key` None means random revisions; otherwise content-derived ones under that key.
    """

    revision_key: bytes | None = None
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    progress: Progress = field(default=_no_progress)
    random_allowed: bool = True
    """False: a table holding rows without a revision is refused when there is no key."""

    def __post_init__(self) -> None:
        if not 1 <= self.chunk_rows <= MAX_CHUNK_ROWS:
            raise ValueError(f"chunk_rows must be 1..{MAX_CHUNK_ROWS}")

    @property
    def content_derived(self) -> bool:
        return self.revision_key is not None

    def check_can_stamp(self, table: str, rows: int) -> None:
        """Refuse to stamp `rows` existing rows randomly unless random revisions were asked
        for: on a ship and on the shore the same rows would then look different."""
        if rows and self.revision_key is None and not self.random_allowed:
            raise RevisionKeyRequired(
                f"{table} holds {rows} rows without a revision and no fleet revision key is"
                " set: set [target] revision_key_file (or --revision-key-file) to the same key"
                " file on the shore and every ship, so these rows get the same revisions on"
                " both sides (`tidesync target revision-key FILE` makes one), or pass"
                " --random-revisions if the table exists on this side only")

    def revision(self, primary_key: Sequence[tuple[str, object]],
                 business: Sequence[tuple[str, object]]) -> Revision:
        if self.revision_key is None:
            return Revision(uuid.uuid4().bytes)
        return content_revision(self.revision_key, primary_key, business)

    def describe(self) -> str:
        return "content-derived revisions" if self.content_derived else "fresh revisions"


RANDOM_REVISIONS = BackfillOptions()
"""Random revisions, no progress: for tables that exist on one side only, and for tests."""


def business_columns(state: TableState) -> list[str]:
    """The columns a content-derived revision covers besides the key: every stored business
    column (generated ones follow from the others)."""
    return [name for name in state.columns if name not in METADATA_COLUMNS
            and name not in state.generated_columns and name not in state.primary_key]


def key_after(quoted: Sequence[str], placeholder: str) -> str:
    """SQL that is TRUE for rows whose primary key sorts after a given key: `(a > ?) OR (a = ?
    AND b > ?) …`, which both databases turn into an index range. Its parameters are
    `key_after_params(key)`."""
    terms = []
    for index, column in enumerate(quoted):
        equal = [f"{name} = {placeholder}" for name in quoted[:index]]
        terms.append("(" + " AND ".join([*equal, f"{column} > {placeholder}"]) + ")")
    return "(" + " OR ".join(terms) + ")"


def key_after_params(key: Sequence[object]) -> list[object]:
    params: list[object] = []
    for index in range(len(key)):
        params += [*key[:index], key[index]]
    return params
