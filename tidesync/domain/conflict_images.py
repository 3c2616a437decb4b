"""The row images a conflict case weighs: which one each decision side stands for, and which
columns a replacement must name.

Evidence holds images as lists of [column, type-tagged value]. An image can be complete (the
shore's row as read from its target, a ship's row as it reported it, an inserted row, a deleted
row's before image) or partial: an UPDATE crosses the link as its key and the columns it changed,
so the ship's image of an UPDATE holds only those. A decision never writes a partial row as if it
were complete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

SYNC_COLUMN_PREFIX = "_sync_"
"""The §5.1 metadata columns (revision, origin, event id, time): applying a decision sets them,
so they are neither compared nor part of a decided value."""

Image = list[list[object]]
"""An image: [column, type-tagged value] pairs."""


def is_sync_column(name: str) -> bool:
    return name.startswith(SYNC_COLUMN_PREFIX)


def as_image(raw: object) -> Image | None:
    if raw is None:
        return None
    if not isinstance(raw, list | tuple):
        raise TypeError("an evidence image is a list of [column, value] pairs")
    return [list(pair) for pair in raw]


def business(raw: object) -> Image | None:
    """The image without the sync metadata columns (None stays None: no row)."""
    image = as_image(raw)
    return None if image is None else [pair for pair in image if not is_sync_column(str(pair[0]))]


def as_tagged(raw: object) -> list[object]:
    if not isinstance(raw, list | tuple):
        raise TypeError("a stored value is a type-tagged list")
    return list(raw)


def incoming_is_complete(evidence: Mapping[str, object]) -> bool:
    """Whether the evidence's ship image is the ship's whole row. Evidence recorded before this
    was stored says nothing: an UPDATE's image is then taken as partial, anything else whole."""
    flag = evidence.get("incoming_complete")
    if isinstance(flag, bool):
        return flag
    return evidence.get("operation") != "UPDATE"


def merged(base: Image, changes: Image) -> Image:
    """`base` with the columns `changes` names set to its values (base's column order)."""
    values = {str(name): value for name, value in changes}
    out = [[name, values.pop(str(name), value)] for name, value in base]
    out.extend([name, value] for name, value in changes if str(name) in values)
    return out


def ship_row(evidence: Sequence[Mapping[str, object]], shore: Image | None
             ) -> tuple[Image | None, bool, bool]:
    """The ship's row as the latest evidence shows it: (business image or None for a deleted
    row, whether it is the ship's own row as reported, whether it is known in full).

    A partial image (an UPDATE) is completed from a whole image of the same ship revision in
    earlier evidence (a ship's report of that row), else laid over the shore's row `shore`
    (the columns the ship changed win, the others stay as on the shore): then it is not the
    ship's own row (second flag False). Without a shore row it stays partial (third flag False).
    """
    latest = evidence[-1]
    image = business(latest.get("incoming_after"))
    if image is None or incoming_is_complete(latest):
        return image, True, True
    revision = latest.get("incoming_result_revision")
    for earlier in reversed(evidence[:-1]):
        whole = business(earlier.get("incoming_after"))
        if (whole is not None and revision is not None and incoming_is_complete(earlier)
                and earlier.get("incoming_result_revision") == revision):
            return merged(whole, image), True, True
    if shore is None:
        return image, True, False
    return merged(shore, image), False, True


def columns_of(evidence: Sequence[Mapping[str, object]]) -> dict[str, list[object]]:
    """Column name → a typed sample value: every business column any image of the evidence
    names (newest evidence first, the shore's row before the ship's), each with the first
    non-null value seen (["null"] when every image has it null)."""
    columns: dict[str, list[object]] = {}
    for item in reversed(evidence):
        for name in ("current_row", "incoming_after", "incoming_before"):
            for column, value in as_image(item.get(name)) or ():
                if is_sync_column(str(column)):
                    continue
                if columns.get(str(column), ["null"]) == ["null"]:
                    columns[str(column)] = as_tagged(value)
    return columns
