"""Decoding plans for Debezium records: a value or key schema → one decoder per column.

Plans are built once per distinct schema text (records with schemas) or per column-types mapping
(payload-only records) and cached, so a record costs one parse of its payload.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from tidesync.cdc.column_types import MySQLColumnType
from tidesync.cdc.debezium_values import (
    ColumnCodec,
    DecimalHandling,
    Decoder,
    mysql_codec,
    schema_codec,
)
from tidesync.cdc.outcomes import BadValue, Blocked, BlockReason
from tidesync.cdc.strict_json import (
    JSON_ERRORS,
    NOT_FAST,
    STRICT_JSON,
    fast_json,
    parse_json,
    utf8_text,
)
from tidesync.domain.values import Value

# Newest versions whose layout this module has been checked against (SEMANTICS.md §1, §3).
MAX_ENVELOPE_SCHEMA_VERSION = 2
MAX_SOURCE_SCHEMA_VERSION = 1


# --- rows -----------------------------------------------------------------------------------

_MAX_LAYOUTS = 64


class RowPlan:
    """Decoders for every column of one table image, built once and reused for each row."""

    __slots__ = ("_layouts", "as_is", "decoders", "described", "refused", "unknown_reason")

    def __init__(self, unknown_reason: BlockReason, described: str) -> None:
        self.as_is: dict[str, Any] = {}  # column → the Value type taken as is
        self.decoders: dict[str, Decoder] = {}
        self.refused: dict[str, BadValue] = {}
        self.unknown_reason = unknown_reason
        self.described = described
        # Layouts met (column order, then each value's type) → (column, decoder) of the values
        # to decode: a row in a known layout is decoded without per-column look-ups.
        self._layouts: dict[tuple[Any, ...], list[tuple[str, Decoder]]] = {}

    def add(self, column: str, build: Callable[[], ColumnCodec]) -> None:
        self._layouts.clear()
        try:
            fast_type, decoder = build()
        except BadValue as problem:
            self.refused[column] = problem
            return
        if fast_type is not None:
            self.as_is[column] = fast_type
        self.decoders[column] = decoder

    def decode(self, row: Any, image: str, unknown_reason: BlockReason | None = None
               ) -> dict[str, Value]:
        if type(row) is not dict:
            raise Blocked(BlockReason.MALFORMED_ENVELOPE, f"{image} is not a JSON object")
        # The columns in their order, then the type of each value: whether a value is taken
        # as is or decoded depends on nothing else, so a layout met before lists just the
        # columns to decode (most of a row is taken as it is).
        layout = (*row, *map(type, row.values()))
        to_decode = self._layouts.get(layout)
        if to_decode is not None:
            # Copied whole, then only the values not already of their Value type decoded.
            fast = dict(row)
            try:
                for column, decoder in to_decode:
                    fast[column] = decoder(row[column])
            except BadValue:
                pass  # The loop below names the column.
            else:
                return fast
        for column, problem in self.refused.items():
            if column in row:
                raise Blocked(problem.reason, f"{image} column {column!r}: {problem.detail}")
        decoded = self._decode(row, image, unknown_reason)
        if not self.refused:
            if len(self._layouts) >= _MAX_LAYOUTS:
                self._layouts.clear()
            as_is, decoders = self.as_is, self.decoders
            self._layouts[layout] = [
                (column, decoders[column]) for column, raw in row.items()
                if type(raw) is not as_is.get(column) and raw is not None]
        return decoded

    def _decode(self, row: dict[str, Any], image: str, unknown_reason: BlockReason | None
                ) -> dict[str, Value]:
        as_is, decoders = self.as_is, self.decoders
        decoded: dict[str, Value] = {}
        column = ""
        try:
            for column, raw in row.items():
                if type(raw) is as_is.get(column):
                    decoded[column] = raw
                    continue
                decoder = decoders.get(column)
                if decoder is None:
                    break
                decoded[column] = None if raw is None else decoder(raw)
            else:
                return decoded
        except BadValue as problem:
            raise Blocked(problem.reason, f"{image} column {column!r}: {problem.detail}"
                          ) from None
        raise Blocked(unknown_reason or self.unknown_reason,
                      f"{image} column {column!r} is not in {self.described}")


def _schema_plan(fields: Sequence[Mapping[str, Any]], types: Mapping[str, str] | None,
                 described: str) -> RowPlan:
    plan = RowPlan(BlockReason.MALFORMED_ENVELOPE, described)
    for field in fields:
        column: str = field["field"]
        mysql = _mysql_type_or_none(types.get(column)) if types else None
        plan.add(column, functools.partial(schema_codec, field, mysql))
    return plan


def _mysql_type_or_none(text: str | None) -> MySQLColumnType | None:
    if text is None:
        return None
    try:
        return MySQLColumnType.parse(text)
    except ValueError:
        return None  # With a schema the declared type stands on its own.


def types_plan(types: Mapping[str, str], handling: DecimalHandling | None,
               described: str) -> RowPlan:
    plan = RowPlan(BlockReason.TYPE_INFO_MISSING, described)
    for column, text in types.items():
        plan.add(column, functools.partial(_codec_from_type_text, text, handling))
    return plan


def _codec_from_type_text(text: str, handling: DecimalHandling | None) -> ColumnCodec:
    try:
        mysql = MySQLColumnType.parse(text)
        return mysql_codec(mysql, handling)
    except ValueError:
        raise BadValue(BlockReason.UNSUPPORTED_TYPE,
                       f"column type {text!r} is not understood") from None


class StructSchema:
    """A struct schema (a row image or a key) and its plan per column-types mapping."""

    __slots__ = ("_plan", "_types", "described", "fields", "problem")

    def __init__(self, schema: Any, described: str) -> None:
        self.described = described
        self.fields: list[Mapping[str, Any]] = []
        self.problem: Blocked | None = None
        self._types: object = None
        self._plan: RowPlan | None = None
        fields = schema.get("fields") if isinstance(schema, dict) else None
        if not isinstance(fields, list):
            self.problem = Blocked(BlockReason.MALFORMED_ENVELOPE,
                                   f"{described} is not a struct with fields")
            return
        names = set()
        for field in fields:
            if not (isinstance(field, dict) and type(field.get("field")) is str
                    and field["field"] not in names):
                self.problem = Blocked(BlockReason.MALFORMED_ENVELOPE,
                                       f"{described} has an unnamed or repeated field")
                return
            names.add(field["field"])
            self.fields.append(field)

    def plan(self, types: Mapping[str, str] | None) -> RowPlan:
        if self.problem is not None:
            raise self.problem
        if self._plan is None or self._types is not types:
            self._plan = _schema_plan(self.fields, types, self.described)
            self._types = types
        return self._plan


class EnvelopeSchema:
    """What one value schema says, computed once per distinct schema text."""

    __slots__ = ("images", "name", "problem")

    def __init__(self, schema: Any) -> None:
        self.name: object = schema.get("name") if isinstance(schema, dict) else None
        self.problem: Blocked | None = None
        self.images: dict[str, StructSchema] = {}
        try:
            self._read(schema)
        except Blocked as problem:
            self.problem = problem

    def _read(self, schema: Any) -> None:
        if not isinstance(schema, dict) or not isinstance(schema.get("fields"), list):
            raise Blocked(BlockReason.MALFORMED_ENVELOPE, "value schema is not a struct")
        _check_version(schema.get("version"), MAX_ENVELOPE_SCHEMA_VERSION, "envelope schema")
        for field in schema["fields"]:
            name = field.get("field") if isinstance(field, dict) else None
            if name in ("before", "after"):
                self.images[name] = StructSchema(field, f"the {name} schema")
            elif name == "source":
                _check_version(field.get("version"), MAX_SOURCE_SCHEMA_VERSION, "source schema")

    def plan(self, image: str, types: Mapping[str, str] | None) -> RowPlan:
        if self.problem is not None:
            raise self.problem
        struct = self.images.get(image)
        if struct is None:
            raise Blocked(BlockReason.MALFORMED_ENVELOPE, f"value schema has no {image} field")
        return struct.plan(types)


def _check_version(version: Any, newest: int, what: str) -> None:
    if version is None:
        return
    if type(version) is not int:
        raise Blocked(BlockReason.MALFORMED_ENVELOPE, f"{what} version is not an integer")
    if version > newest:
        raise Blocked(BlockReason.UNSUPPORTED_SCHEMA_VERSION,
                      f"{what} version {version} is newer than {newest}")


# --- schemas by text ----------------------------------------------------------------------

_Entry = TypeVar("_Entry")
_SCHEMA_PREFIX = '{"schema":'
_PAYLOAD_SEPARATOR = ',"payload":'
_SCHEMA_PREFIX_BYTES = _SCHEMA_PREFIX.encode()
_PAYLOAD_SEPARATOR_BYTES = _PAYLOAD_SEPARATOR.encode()
_JSON_SPACE = b" \t\n\r"
_MISSING: Any = object()


class SchemaCache(Generic[_Entry]):
    """Schema entries keyed by the schema's exact JSON text, as the JSON converter writes it.

    The key is the schema's bytes as they stand in the record (its fingerprint: equal bytes,
    equal schema), so a record with schemas costs one dictionary look-up more than a
    payload-only one; the schema text is parsed only the first time it is met.
    """

    def __init__(self, build: Callable[[Any], _Entry], limit: int = 1024) -> None:
        self.build = build
        self._entries: dict[str, _Entry | None] = {}
        self._by_bytes: dict[bytes, _Entry | None] = {}
        # The head of the record met last (prefix, schema, separator) and its entry.
        self._last: tuple[bytes, _Entry | None] | None = None
        self._limit = limit

    def load_bytes(self, data: bytes, what: str) -> tuple[_Entry | None, Any, bool]:
        """(schema entry, payload, clean) of a JSON-converter record as read from the queue.

        The same answer as `load` on the record's text, found faster where possible; `clean`
        says the fast parser read the payload, so it holds no lone surrogate. Anything the
        fast path cannot answer goes through `load`, and so fails exactly as it does."""
        last = self._last
        if last is not None and data.startswith(last[0]):
            # The schema met last, compared in place: finding the separator and hashing the
            # schema bytes cost more than the rest of a small record. The remembered head
            # ends at its first separator (a schema holds none, and the separator cannot
            # overlap itself), so it is where `find` would cut.
            cut, entry = len(last[0]), last[1]
        elif data.startswith(_SCHEMA_PREFIX_BYTES):
            cut = data.find(_PAYLOAD_SEPARATOR_BYTES, len(_SCHEMA_PREFIX_BYTES))
            entry = (self._by_bytes.get(data[len(_SCHEMA_PREFIX_BYTES):cut], _MISSING)
                     if cut > 0 else _MISSING)
            if entry is not _MISSING:
                cut += len(_PAYLOAD_SEPARATOR_BYTES)
                self._last = (data[:cut], entry)
        else:
            document = fast_json(data)
            if document is not NOT_FAST and not (
                    type(document) is dict and "schema" in document and "payload" in document):
                return None, document, True
            entry = _MISSING
        if entry is not _MISSING:
            payload = (fast_json(data[cut:-1]) if data.endswith(b"}")
                       else self._fast_body(data[cut:]))
            if payload is not NOT_FAST:
                return entry, payload, True
        entry, payload = self.load(utf8_text(data, what), what)
        return entry, payload, False

    @staticmethod
    def _fast_body(body: bytes) -> Any:
        """The payload of `body` (P} and perhaps JSON space) by the fast parser, or NOT_FAST."""
        body = body.rstrip(_JSON_SPACE)
        return fast_json(body[:-1]) if body.endswith(b"}") else NOT_FAST

    def _remember_bytes(self, schema_text: str, entry: _Entry | None) -> None:
        if len(self._by_bytes) >= self._limit:
            self._by_bytes.clear()
            self._last = None
        self._by_bytes[schema_text.encode()] = entry

    def entry_for(self, schema_text: str) -> _Entry | None:
        """The entry of a schema text; parses it (raising a JSON error) the first time."""
        try:
            return self._entries[schema_text]
        except KeyError:
            pass
        schema = STRICT_JSON.decode(schema_text)
        if len(self._entries) >= self._limit:
            self._entries.clear()
        entry = self.build(schema) if schema else None
        self._entries[schema_text] = entry
        return entry

    def load(self, text: str, what: str) -> tuple[_Entry | None, Any]:
        """(schema entry, payload) of a JSON-converter record, with schemas or payload-only.

        The converter writes `{"schema":S,"payload":P}`: when the text has that form, S is
        looked up by its text and only P is parsed. Anything else is parsed whole.
        """
        if text.startswith(_SCHEMA_PREFIX):
            cut = text.find(_PAYLOAD_SEPARATOR, len(_SCHEMA_PREFIX))
            body = text[cut + len(_PAYLOAD_SEPARATOR):].rstrip(" \t\n\r") if cut > 0 else ""
            if body.endswith("}"):
                schema_text = text[len(_SCHEMA_PREFIX):cut]
                try:
                    entry = self.entry_for(schema_text)
                    # Both parts parsed alone mean the whole is exactly {"schema":S,"payload":P}.
                    payload = STRICT_JSON.decode(body[:-1])
                except JSON_ERRORS:
                    pass  # Not that form after all (e.g. a nested "payload" key): parse it whole.
                else:
                    self._remember_bytes(schema_text, entry)
                    return entry, payload
        document = parse_json(text, what)
        if type(document) is dict and "schema" in document and "payload" in document:
            schema = document["schema"]
            return (self.build(schema) if schema else None), document["payload"]
        return None, document
