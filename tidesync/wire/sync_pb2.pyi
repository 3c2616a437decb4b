from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventRevision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_REVISION_UNSPECIFIED: _ClassVar[EventRevision]
    BASE_REVISION_TEXT: _ClassVar[EventRevision]
    RESULT_REVISION_TEXT: _ClassVar[EventRevision]
    BASE_REVISION_BYTES: _ClassVar[EventRevision]
    RESULT_REVISION_BYTES: _ClassVar[EventRevision]

class Operation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_UNSPECIFIED: _ClassVar[Operation]
    INSERT: _ClassVar[Operation]
    UPDATE: _ClassVar[Operation]
    DELETE: _ClassVar[Operation]
    SNAPSHOT: _ClassVar[Operation]

class V2BeforeMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    V2_BEFORE_NONE: _ClassVar[V2BeforeMode]
    V2_BEFORE_AS_AFTER: _ClassVar[V2BeforeMode]
    V2_BEFORE_OWN: _ClassVar[V2BeforeMode]
    V2_BEFORE_OMITTED: _ClassVar[V2BeforeMode]

class V2RevisionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    V2_REVISION_NONE: _ClassVar[V2RevisionMode]
    V2_REVISION_EXPLICIT: _ClassVar[V2RevisionMode]
    V2_REVISION_TOMBSTONE: _ClassVar[V2RevisionMode]
    V2_REVISION_CHAINED: _ClassVar[V2RevisionMode]

class V2Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    V2_KIND_UNSPECIFIED: _ClassVar[V2Kind]
    V2_INT: _ClassVar[V2Kind]
    V2_BOOL: _ClassVar[V2Kind]
    V2_DECIMAL: _ClassVar[V2Kind]
    V2_FLOAT_DECIMAL: _ClassVar[V2Kind]
    V2_FLOAT: _ClassVar[V2Kind]
    V2_TEXT: _ClassVar[V2Kind]
    V2_BLOB: _ClassVar[V2Kind]
    V2_JSON: _ClassVar[V2Kind]
    V2_TEXT_NUMBERED: _ClassVar[V2Kind]
    V2_TIMESTAMP: _ClassVar[V2Kind]
    V2_DATE: _ClassVar[V2Kind]
    V2_TIME: _ClassVar[V2Kind]
    V2_REVISION_TEXT: _ClassVar[V2Kind]
    V2_REVISION_BYTES: _ClassVar[V2Kind]
    V2_VALUES: _ClassVar[V2Kind]

class ReceiveStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECEIVE_STATUS_UNSPECIFIED: _ClassVar[ReceiveStatus]
    RECEIVED: _ClassVar[ReceiveStatus]
    RETRYABLE_FAILURE: _ClassVar[ReceiveStatus]
    PERMANENT_REJECTED: _ClassVar[ReceiveStatus]

class EventResultCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_RESULT_CODE_UNSPECIFIED: _ClassVar[EventResultCode]
    APPLIED: _ClassVar[EventResultCode]
    CONFLICT_RECORDED: _ClassVar[EventResultCode]
    REJECTED: _ClassVar[EventResultCode]
    EXPIRED_APPROVED: _ClassVar[EventResultCode]
    FORWARDED: _ClassVar[EventResultCode]

class CommandResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMMAND_RESULT_UNSPECIFIED: _ClassVar[CommandResult]
    COMMAND_APPLIED: _ClassVar[CommandResult]
    COMMAND_ALREADY_APPLIED: _ClassVar[CommandResult]
    COMMAND_CONFLICT_REPORTED: _ClassVar[CommandResult]
    COMMAND_REJECTED: _ClassVar[CommandResult]

class Subsystem(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUBSYSTEM_UNSPECIFIED: _ClassVar[Subsystem]
    CAPTURE: _ClassVar[Subsystem]
    QUEUE: _ClassVar[Subsystem]
    TRANSPORT: _ClassVar[Subsystem]
    DOWNLINK_APPLY: _ClassVar[Subsystem]
    DISK: _ClassVar[Subsystem]

class HealthState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HEALTH_STATE_UNSPECIFIED: _ClassVar[HealthState]
    HEALTHY: _ClassVar[HealthState]
    DEGRADED: _ClassVar[HealthState]
    BLOCKED: _ClassVar[HealthState]
    OFFLINE: _ClassVar[HealthState]

class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIRECTION_UNSPECIFIED: _ClassVar[Direction]
    UPLINK: _ClassVar[Direction]
    DOWNLINK: _ClassVar[Direction]

class RuleValidation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RULE_VALIDATION_UNSPECIFIED: _ClassVar[RuleValidation]
    RULE_VALID: _ClassVar[RuleValidation]
    RULE_FAILED: _ClassVar[RuleValidation]

class SyncPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SYNC_PHASE_UNSPECIFIED: _ClassVar[SyncPhase]
    SYNC_NONE: _ClassVar[SyncPhase]
    SYNC_QUEUED: _ClassVar[SyncPhase]
    SYNC_SNAPSHOTTING: _ClassVar[SyncPhase]
    SYNC_CATCHING_UP: _ClassVar[SyncPhase]
    SYNC_IN_SYNC: _ClassVar[SyncPhase]
    SYNC_FAILED: _ClassVar[SyncPhase]

class RuleStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RULE_STATUS_UNSPECIFIED: _ClassVar[RuleStatus]
    DRAFT: _ClassVar[RuleStatus]
    VALIDATED: _ClassVar[RuleStatus]
    APPROVED: _ClassVar[RuleStatus]
    DISTRIBUTING: _ClassVar[RuleStatus]
    ACTIVE: _ClassVar[RuleStatus]
    SUPERSEDED: _ClassVar[RuleStatus]
    ROLLBACK_TARGET: _ClassVar[RuleStatus]
EVENT_REVISION_UNSPECIFIED: EventRevision
BASE_REVISION_TEXT: EventRevision
RESULT_REVISION_TEXT: EventRevision
BASE_REVISION_BYTES: EventRevision
RESULT_REVISION_BYTES: EventRevision
OPERATION_UNSPECIFIED: Operation
INSERT: Operation
UPDATE: Operation
DELETE: Operation
SNAPSHOT: Operation
V2_BEFORE_NONE: V2BeforeMode
V2_BEFORE_AS_AFTER: V2BeforeMode
V2_BEFORE_OWN: V2BeforeMode
V2_BEFORE_OMITTED: V2BeforeMode
V2_REVISION_NONE: V2RevisionMode
V2_REVISION_EXPLICIT: V2RevisionMode
V2_REVISION_TOMBSTONE: V2RevisionMode
V2_REVISION_CHAINED: V2RevisionMode
V2_KIND_UNSPECIFIED: V2Kind
V2_INT: V2Kind
V2_BOOL: V2Kind
V2_DECIMAL: V2Kind
V2_FLOAT_DECIMAL: V2Kind
V2_FLOAT: V2Kind
V2_TEXT: V2Kind
V2_BLOB: V2Kind
V2_JSON: V2Kind
V2_TEXT_NUMBERED: V2Kind
V2_TIMESTAMP: V2Kind
V2_DATE: V2Kind
V2_TIME: V2Kind
V2_REVISION_TEXT: V2Kind
V2_REVISION_BYTES: V2Kind
V2_VALUES: V2Kind
RECEIVE_STATUS_UNSPECIFIED: ReceiveStatus
RECEIVED: ReceiveStatus
RETRYABLE_FAILURE: ReceiveStatus
PERMANENT_REJECTED: ReceiveStatus
EVENT_RESULT_CODE_UNSPECIFIED: EventResultCode
APPLIED: EventResultCode
CONFLICT_RECORDED: EventResultCode
REJECTED: EventResultCode
EXPIRED_APPROVED: EventResultCode
FORWARDED: EventResultCode
COMMAND_RESULT_UNSPECIFIED: CommandResult
COMMAND_APPLIED: CommandResult
COMMAND_ALREADY_APPLIED: CommandResult
COMMAND_CONFLICT_REPORTED: CommandResult
COMMAND_REJECTED: CommandResult
SUBSYSTEM_UNSPECIFIED: Subsystem
CAPTURE: Subsystem
QUEUE: Subsystem
TRANSPORT: Subsystem
DOWNLINK_APPLY: Subsystem
DISK: Subsystem
HEALTH_STATE_UNSPECIFIED: HealthState
HEALTHY: HealthState
DEGRADED: HealthState
BLOCKED: HealthState
OFFLINE: HealthState
DIRECTION_UNSPECIFIED: Direction
UPLINK: Direction
DOWNLINK: Direction
RULE_VALIDATION_UNSPECIFIED: RuleValidation
RULE_VALID: RuleValidation
RULE_FAILED: RuleValidation
SYNC_PHASE_UNSPECIFIED: SyncPhase
SYNC_NONE: SyncPhase
SYNC_QUEUED: SyncPhase
SYNC_SNAPSHOTTING: SyncPhase
SYNC_CATCHING_UP: SyncPhase
SYNC_IN_SYNC: SyncPhase
SYNC_FAILED: SyncPhase
RULE_STATUS_UNSPECIFIED: RuleStatus
DRAFT: RuleStatus
VALIDATED: RuleStatus
APPROVED: RuleStatus
DISTRIBUTING: RuleStatus
ACTIVE: RuleStatus
SUPERSEDED: RuleStatus
ROLLBACK_TARGET: RuleStatus

class Value(_message.Message):
    __slots__ = ("is_null", "bool_value", "int_value", "big_int", "float_value", "decimal", "text", "blob", "timestamp_micros", "date_days", "time_micros", "json", "bits", "event_revision")
    IS_NULL_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    BIG_INT_FIELD_NUMBER: _ClassVar[int]
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DECIMAL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MICROS_FIELD_NUMBER: _ClassVar[int]
    DATE_DAYS_FIELD_NUMBER: _ClassVar[int]
    TIME_MICROS_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    BITS_FIELD_NUMBER: _ClassVar[int]
    EVENT_REVISION_FIELD_NUMBER: _ClassVar[int]
    is_null: bool
    bool_value: bool
    int_value: int
    big_int: str
    float_value: float
    decimal: str
    text: str
    blob: bytes
    timestamp_micros: int
    date_days: int
    time_micros: int
    json: str
    bits: Bits
    event_revision: EventRevision
    def __init__(self, is_null: _Optional[bool] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., big_int: _Optional[str] = ..., float_value: _Optional[float] = ..., decimal: _Optional[str] = ..., text: _Optional[str] = ..., blob: _Optional[bytes] = ..., timestamp_micros: _Optional[int] = ..., date_days: _Optional[int] = ..., time_micros: _Optional[int] = ..., json: _Optional[str] = ..., bits: _Optional[_Union[Bits, _Mapping]] = ..., event_revision: _Optional[_Union[EventRevision, str]] = ...) -> None: ...

class Bits(_message.Message):
    __slots__ = ("length", "value")
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    length: int
    value: int
    def __init__(self, length: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("name_ref", "value")
    NAME_REF_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name_ref: int
    value: Value
    def __init__(self, name_ref: _Optional[int] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class RecordKey(_message.Message):
    __slots__ = ("database_ref", "schema_ref", "table_ref", "primary_key")
    DATABASE_REF_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_REF_FIELD_NUMBER: _ClassVar[int]
    TABLE_REF_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    database_ref: int
    schema_ref: int
    table_ref: int
    primary_key: _containers.RepeatedCompositeFieldContainer[Column]
    def __init__(self, database_ref: _Optional[int] = ..., schema_ref: _Optional[int] = ..., table_ref: _Optional[int] = ..., primary_key: _Optional[_Iterable[_Union[Column, _Mapping]]] = ...) -> None: ...

class ChangeEvent(_message.Message):
    __slots__ = ("event_id", "origin_node_ref", "source_connector_ref", "source_topic_ref", "source_partition", "source_position", "record", "operation", "captured_at_micros", "before", "after", "base_revision", "result_revision", "source_sequence", "rule_id_ref", "rule_version", "source_details", "transaction_id", "transaction_order", "business_occurred_at_micros", "trace_id", "replay_epoch", "schema_version", "before_omitted")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_NODE_REF_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CONNECTOR_REF_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOPIC_REF_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PARTITION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_POSITION_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    BASE_REVISION_FIELD_NUMBER: _ClassVar[int]
    RESULT_REVISION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RULE_ID_REF_FIELD_NUMBER: _ClassVar[int]
    RULE_VERSION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_DETAILS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ORDER_FIELD_NUMBER: _ClassVar[int]
    BUSINESS_OCCURRED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLAY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    BEFORE_OMITTED_FIELD_NUMBER: _ClassVar[int]
    event_id: bytes
    origin_node_ref: int
    source_connector_ref: int
    source_topic_ref: int
    source_partition: int
    source_position: int
    record: RecordKey
    operation: Operation
    captured_at_micros: int
    before: _containers.RepeatedCompositeFieldContainer[Column]
    after: _containers.RepeatedCompositeFieldContainer[Column]
    base_revision: bytes
    result_revision: bytes
    source_sequence: int
    rule_id_ref: int
    rule_version: int
    source_details: _containers.RepeatedCompositeFieldContainer[Column]
    transaction_id: str
    transaction_order: int
    business_occurred_at_micros: int
    trace_id: str
    replay_epoch: int
    schema_version: str
    before_omitted: bool
    def __init__(self, event_id: _Optional[bytes] = ..., origin_node_ref: _Optional[int] = ..., source_connector_ref: _Optional[int] = ..., source_topic_ref: _Optional[int] = ..., source_partition: _Optional[int] = ..., source_position: _Optional[int] = ..., record: _Optional[_Union[RecordKey, _Mapping]] = ..., operation: _Optional[_Union[Operation, str]] = ..., captured_at_micros: _Optional[int] = ..., before: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., after: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., base_revision: _Optional[bytes] = ..., result_revision: _Optional[bytes] = ..., source_sequence: _Optional[int] = ..., rule_id_ref: _Optional[int] = ..., rule_version: _Optional[int] = ..., source_details: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., transaction_id: _Optional[str] = ..., transaction_order: _Optional[int] = ..., business_occurred_at_micros: _Optional[int] = ..., trace_id: _Optional[str] = ..., replay_epoch: _Optional[int] = ..., schema_version: _Optional[str] = ..., before_omitted: _Optional[bool] = ...) -> None: ...

class UploadBatch(_message.Message):
    __slots__ = ("protocol_version", "node_id", "batch_id", "created_at_micros", "events", "strings", "uncompressed_bytes", "checksum")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    UNCOMPRESSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    node_id: str
    batch_id: bytes
    created_at_micros: int
    events: _containers.RepeatedCompositeFieldContainer[ChangeEvent]
    strings: _containers.RepeatedScalarFieldContainer[str]
    uncompressed_bytes: int
    checksum: bytes
    def __init__(self, protocol_version: _Optional[str] = ..., node_id: _Optional[str] = ..., batch_id: _Optional[bytes] = ..., created_at_micros: _Optional[int] = ..., events: _Optional[_Iterable[_Union[ChangeEvent, _Mapping]]] = ..., strings: _Optional[_Iterable[str]] = ..., uncompressed_bytes: _Optional[int] = ..., checksum: _Optional[bytes] = ...) -> None: ...

class UploadBatchV2(_message.Message):
    __slots__ = ("protocol_version", "node_id", "batch_id", "created_at_micros", "strings", "event_count", "event_ids_digest", "streams", "events", "tables", "explicit_id_indexes", "explicit_ids", "uncompressed_bytes", "checksum")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    EVENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    EVENT_IDS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_ID_INDEXES_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_IDS_FIELD_NUMBER: _ClassVar[int]
    UNCOMPRESSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    node_id: str
    batch_id: bytes
    created_at_micros: int
    strings: _containers.RepeatedScalarFieldContainer[str]
    event_count: int
    event_ids_digest: bytes
    streams: _containers.RepeatedCompositeFieldContainer[V2Stream]
    events: V2Events
    tables: _containers.RepeatedCompositeFieldContainer[V2Table]
    explicit_id_indexes: _containers.RepeatedScalarFieldContainer[int]
    explicit_ids: bytes
    uncompressed_bytes: int
    checksum: bytes
    def __init__(self, protocol_version: _Optional[str] = ..., node_id: _Optional[str] = ..., batch_id: _Optional[bytes] = ..., created_at_micros: _Optional[int] = ..., strings: _Optional[_Iterable[str]] = ..., event_count: _Optional[int] = ..., event_ids_digest: _Optional[bytes] = ..., streams: _Optional[_Iterable[_Union[V2Stream, _Mapping]]] = ..., events: _Optional[_Union[V2Events, _Mapping]] = ..., tables: _Optional[_Iterable[_Union[V2Table, _Mapping]]] = ..., explicit_id_indexes: _Optional[_Iterable[int]] = ..., explicit_ids: _Optional[bytes] = ..., uncompressed_bytes: _Optional[int] = ..., checksum: _Optional[bytes] = ...) -> None: ...

class V2Stream(_message.Message):
    __slots__ = ("origin_node_ref", "source_connector_ref", "source_topic_ref", "source_partition", "replay_epoch", "base_offset")
    ORIGIN_NODE_REF_FIELD_NUMBER: _ClassVar[int]
    SOURCE_CONNECTOR_REF_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOPIC_REF_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLAY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    origin_node_ref: int
    source_connector_ref: int
    source_topic_ref: int
    source_partition: int
    replay_epoch: int
    base_offset: int
    def __init__(self, origin_node_ref: _Optional[int] = ..., source_connector_ref: _Optional[int] = ..., source_topic_ref: _Optional[int] = ..., source_partition: _Optional[int] = ..., replay_epoch: _Optional[int] = ..., base_offset: _Optional[int] = ...) -> None: ...

class V2Events(_message.Message):
    __slots__ = ("table_runs", "stream_runs", "offset_deltas", "operations", "captured_at", "revision_modes", "revisions", "sequence_gap", "schema_version", "rule_id", "rule_version", "trace_id", "transaction_id", "transaction_order", "business_occurred_at", "detail_refs", "detail_bits", "details")
    TABLE_RUNS_FIELD_NUMBER: _ClassVar[int]
    STREAM_RUNS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_DELTAS_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
    REVISION_MODES_FIELD_NUMBER: _ClassVar[int]
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_GAP_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    RULE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ORDER_FIELD_NUMBER: _ClassVar[int]
    BUSINESS_OCCURRED_AT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_REFS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_BITS_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    table_runs: _containers.RepeatedScalarFieldContainer[int]
    stream_runs: _containers.RepeatedScalarFieldContainer[int]
    offset_deltas: _containers.RepeatedScalarFieldContainer[int]
    operations: _containers.RepeatedScalarFieldContainer[int]
    captured_at: V2Column
    revision_modes: _containers.RepeatedScalarFieldContainer[int]
    revisions: bytes
    sequence_gap: V2Column
    schema_version: V2Column
    rule_id: V2Column
    rule_version: V2Column
    trace_id: V2Column
    transaction_id: V2Column
    transaction_order: V2Column
    business_occurred_at: V2Column
    detail_refs: _containers.RepeatedScalarFieldContainer[int]
    detail_bits: _containers.RepeatedScalarFieldContainer[int]
    details: _containers.RepeatedCompositeFieldContainer[V2Column]
    def __init__(self, table_runs: _Optional[_Iterable[int]] = ..., stream_runs: _Optional[_Iterable[int]] = ..., offset_deltas: _Optional[_Iterable[int]] = ..., operations: _Optional[_Iterable[int]] = ..., captured_at: _Optional[_Union[V2Column, _Mapping]] = ..., revision_modes: _Optional[_Iterable[int]] = ..., revisions: _Optional[bytes] = ..., sequence_gap: _Optional[_Union[V2Column, _Mapping]] = ..., schema_version: _Optional[_Union[V2Column, _Mapping]] = ..., rule_id: _Optional[_Union[V2Column, _Mapping]] = ..., rule_version: _Optional[_Union[V2Column, _Mapping]] = ..., trace_id: _Optional[_Union[V2Column, _Mapping]] = ..., transaction_id: _Optional[_Union[V2Column, _Mapping]] = ..., transaction_order: _Optional[_Union[V2Column, _Mapping]] = ..., business_occurred_at: _Optional[_Union[V2Column, _Mapping]] = ..., detail_refs: _Optional[_Iterable[int]] = ..., detail_bits: _Optional[_Iterable[int]] = ..., details: _Optional[_Iterable[_Union[V2Column, _Mapping]]] = ...) -> None: ...

class V2Table(_message.Message):
    __slots__ = ("database_ref", "schema_ref", "table_ref", "key_refs", "column_refs", "key", "after_bits", "before_modes", "before_bits", "after", "before")
    DATABASE_REF_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_REF_FIELD_NUMBER: _ClassVar[int]
    TABLE_REF_FIELD_NUMBER: _ClassVar[int]
    KEY_REFS_FIELD_NUMBER: _ClassVar[int]
    COLUMN_REFS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    AFTER_BITS_FIELD_NUMBER: _ClassVar[int]
    BEFORE_MODES_FIELD_NUMBER: _ClassVar[int]
    BEFORE_BITS_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    database_ref: int
    schema_ref: int
    table_ref: int
    key_refs: _containers.RepeatedScalarFieldContainer[int]
    column_refs: _containers.RepeatedScalarFieldContainer[int]
    key: _containers.RepeatedCompositeFieldContainer[V2Column]
    after_bits: _containers.RepeatedScalarFieldContainer[int]
    before_modes: _containers.RepeatedScalarFieldContainer[int]
    before_bits: _containers.RepeatedScalarFieldContainer[int]
    after: _containers.RepeatedCompositeFieldContainer[V2Column]
    before: _containers.RepeatedCompositeFieldContainer[V2Column]
    def __init__(self, database_ref: _Optional[int] = ..., schema_ref: _Optional[int] = ..., table_ref: _Optional[int] = ..., key_refs: _Optional[_Iterable[int]] = ..., column_refs: _Optional[_Iterable[int]] = ..., key: _Optional[_Iterable[_Union[V2Column, _Mapping]]] = ..., after_bits: _Optional[_Iterable[int]] = ..., before_modes: _Optional[_Iterable[int]] = ..., before_bits: _Optional[_Iterable[int]] = ..., after: _Optional[_Iterable[_Union[V2Column, _Mapping]]] = ..., before: _Optional[_Iterable[_Union[V2Column, _Mapping]]] = ...) -> None: ...

class V2Column(_message.Message):
    __slots__ = ("kind", "nulls", "exponent", "exponents", "deltas", "floats", "blob", "lengths", "picks", "values")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NULLS_FIELD_NUMBER: _ClassVar[int]
    EXPONENT_FIELD_NUMBER: _ClassVar[int]
    EXPONENTS_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    FLOATS_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    LENGTHS_FIELD_NUMBER: _ClassVar[int]
    PICKS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    kind: V2Kind
    nulls: bytes
    exponent: int
    exponents: _containers.RepeatedScalarFieldContainer[int]
    deltas: _containers.RepeatedScalarFieldContainer[int]
    floats: _containers.RepeatedScalarFieldContainer[float]
    blob: bytes
    lengths: _containers.RepeatedScalarFieldContainer[int]
    picks: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, kind: _Optional[_Union[V2Kind, str]] = ..., nulls: _Optional[bytes] = ..., exponent: _Optional[int] = ..., exponents: _Optional[_Iterable[int]] = ..., deltas: _Optional[_Iterable[int]] = ..., floats: _Optional[_Iterable[float]] = ..., blob: _Optional[bytes] = ..., lengths: _Optional[_Iterable[int]] = ..., picks: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class EventReceiveStatus(_message.Message):
    __slots__ = ("event_id", "status", "reason_code", "detail", "result")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    event_id: bytes
    status: ReceiveStatus
    reason_code: str
    detail: str
    result: EventResult
    def __init__(self, event_id: _Optional[bytes] = ..., status: _Optional[_Union[ReceiveStatus, str]] = ..., reason_code: _Optional[str] = ..., detail: _Optional[str] = ..., result: _Optional[_Union[EventResult, _Mapping]] = ...) -> None: ...

class UploadBatchResponse(_message.Message):
    __slots__ = ("batch_id", "statuses", "server_time_micros", "strings", "received")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_MICROS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    batch_id: bytes
    statuses: _containers.RepeatedCompositeFieldContainer[EventReceiveStatus]
    server_time_micros: int
    strings: _containers.RepeatedScalarFieldContainer[str]
    received: _containers.RepeatedCompositeFieldContainer[PartitionRanges]
    def __init__(self, batch_id: _Optional[bytes] = ..., statuses: _Optional[_Iterable[_Union[EventReceiveStatus, _Mapping]]] = ..., server_time_micros: _Optional[int] = ..., strings: _Optional[_Iterable[str]] = ..., received: _Optional[_Iterable[_Union[PartitionRanges, _Mapping]]] = ...) -> None: ...

class EventResult(_message.Message):
    __slots__ = ("event_id", "result", "reason_code", "conflict_id", "result_revision", "decided_at_micros", "source_topic", "source_partition", "source_position")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_REVISION_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PARTITION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_POSITION_FIELD_NUMBER: _ClassVar[int]
    event_id: bytes
    result: EventResultCode
    reason_code: str
    conflict_id: bytes
    result_revision: bytes
    decided_at_micros: int
    source_topic: str
    source_partition: int
    source_position: int
    def __init__(self, event_id: _Optional[bytes] = ..., result: _Optional[_Union[EventResultCode, str]] = ..., reason_code: _Optional[str] = ..., conflict_id: _Optional[bytes] = ..., result_revision: _Optional[bytes] = ..., decided_at_micros: _Optional[int] = ..., source_topic: _Optional[str] = ..., source_partition: _Optional[int] = ..., source_position: _Optional[int] = ...) -> None: ...

class ReceiptsPage(_message.Message):
    __slots__ = ("results", "next_cursor", "has_more", "strings", "applied")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EventResult]
    next_cursor: str
    has_more: bool
    strings: _containers.RepeatedScalarFieldContainer[str]
    applied: _containers.RepeatedCompositeFieldContainer[PartitionRanges]
    def __init__(self, results: _Optional[_Iterable[_Union[EventResult, _Mapping]]] = ..., next_cursor: _Optional[str] = ..., has_more: _Optional[bool] = ..., strings: _Optional[_Iterable[str]] = ..., applied: _Optional[_Iterable[_Union[PartitionRanges, _Mapping]]] = ...) -> None: ...

class ShoreRowChange(_message.Message):
    __slots__ = ("record", "operation", "values", "expected_local_revision", "result_revision", "origin_node_ref", "origin_event_id", "rule_id_ref", "rule_version", "by_key")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LOCAL_REVISION_FIELD_NUMBER: _ClassVar[int]
    RESULT_REVISION_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_NODE_REF_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RULE_ID_REF_FIELD_NUMBER: _ClassVar[int]
    RULE_VERSION_FIELD_NUMBER: _ClassVar[int]
    BY_KEY_FIELD_NUMBER: _ClassVar[int]
    record: RecordKey
    operation: Operation
    values: _containers.RepeatedCompositeFieldContainer[Column]
    expected_local_revision: bytes
    result_revision: bytes
    origin_node_ref: int
    origin_event_id: bytes
    rule_id_ref: int
    rule_version: int
    by_key: bool
    def __init__(self, record: _Optional[_Union[RecordKey, _Mapping]] = ..., operation: _Optional[_Union[Operation, str]] = ..., values: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., expected_local_revision: _Optional[bytes] = ..., result_revision: _Optional[bytes] = ..., origin_node_ref: _Optional[int] = ..., origin_event_id: _Optional[bytes] = ..., rule_id_ref: _Optional[int] = ..., rule_version: _Optional[int] = ..., by_key: _Optional[bool] = ...) -> None: ...

class ConflictDecision(_message.Message):
    __slots__ = ("decision_id", "conflict_id", "rule_id_ref", "rule_version", "record", "expected_local_revision", "decided_value", "tombstone", "decided_revision", "reason")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_ID_FIELD_NUMBER: _ClassVar[int]
    RULE_ID_REF_FIELD_NUMBER: _ClassVar[int]
    RULE_VERSION_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LOCAL_REVISION_FIELD_NUMBER: _ClassVar[int]
    DECIDED_VALUE_FIELD_NUMBER: _ClassVar[int]
    TOMBSTONE_FIELD_NUMBER: _ClassVar[int]
    DECIDED_REVISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    decision_id: bytes
    conflict_id: bytes
    rule_id_ref: int
    rule_version: int
    record: RecordKey
    expected_local_revision: bytes
    decided_value: DecidedRow
    tombstone: bool
    decided_revision: bytes
    reason: str
    def __init__(self, decision_id: _Optional[bytes] = ..., conflict_id: _Optional[bytes] = ..., rule_id_ref: _Optional[int] = ..., rule_version: _Optional[int] = ..., record: _Optional[_Union[RecordKey, _Mapping]] = ..., expected_local_revision: _Optional[bytes] = ..., decided_value: _Optional[_Union[DecidedRow, _Mapping]] = ..., tombstone: _Optional[bool] = ..., decided_revision: _Optional[bytes] = ..., reason: _Optional[str] = ...) -> None: ...

class DecidedRow(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Column]
    def __init__(self, values: _Optional[_Iterable[_Union[Column, _Mapping]]] = ...) -> None: ...

class ConfigChange(_message.Message):
    __slots__ = ("config_version", "reason")
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    config_version: str
    reason: str
    def __init__(self, config_version: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ResendRequest(_message.Message):
    __slots__ = ("source_topic_ref", "source_partition", "replay_epoch", "from_source_sequence")
    SOURCE_TOPIC_REF_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLAY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FROM_SOURCE_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    source_topic_ref: int
    source_partition: int
    replay_epoch: int
    from_source_sequence: int
    def __init__(self, source_topic_ref: _Optional[int] = ..., source_partition: _Optional[int] = ..., replay_epoch: _Optional[int] = ..., from_source_sequence: _Optional[int] = ...) -> None: ...

class ReconcileRequest(_message.Message):
    __slots__ = ("exchange_id", "round", "ship_table_ref", "message")
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SHIP_TABLE_REF_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    exchange_id: bytes
    round: int
    ship_table_ref: int
    message: bytes
    def __init__(self, exchange_id: _Optional[bytes] = ..., round: _Optional[int] = ..., ship_table_ref: _Optional[int] = ..., message: _Optional[bytes] = ...) -> None: ...

class SnapshotKeysRequest(_message.Message):
    __slots__ = ("exchange_id", "ship_table_ref", "keys", "actor", "reason")
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    SHIP_TABLE_REF_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    exchange_id: bytes
    ship_table_ref: int
    keys: bytes
    actor: str
    reason: str
    def __init__(self, exchange_id: _Optional[bytes] = ..., ship_table_ref: _Optional[int] = ..., keys: _Optional[bytes] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DownlinkCommand(_message.Message):
    __slots__ = ("command_id", "sequence", "issued_at_micros", "row_change", "conflict_decision", "config_change", "resend", "reconcile", "snapshot_keys")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    ROW_CHANGE_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_DECISION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_CHANGE_FIELD_NUMBER: _ClassVar[int]
    RESEND_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_KEYS_FIELD_NUMBER: _ClassVar[int]
    command_id: bytes
    sequence: int
    issued_at_micros: int
    row_change: ShoreRowChange
    conflict_decision: ConflictDecision
    config_change: ConfigChange
    resend: ResendRequest
    reconcile: ReconcileRequest
    snapshot_keys: SnapshotKeysRequest
    def __init__(self, command_id: _Optional[bytes] = ..., sequence: _Optional[int] = ..., issued_at_micros: _Optional[int] = ..., row_change: _Optional[_Union[ShoreRowChange, _Mapping]] = ..., conflict_decision: _Optional[_Union[ConflictDecision, _Mapping]] = ..., config_change: _Optional[_Union[ConfigChange, _Mapping]] = ..., resend: _Optional[_Union[ResendRequest, _Mapping]] = ..., reconcile: _Optional[_Union[ReconcileRequest, _Mapping]] = ..., snapshot_keys: _Optional[_Union[SnapshotKeysRequest, _Mapping]] = ...) -> None: ...

class ReconcileAnswer(_message.Message):
    __slots__ = ("protocol_version", "node_id", "command_id", "exchange_id", "round", "message")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    EXCHANGE_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    node_id: str
    command_id: bytes
    exchange_id: bytes
    round: int
    message: bytes
    def __init__(self, protocol_version: _Optional[str] = ..., node_id: _Optional[str] = ..., command_id: _Optional[bytes] = ..., exchange_id: _Optional[bytes] = ..., round: _Optional[int] = ..., message: _Optional[bytes] = ...) -> None: ...

class ReconcileAnswerResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class CommandsPage(_message.Message):
    __slots__ = ("commands", "strings", "next_cursor", "has_more")
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[DownlinkCommand]
    strings: _containers.RepeatedScalarFieldContainer[str]
    next_cursor: str
    has_more: bool
    def __init__(self, commands: _Optional[_Iterable[_Union[DownlinkCommand, _Mapping]]] = ..., strings: _Optional[_Iterable[str]] = ..., next_cursor: _Optional[str] = ..., has_more: _Optional[bool] = ...) -> None: ...

class CommandAck(_message.Message):
    __slots__ = ("command_id", "sequence", "result", "reason_code", "detail", "local_revision", "row_exists", "current_row", "processed_at_micros")
    COMMAND_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    LOCAL_REVISION_FIELD_NUMBER: _ClassVar[int]
    ROW_EXISTS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_ROW_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    command_id: bytes
    sequence: int
    result: CommandResult
    reason_code: str
    detail: str
    local_revision: bytes
    row_exists: bool
    current_row: _containers.RepeatedCompositeFieldContainer[Column]
    processed_at_micros: int
    def __init__(self, command_id: _Optional[bytes] = ..., sequence: _Optional[int] = ..., result: _Optional[_Union[CommandResult, str]] = ..., reason_code: _Optional[str] = ..., detail: _Optional[str] = ..., local_revision: _Optional[bytes] = ..., row_exists: _Optional[bool] = ..., current_row: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., processed_at_micros: _Optional[int] = ...) -> None: ...

class CommandAcks(_message.Message):
    __slots__ = ("protocol_version", "node_id", "acks", "strings")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    node_id: str
    acks: _containers.RepeatedCompositeFieldContainer[CommandAck]
    strings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, protocol_version: _Optional[str] = ..., node_id: _Optional[str] = ..., acks: _Optional[_Iterable[_Union[CommandAck, _Mapping]]] = ..., strings: _Optional[_Iterable[str]] = ...) -> None: ...

class CommandAcksResponse(_message.Message):
    __slots__ = ("accepted_command_ids", "rejected_command_ids")
    ACCEPTED_COMMAND_IDS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_COMMAND_IDS_FIELD_NUMBER: _ClassVar[int]
    accepted_command_ids: _containers.RepeatedScalarFieldContainer[bytes]
    rejected_command_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, accepted_command_ids: _Optional[_Iterable[bytes]] = ..., rejected_command_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class SubsystemHealth(_message.Message):
    __slots__ = ("subsystem", "state", "reason_code", "detail", "since_micros")
    SUBSYSTEM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    SINCE_MICROS_FIELD_NUMBER: _ClassVar[int]
    subsystem: Subsystem
    state: HealthState
    reason_code: str
    detail: str
    since_micros: int
    def __init__(self, subsystem: _Optional[_Union[Subsystem, str]] = ..., state: _Optional[_Union[HealthState, str]] = ..., reason_code: _Optional[str] = ..., detail: _Optional[str] = ..., since_micros: _Optional[int] = ...) -> None: ...

class PartitionBacklog(_message.Message):
    __slots__ = ("direction", "topic", "partition", "end_offset", "received_offset", "terminal_offset", "bytes", "estimated_compressed_bytes", "oldest_captured_at_micros", "oldest_business_at_micros", "rule_id")
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COMPRESSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_CAPTURED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_BUSINESS_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    direction: Direction
    topic: str
    partition: int
    end_offset: int
    received_offset: int
    terminal_offset: int
    bytes: int
    estimated_compressed_bytes: int
    oldest_captured_at_micros: int
    oldest_business_at_micros: int
    rule_id: str
    def __init__(self, direction: _Optional[_Union[Direction, str]] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., end_offset: _Optional[int] = ..., received_offset: _Optional[int] = ..., terminal_offset: _Optional[int] = ..., bytes: _Optional[int] = ..., estimated_compressed_bytes: _Optional[int] = ..., oldest_captured_at_micros: _Optional[int] = ..., oldest_business_at_micros: _Optional[int] = ..., rule_id: _Optional[str] = ...) -> None: ...

class ThroughputSample(_message.Message):
    __slots__ = ("direction", "window_start_micros", "window_seconds", "payload_bytes_confirmed", "physical_bytes", "active_transfer_seconds")
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_MICROS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_TRANSFER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    direction: Direction
    window_start_micros: int
    window_seconds: int
    payload_bytes_confirmed: int
    physical_bytes: int
    active_transfer_seconds: float
    def __init__(self, direction: _Optional[_Union[Direction, str]] = ..., window_start_micros: _Optional[int] = ..., window_seconds: _Optional[int] = ..., payload_bytes_confirmed: _Optional[int] = ..., physical_bytes: _Optional[int] = ..., active_transfer_seconds: _Optional[float] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("protocol_version", "node_id", "client_version", "sent_at_micros", "health", "backlog", "throughput", "active_config_version", "rules", "sync_states", "timezone")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATES_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    node_id: str
    client_version: str
    sent_at_micros: int
    health: _containers.RepeatedCompositeFieldContainer[SubsystemHealth]
    backlog: _containers.RepeatedCompositeFieldContainer[PartitionBacklog]
    throughput: _containers.RepeatedCompositeFieldContainer[ThroughputSample]
    active_config_version: str
    rules: _containers.RepeatedCompositeFieldContainer[RuleActivation]
    sync_states: _containers.RepeatedCompositeFieldContainer[SyncState]
    timezone: str
    def __init__(self, protocol_version: _Optional[str] = ..., node_id: _Optional[str] = ..., client_version: _Optional[str] = ..., sent_at_micros: _Optional[int] = ..., health: _Optional[_Iterable[_Union[SubsystemHealth, _Mapping]]] = ..., backlog: _Optional[_Iterable[_Union[PartitionBacklog, _Mapping]]] = ..., throughput: _Optional[_Iterable[_Union[ThroughputSample, _Mapping]]] = ..., active_config_version: _Optional[str] = ..., rules: _Optional[_Iterable[_Union[RuleActivation, _Mapping]]] = ..., sync_states: _Optional[_Iterable[_Union[SyncState, _Mapping]]] = ..., timezone: _Optional[str] = ...) -> None: ...

class RuleActivation(_message.Message):
    __slots__ = ("rule_id", "active_version", "candidate_version", "validation", "problems", "activated_at_micros")
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    ACTIVATED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    rule_id: str
    active_version: int
    candidate_version: int
    validation: RuleValidation
    problems: _containers.RepeatedScalarFieldContainer[str]
    activated_at_micros: int
    def __init__(self, rule_id: _Optional[str] = ..., active_version: _Optional[int] = ..., candidate_version: _Optional[int] = ..., validation: _Optional[_Union[RuleValidation, str]] = ..., problems: _Optional[_Iterable[str]] = ..., activated_at_micros: _Optional[int] = ...) -> None: ...

class SyncState(_message.Message):
    __slots__ = ("rule_id", "rule_version", "table", "phase", "snapshot_id", "rows_sent", "rows_total", "started_at_micros", "finished_at_micros", "lag_records")
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    RULE_VERSION_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_SENT_FIELD_NUMBER: _ClassVar[int]
    ROWS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_MICROS_FIELD_NUMBER: _ClassVar[int]
    LAG_RECORDS_FIELD_NUMBER: _ClassVar[int]
    rule_id: str
    rule_version: int
    table: str
    phase: SyncPhase
    snapshot_id: int
    rows_sent: int
    rows_total: int
    started_at_micros: int
    finished_at_micros: int
    lag_records: int
    def __init__(self, rule_id: _Optional[str] = ..., rule_version: _Optional[int] = ..., table: _Optional[str] = ..., phase: _Optional[_Union[SyncPhase, str]] = ..., snapshot_id: _Optional[int] = ..., rows_sent: _Optional[int] = ..., rows_total: _Optional[int] = ..., started_at_micros: _Optional[int] = ..., finished_at_micros: _Optional[int] = ..., lag_records: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("server_time_micros", "next_interval_seconds", "config_version")
    SERVER_TIME_MICROS_FIELD_NUMBER: _ClassVar[int]
    NEXT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    server_time_micros: int
    next_interval_seconds: int
    config_version: str
    def __init__(self, server_time_micros: _Optional[int] = ..., next_interval_seconds: _Optional[int] = ..., config_version: _Optional[str] = ...) -> None: ...

class RuleSnapshot(_message.Message):
    __slots__ = ("rule_id", "version", "status", "content", "checksum")
    RULE_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    rule_id: str
    version: int
    status: RuleStatus
    content: bytes
    checksum: bytes
    def __init__(self, rule_id: _Optional[str] = ..., version: _Optional[int] = ..., status: _Optional[_Union[RuleStatus, str]] = ..., content: _Optional[bytes] = ..., checksum: _Optional[bytes] = ...) -> None: ...

class ControlParameters(_message.Message):
    __slots__ = ("batch_max_events", "batch_max_uncompressed_bytes", "rate_bytes_per_sec", "burst_bytes", "heartbeat_interval_seconds")
    BATCH_MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    BATCH_MAX_UNCOMPRESSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RATE_BYTES_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    BURST_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    batch_max_events: int
    batch_max_uncompressed_bytes: int
    rate_bytes_per_sec: int
    burst_bytes: int
    heartbeat_interval_seconds: int
    def __init__(self, batch_max_events: _Optional[int] = ..., batch_max_uncompressed_bytes: _Optional[int] = ..., rate_bytes_per_sec: _Optional[int] = ..., burst_bytes: _Optional[int] = ..., heartbeat_interval_seconds: _Optional[int] = ...) -> None: ...

class ConfigResponse(_message.Message):
    __slots__ = ("config_version", "rules", "control")
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    config_version: str
    rules: _containers.RepeatedCompositeFieldContainer[RuleSnapshot]
    control: ControlParameters
    def __init__(self, config_version: _Optional[str] = ..., rules: _Optional[_Iterable[_Union[RuleSnapshot, _Mapping]]] = ..., control: _Optional[_Union[ControlParameters, _Mapping]] = ...) -> None: ...

class ErrorResponse(_message.Message):
    __slots__ = ("reason_code", "message", "retry_after_seconds", "supported_protocol_versions", "request_id", "server_time_micros", "resume_from")
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_PROTOCOL_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_MICROS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_FIELD_NUMBER: _ClassVar[int]
    reason_code: str
    message: str
    retry_after_seconds: int
    supported_protocol_versions: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    server_time_micros: int
    resume_from: int
    def __init__(self, reason_code: _Optional[str] = ..., message: _Optional[str] = ..., retry_after_seconds: _Optional[int] = ..., supported_protocol_versions: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ..., server_time_micros: _Optional[int] = ..., resume_from: _Optional[int] = ...) -> None: ...

class WireDictionary(_message.Message):
    __slots__ = ("protocol_version", "node_id", "dictionary")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DICTIONARY_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    node_id: str
    dictionary: bytes
    def __init__(self, protocol_version: _Optional[str] = ..., node_id: _Optional[str] = ..., dictionary: _Optional[bytes] = ...) -> None: ...

class WireDictionaryResponse(_message.Message):
    __slots__ = ("dictionary_id",)
    DICTIONARY_ID_FIELD_NUMBER: _ClassVar[int]
    dictionary_id: bytes
    def __init__(self, dictionary_id: _Optional[bytes] = ...) -> None: ...

class PartitionRanges(_message.Message):
    __slots__ = ("topic_ref", "partition", "replay_epoch", "ranges")
    TOPIC_REF_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLAY_EPOCH_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    topic_ref: int
    partition: int
    replay_epoch: int
    ranges: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic_ref: _Optional[int] = ..., partition: _Optional[int] = ..., replay_epoch: _Optional[int] = ..., ranges: _Optional[_Iterable[int]] = ...) -> None: ...
