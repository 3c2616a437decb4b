"""The sync metadata columns (§5.1) every enabled table carries, on the shore and on ships."""

REVISION_COLUMN = "_sync_revision"
ORIGIN_COLUMN = "_sync_origin"
EVENT_ID_COLUMN = "_sync_event_id"
UPDATED_AT_COLUMN = "_sync_updated_at"
METADATA_COLUMNS = (REVISION_COLUMN, ORIGIN_COLUMN, EVENT_ID_COLUMN, UPDATED_AT_COLUMN)
"""The §5.1 sync metadata columns every enabled table carries."""
