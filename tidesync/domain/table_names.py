"""`db.table` names as settings list them: parsed into pairs and checked."""

from __future__ import annotations

from collections.abc import Iterable


def table_set(names: Iterable[str]) -> frozenset[tuple[str, str]]:
    """`db.table` names as (database, table) pairs."""
    return frozenset((database, table) for database, _, table in
                     (name.partition(".") for name in names))


def bad_table_names(setting: str, names: Iterable[str]) -> list[str]:
    """One problem per name that is not `db.table`."""
    return [f"{setting}: {name!r} is not db.table" for name in names
            if name.count(".") != 1 or name.startswith(".") or name.endswith(".")]
