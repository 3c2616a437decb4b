"""The whitelisted, versioned transforms a sync rule applies to column values on the ship.

A registry of named pure functions (`trim@1`, `round@1`, `hmac_mask@1`, ...); no user code.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    ROUND_HALF_UP,
    Context,
    Decimal,
    DecimalException,
    Inexact,
    InvalidOperation,
    Overflow,
)
from types import MappingProxyType
from zoneinfo import ZoneInfo

from tidesync.domain.column_kinds import ColumnKind
from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.domain.rules.transform_args import (
    ArgSpec,
    ArgType,
    ArgValue,
    BoundArgs,
    BoundValue,
    FrozenArgs,
    arg_problems,
    bind_args,
)
from tidesync.domain.value_checks import MAX_DECIMAL_DIGITS, MAX_DECIMAL_EXPONENT
from tidesync.domain.values import BitString, JsonText, Value, canonical_value

MAX_COLUMN_NAME = 64
MAX_ARGS = 8
MAX_ARG_TEXT = 256
MAX_ARG_INT = 2**63 - 1

_REF = re.compile(r"([a-z][a-z0-9_]{0,31})@([1-9][0-9]{0,5})")
_ARG_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")
_INTEGER_LIMIT = 10**MAX_DECIMAL_DIGITS

_KIND_TYPES: dict[ColumnKind, tuple[type, ...]] = {
    ColumnKind.BOOL: (bool,),
    ColumnKind.INTEGER: (int,),
    ColumnKind.FLOAT: (float,),
    ColumnKind.DECIMAL: (Decimal,),
    ColumnKind.TEXT: (str,),
    ColumnKind.BYTES: (bytes,),
    ColumnKind.DATETIME: (dt.datetime,),
    ColumnKind.DATE: (dt.date,),
    ColumnKind.TIME: (dt.time,),
    ColumnKind.JSON: (JsonText,),
    ColumnKind.BITS: (BitString,),
    ColumnKind.OTHER: (str,),
}
"""The exact Python types a column of each kind holds (a bool is not an INTEGER value)."""

ALL_KINDS = frozenset(ColumnKind)


class TransformError(TidesyncError):
    """A transform is unknown, malformed, misapplied or cannot be applied to a value.

    Messages name transforms, arguments, columns and value types, never the values."""

    code = ErrorCode.RULE_TRANSFORM_INVALID


@dataclass(frozen=True, slots=True)
class TransformSpec:
    """One transform a rule names for one column: `{ column, transform = "name@1", args }`.

    `fingerprint`, when set, is the transform's fingerprint at the time the rule was validated:
    a ship whose implementation differs refuses the rule instead of transforming differently.
    """

    column: str
    name: str
    version: int
    args: Mapping[str, ArgValue] = field(default_factory=FrozenArgs)
    fingerprint: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.args, FrozenArgs):
            object.__setattr__(self, "args", FrozenArgs(self.args))

    @classmethod
    def parse(cls, column: str, ref: str, args: Mapping[str, object] | None,
              fingerprint: str | None = None) -> TransformSpec:
        """The spec a rule writes, checked for form (what it means is `validate_transform`'s)."""
        if not isinstance(column, str) or not 0 < len(column) <= MAX_COLUMN_NAME \
                or "\x00" in column:
            raise TransformError(f"a transform's column must be a name of 1..{MAX_COLUMN_NAME} "
                                 "characters")
        match = _REF.fullmatch(ref) if isinstance(ref, str) else None
        if match is None:
            raise TransformError("a transform is written name@version, for example trim@1")
        if fingerprint is not None and (not isinstance(fingerprint, str)
                                        or _FINGERPRINT.fullmatch(fingerprint) is None):
            raise TransformError("a transform fingerprint is 64 lower-case hex digits")
        return cls(column, match.group(1), int(match.group(2)), _parse_args(args), fingerprint)

    def ref(self) -> str:
        return f"{self.name}@{self.version}"


def _parse_args(args: Mapping[str, object] | None) -> FrozenArgs:
    if args is None:
        return FrozenArgs()
    if not isinstance(args, Mapping):
        raise TransformError("a transform's args must be a table")
    if len(args) > MAX_ARGS:
        raise TransformError(f"a transform takes at most {MAX_ARGS} args")
    parsed: dict[str, ArgValue] = {}
    for name, value in args.items():
        if not isinstance(name, str) or _ARG_NAME.fullmatch(name) is None:
            raise TransformError("an argument name is lower-case letters, digits and _")
        parsed[name] = _arg_value(name, value)
    return FrozenArgs(parsed)


def _arg_value(name: str, value: object) -> ArgValue:
    if isinstance(value, float):
        raise TransformError(f"argument {name}: write a fractional number as a string, "
                             "so it stays exact")
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) <= MAX_ARG_INT:
        return value
    if isinstance(value, str) and len(value) <= MAX_ARG_TEXT:
        return value
    raise TransformError(f"argument {name}: must be a string of at most {MAX_ARG_TEXT} "
                         "characters, an integer or a boolean")


@dataclass(frozen=True, slots=True)
class TransformContext:
    """What a transform may use besides its value and arguments."""

    mask_key: bytes = field(default=b"", repr=False)
    """The installation's secret for hmac_mask; may be empty where nothing is applied."""


TransformFunction = Callable[[Value, BoundArgs, TransformContext], Value]
KindCheck = Callable[[ColumnKind, BoundArgs], str | None]


@dataclass(frozen=True, slots=True)
class Example:
    """An input and the output a transform gives for it: part of its fingerprint, and checked
    by the tests, so changing what a transform does changes its fingerprint."""

    value: Value
    args: FrozenArgs
    result: Value


EXAMPLE_CONTEXT = TransformContext(mask_key=b"tidesync example key, not a secret")


@dataclass(frozen=True)
class Transform:
    """One registered pure function, its version, the column kinds it takes and its fingerprint.

    The fingerprint is a SHA-256 of the name, version, kinds, description, argument schema and
    examples: a deliberate change of behaviour changes it, and then takes a new version.
    """

    name: str
    version: int
    kinds: frozenset[ColumnKind]
    description: str
    arg_schema: tuple[ArgSpec, ...]
    examples: tuple[Example, ...]
    function: TransformFunction = field(compare=False, repr=False)
    kind_check: KindCheck | None = field(default=None, compare=False, repr=False)
    fingerprint: str = field(init=False)
    _types: tuple[type, ...] = field(init=False, compare=False, repr=False)
    _bound: dict[tuple[object, ...], dict[str, BoundValue]] = field(
        init=False, compare=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fingerprint", _fingerprint(self))
        types = () if self.kinds == ALL_KINDS else tuple(
            {kind_type for kind in self.kinds for kind_type in _KIND_TYPES[kind]})
        object.__setattr__(self, "_types", types)

    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def apply(self, value: Value, args: Mapping[str, ArgValue],
              context: TransformContext) -> Value:
        """The transformed value; NULL stays NULL. Raises TransformError, without the value."""
        if value is None:
            return None
        if self._types and type(value) not in self._types:
            raise TransformError(f"{self.ref()} takes {self._kind_names()} values, "
                                 f"not {type(value).__name__}")
        return self.function(value, self._bind(args), context)

    def problems(self, args: Mapping[str, ArgValue], kind: ColumnKind | None) -> list[str]:
        """What is wrong with these arguments (for a column of this kind, when known)."""
        problems = arg_problems(self.arg_schema, args)
        if kind is not None and kind not in self.kinds:
            problems.append(f"takes {self._kind_names()} values, not {kind.value}")
        elif not problems and kind is not None and self.kind_check is not None:
            problem = self.kind_check(kind, bind_args(self.arg_schema, args))
            problems.extend([problem] if problem else [])
        return problems

    def _bind(self, args: Mapping[str, ArgValue]) -> BoundArgs:
        # Rules hold few distinct argument sets: convert each once, not once per value.
        key = tuple((name, type(value).__name__, value) for name, value in sorted(args.items()))
        bound = self._bound.get(key)
        if bound is None:
            problems = arg_problems(self.arg_schema, args)
            if problems:
                raise TransformError(f"{self.ref()}: {problems[0]}")
            if len(self._bound) >= 64:
                self._bound.clear()
            bound = self._bound[key] = bind_args(self.arg_schema, args)
        return bound

    def _kind_names(self) -> str:
        return " or ".join(sorted(kind.value for kind in self.kinds))


def _fingerprint(transform: Transform) -> str:
    text = json.dumps({
        "name": transform.name,
        "version": transform.version,
        "kinds": sorted(kind.value for kind in transform.kinds),
        "description": transform.description,
        "args": [spec.describe() for spec in transform.arg_schema],
        "examples": [[_example_value(example.value), dict(example.args),
                      _example_value(example.result)] for example in transform.examples],
    }, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _example_value(value: Value) -> list[object]:
    # Keeps a datetime's offset, or its lack of one (canonical_value needs aware UTC).
    if isinstance(value, dt.datetime):
        return ["datetime", value.isoformat()]
    return canonical_value(value)


# The functions. Each is pure and total on the types of its kinds: anything else it cannot do
# raises TransformError with a message that does not hold the value.


def _trim(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    return _text(value).strip()


def _lower(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    return _text(value).lower()


def _upper(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    return _text(value).upper()


def _truncate(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    return _text(value)[:_int_arg(args, "length")]


def _round(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    places = _int_arg(args, "places")
    if isinstance(value, float):
        return round(value, places) + 0.0 if math.isfinite(value) else value
    number = _decimal(value, "round@1")
    if not number.is_finite():
        return number
    exact = Context(prec=max(1, number.adjusted() + places + 2), rounding=ROUND_HALF_UP,
                    Emax=MAX_EMAX, Emin=MIN_EMIN)
    # A result this transform would refuse as input (too many digits) is refused now, so
    # rounding a rounded value always gives it back.
    return _decimal(_positive_zero(number.quantize(Decimal(1).scaleb(-places), context=exact)),
                    "round@1")


def _scale(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    factor = args["factor"]
    if not isinstance(factor, Decimal):
        raise TransformError("scale@1: argument factor is not a decimal")
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) >= _INTEGER_LIMIT:
            raise TransformError("scale@1: the integer is out of range")
        product = _exact_product(Decimal(value), factor)
        if product != product.to_integral_value():
            raise TransformError("scale@1: the result for an integer is not a whole number")
        return int(product)
    number = _decimal(value, "scale@1")
    return _exact_product(number, factor) if number.is_finite() else number


def _scale_kind_check(kind: ColumnKind, args: BoundArgs) -> str | None:
    factor = args["factor"]
    if kind is ColumnKind.INTEGER and isinstance(factor, Decimal) \
            and factor != factor.to_integral_value():
        return "argument factor must be a whole number for integer values"
    return None


def _hmac_mask(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    if not context.mask_key:
        raise TransformError("hmac_mask@1: no mask key is configured")
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes):
        data = value
    else:
        raise TransformError(f"hmac_mask@1 takes text or bytes values, not {type(value).__name__}")
    mask = hmac.new(context.mask_key, data, hashlib.sha256).hexdigest()[:_int_arg(args, "length")]
    return mask if isinstance(value, str) else mask.encode("ascii")


def _null(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    return None


def _utc(value: Value, args: BoundArgs, context: TransformContext) -> Value:
    if not isinstance(value, dt.datetime):
        raise TransformError(f"utc@1 takes datetime values, not {type(value).__name__}")
    zone = args.get("from_zone")
    offset = value.utcoffset()
    try:
        if offset is None:
            wall = value.replace(tzinfo=None, fold=0)
        elif zone is not None and offset == dt.timedelta(0):
            # Decoders mark a zone-less DATETIME as UTC by convention: that is the wall reading.
            wall = value.replace(tzinfo=None, fold=0)
        else:
            return value.astimezone(dt.UTC)
        if not isinstance(zone, ZoneInfo):
            return wall.replace(tzinfo=dt.UTC)
        return wall.replace(tzinfo=zone).astimezone(dt.UTC)
    except OverflowError:
        raise TransformError("utc@1: the time in UTC falls outside the supported dates") from None


def _text(value: Value) -> str:
    if not isinstance(value, str):
        raise TransformError(f"takes text values, not {type(value).__name__}")
    return value


def _int_arg(args: BoundArgs, name: str) -> int:
    value = args[name]
    if not isinstance(value, int):
        raise TransformError(f"argument {name} is not an integer")
    return value


def _decimal(value: Value, ref: str) -> Decimal:
    if not isinstance(value, Decimal):
        raise TransformError(f"{ref} takes decimal values, not {type(value).__name__}")
    exponent = value.as_tuple().exponent
    if value.is_finite() and (len(value.as_tuple().digits) > MAX_DECIMAL_DIGITS
                              or not isinstance(exponent, int)
                              or abs(exponent) > MAX_DECIMAL_EXPONENT):
        raise TransformError(f"{ref}: the decimal is out of range")
    return value


def _exact_product(number: Decimal, factor: Decimal) -> Decimal:
    digits = len(number.as_tuple().digits) + len(factor.as_tuple().digits)
    exact = Context(prec=digits, Emax=MAX_EMAX, Emin=MIN_EMIN,
                    traps=[Inexact, Overflow, InvalidOperation])
    try:
        return _positive_zero(exact.multiply(number, factor))
    except DecimalException:
        raise TransformError("scale@1: the product cannot be held exactly") from None


def _positive_zero(number: Decimal) -> Decimal:
    # -0.00 and 0.00 are one value to a database, but not to the canonical text of a row.
    return number.copy_abs() if number.is_zero() else number


def _examples(*cases: tuple[Value, Mapping[str, ArgValue], Value]) -> tuple[Example, ...]:
    return tuple(Example(value, FrozenArgs(args), result) for value, args, result in cases)


_TEXT = frozenset({ColumnKind.TEXT})
_LENGTH = ArgSpec("length", ArgType.INT, low=1, high=65535)
_MASK_LENGTH = ArgSpec("length", ArgType.INT, required=False, default=16, low=8, high=64)
_PLACES = ArgSpec("places", ArgType.INT, low=0, high=30)
_FACTOR = ArgSpec("factor", ArgType.DECIMAL)
_FROM_ZONE = ArgSpec("from_zone", ArgType.ZONE, required=False)
_PLUS_8 = dt.timezone(dt.timedelta(hours=8))

_TRANSFORMS = (
    Transform("trim", 1, _TEXT, "removes leading and trailing Unicode whitespace", (),
              _examples((" \tAbc d\u3000\n", {}, "Abc d"), ("", {}, "")), _trim),
    Transform("lower", 1, _TEXT, "Unicode full lower-casing (str.lower)", (),
              _examples(("MV Ærø İ", {}, "mv ærø i\u0307"),), _lower),
    Transform("upper", 1, _TEXT, "Unicode full upper-casing (str.upper); ß becomes SS", (),
              _examples(("Straße ærø", {}, "STRASSE ÆRØ"),), _upper),
    Transform("truncate", 1, _TEXT, "keeps the first `length` characters (code points)",
              (_LENGTH,), _examples(("Stella Maris", {"length": 6}, "Stella"),
                                    ("航海日志", {"length": 2}, "航海")), _truncate),
    Transform("round", 1, frozenset({ColumnKind.DECIMAL, ColumnKind.FLOAT}),
              "decimal: quantize to `places` digits, ROUND_HALF_UP (ties away from zero); "
              "float: Python round(value, places) of the binary value, ties to even; "
              "a zero result is positive zero; NaN and infinities unchanged", (_PLACES,),
              _examples((Decimal("2.345"), {"places": 2}, Decimal("2.35")),
                        (Decimal("-2.5"), {"places": 0}, Decimal("-3")),
                        (Decimal("7"), {"places": 2}, Decimal("7.00")),
                        (Decimal("-0.001"), {"places": 2}, Decimal("0.00")),
                        (2.675, {"places": 2}, 2.67), (-0.4, {"places": 0}, 0.0)), _round),
    Transform("scale", 1, frozenset({ColumnKind.INTEGER, ColumnKind.DECIMAL}),
              "multiplies by the decimal `factor`, exactly; a decimal stays a decimal, an "
              "integer stays an integer and a fractional result for an integer is an error; "
              "integer columns take whole factors only", (_FACTOR,),
              _examples((Decimal("12.50"), {"factor": "0.001"}, Decimal("0.01250")),
                        (42, {"factor": "1E+3"}, 42000), (-3, {"factor": -2}, 6)),
              _scale, _scale_kind_check),
    Transform("hmac_mask", 1, frozenset({ColumnKind.TEXT, ColumnKind.BYTES}),
              "HMAC-SHA256 under the installation's mask key of the value (text as UTF-8), "
              "lower-case hex cut to `length` characters; text for text, ASCII bytes for bytes",
              (_MASK_LENGTH,),
              _examples(("E12345678", {}, "7bb9ec7effdd9860"),
                        (b"E12345678", {"length": 8}, b"7bb9ec7e")), _hmac_mask),
    Transform("null", 1, ALL_KINDS, "replaces every value by NULL", (),
              _examples(("x", {}, None), (3, {}, None)), _null),
    Transform("utc", 1, frozenset({ColumnKind.DATETIME}),
              "an aware value is converted to UTC; a naive value is read as UTC, or with "
              "`from_zone` as wall-clock time in that zone (fold 0), and so is a value marked "
              "UTC; zone rules come from the installed tz database",
              (_FROM_ZONE,),
              _examples((dt.datetime(2001, 2, 3, 4, 5, 6, tzinfo=_PLUS_8),
                         {}, dt.datetime(2001, 2, 2, 20, 5, 6, tzinfo=dt.UTC)),
                        (dt.datetime(2001, 2, 3, 4, 5, 6), {},
                         dt.datetime(2001, 2, 3, 4, 5, 6, tzinfo=dt.UTC)),
                        (dt.datetime(2001, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
                         {"from_zone": "Asia/Shanghai"},
                         dt.datetime(2001, 2, 2, 20, 5, 6, tzinfo=dt.UTC))), _utc),
)

REGISTRY: Mapping[tuple[str, int], Transform] = MappingProxyType(
    {(transform.name, transform.version): transform for transform in _TRANSFORMS})
"""Every transform a rule may name, by (name, version)."""


def validate_transform(spec: TransformSpec, kind: ColumnKind | None) -> list[str]:
    """What is wrong with a spec for a column of this kind (None: the column does not exist).

    Only the problem about a missing column mentions the word "column"."""
    problems: list[str] = []
    transform = REGISTRY.get((spec.name, spec.version))
    if transform is None:
        versions = sorted(version for name, version in REGISTRY if name == spec.name)
        problems.append(f"unknown transform {spec.ref()}" if not versions else
                        f"{spec.name} has no version {spec.version} "
                        f"(known: {', '.join(map(str, versions))})")
    if kind is None:
        problems.append(f"column {spec.column} does not exist")
    if transform is None:
        return problems
    if spec.fingerprint is not None and spec.fingerprint != transform.fingerprint:
        problems.append(f"{spec.ref()} is implemented differently here than where the rule "
                        "was validated (fingerprint differs)")
    problems.extend(f"{spec.ref()}: {problem}" for problem in transform.problems(spec.args, kind))
    return problems


def apply_transforms(specs: Sequence[TransformSpec], row: Mapping[str, Value],
                     context: TransformContext) -> dict[str, Value]:
    """A new row with each spec applied, in order, to its column when the row has it.

    Column names match ignoring case, as MySQL's do. NULL stays NULL."""
    result = dict(row)
    for spec in specs:
        column = _row_column(result, spec.column)
        if column is None:
            continue
        transform = _registered(spec)
        try:
            result[column] = transform.apply(result[column], spec.args, context)
        except TransformError as exc:
            raise TransformError(f"column {spec.column}: {exc}") from exc
    return result


def _row_column(row: Mapping[str, Value], column: str) -> str | None:
    if column in row:
        return column
    lowered = column.lower()
    return next((name for name in row if name.lower() == lowered), None)


def _registered(spec: TransformSpec) -> Transform:
    transform = REGISTRY.get((spec.name, spec.version))
    if transform is None:
        raise TransformError(f"unknown transform {spec.ref()}")
    if spec.fingerprint is not None and spec.fingerprint != transform.fingerprint:
        raise TransformError(f"{spec.ref()} is implemented differently here than where the "
                             "rule was validated (fingerprint differs)")
    return transform
