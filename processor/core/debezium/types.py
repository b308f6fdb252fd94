"""Column types: what Debezium's connectors emit for each source type, and the value conversion.

A ColumnType holds the Kafka Connect schema of a column (the JSON shape JsonConverter writes, minus
`optional` and `field`) and a function turning a RawEvent value (None, bool, int, float, str,
bytes) into the Connect value: int, float, str, bytes, bool, decimal.Decimal or a list. A value that
does not fit raises TypeMismatch; the caller dead-letters the row with that reason.

Types come from PostgreSQL type OIDs (pgoutput Relation messages), from a type name (the column
catalogue of replayed Oracle and IBM i logs), or are inferred from a value. An unknown type maps to
string with `fallback=True`, so the caller can warn; its values are kept, as text.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class TypeMismatch(ValueError):
    """A value that does not fit its column's type."""


@dataclass(frozen=True)
class ColumnType:
    name: str  # our vocabulary, e.g. "numeric(10,2)", "timestamptz", "int4[]"
    connect: dict[str, Any] = field(hash=False)  # Connect schema without optional/field
    convert: Callable[[Any], Any] = field(hash=False, compare=False)
    fallback: bool = False  # an unknown source type, mapped to string

    def value(self, raw: Any) -> Any:
        return None if raw is None else self.convert(raw)


EPOCH = dt.datetime(1970, 1, 1)
EPOCH_DATE = dt.date(1970, 1, 1)


def _fail(raw: Any, what: str) -> TypeMismatch:
    return TypeMismatch(f"{type(raw).__name__} {str(raw)[:60]!r} is not a valid {what}")


# ---- converters -------------------------------------------------------------------------------


def _integer(bits: int) -> Callable[[Any], int]:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def convert(raw: Any) -> int:
        if isinstance(raw, bool):
            return int(raw)
        if isinstance(raw, int):
            value = raw
        elif (isinstance(raw, str) and re.fullmatch(r"\s*[-+]?\d+\s*", raw)) or (
            isinstance(raw, float) and raw.is_integer()
        ):
            value = int(raw)
        else:
            raise _fail(raw, f"int{bits}")
        if not low <= value <= high:
            raise TypeMismatch(f"{value} is out of range for int{bits}")
        return value

    return convert


def _float(raw: Any) -> float:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw)
        except ValueError:
            pass
    raise _fail(raw, "floating-point number")


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.lower() in ("t", "true", "1", "y", "f", "false", "0", "n"):
        return raw.lower() in ("t", "true", "1", "y")
    raise _fail(raw, "boolean")


def _string(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (int, float)):
        return repr(raw)  # lossless text of the number
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
    raise _fail(raw, "string")


def _bytes(raw: Any) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        text = raw[2:] if raw.startswith("\\x") else raw
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    raise _fail(raw, "hex-encoded binary")


def _to_decimal(raw: Any) -> decimal.Decimal:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str, decimal.Decimal)):
        raise _fail(raw, "decimal")
    try:
        value = decimal.Decimal(str(raw).strip())
    except decimal.InvalidOperation:
        raise _fail(raw, "decimal") from None
    if not value.is_finite():
        raise TypeMismatch(f"{raw!r}: NaN and infinities have no decimal representation")
    return value


def _fixed_decimal(precision: int | None, scale: int) -> Callable[[Any], decimal.Decimal]:
    quantum = decimal.Decimal(1).scaleb(-scale)

    def convert(raw: Any) -> decimal.Decimal:
        value = _to_decimal(raw)
        scaled = value.quantize(quantum, context=decimal.Context(prec=1000))
        if scaled != value:
            raise TypeMismatch(f"{raw!r} has more than {scale} decimal places")
        if precision is not None and len(scaled.as_tuple().digits) > precision and scaled != 0:
            raise TypeMismatch(f"{raw!r} has more than {precision} digits")
        return scaled

    return convert


def _parse_datetime(raw: str, what: str) -> dt.datetime:
    text = raw.strip().replace(" ", "T", 1)
    text = re.sub(r"([+-]\d\d)$", r"\1:00", text)  # PostgreSQL writes "+02"; fromisoformat wants "+02:00"
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise _fail(raw, what) from None


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamp(unit_us: int) -> Callable[[Any], int]:
    def convert(raw: Any) -> int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if not isinstance(raw, str):
            raise _fail(raw, "timestamp")
        value = _parse_datetime(raw, "timestamp")
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return _micros(value - EPOCH) // unit_us

    return convert


def _iso_fraction(micros: int) -> str:
    """Java's ISO formatter: no fraction when zero, else 3 or 6 digits."""
    if not micros:
        return ""
    return f".{micros // 1000:03d}" if micros % 1000 == 0 else f".{micros:06d}"


def _zoned_timestamp(raw: Any) -> str:
    if not isinstance(raw, str):
        raise _fail(raw, "timestamp with time zone")
    value = _parse_datetime(raw, "timestamp with time zone")
    if value.tzinfo is None:
        raise TypeMismatch(f"{raw!r} has no time zone offset")
    utc = value.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + _iso_fraction(utc.microsecond) + "Z"


def _date(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return (dt.date.fromisoformat(raw.strip()[:10]) - EPOCH_DATE).days
        except ValueError:
            pass
    raise _fail(raw, "date")


def _parse_time(raw: Any) -> tuple[dt.time, str]:
    if not isinstance(raw, str):
        raise _fail(raw, "time")
    m = re.fullmatch(r"\s*(\d\d:\d\d(?::\d\d(?:\.\d{1,6})?)?)\s*([+-]\d\d(?::?\d\d)?|Z)?\s*", raw)
    if not m:
        raise _fail(raw, "time")
    return dt.time.fromisoformat(m.group(1)), m.group(2) or ""


def _micro_time(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    t, _ = _parse_time(raw)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _zoned_time(raw: Any) -> str:
    t, offset = _parse_time(raw)
    if offset in ("", "Z"):
        seconds = 0
    else:
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        seconds = sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)
    base = dt.datetime.combine(EPOCH_DATE, t) - dt.timedelta(seconds=seconds)
    return base.strftime("%H:%M:%S") + _iso_fraction(base.microsecond) + "Z"


def _enum(allowed: tuple[str, ...]) -> Callable[[Any], str]:
    def convert(raw: Any) -> str:
        value = _string(raw)
        if allowed and value not in allowed:
            raise TypeMismatch(f"{value!r} is not one of the enum's values {list(allowed)}")
        return value

    return convert


_ARRAY_ITEM = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^,{}"]*?))\s*(?:,|$)')


def _array(element: ColumnType) -> Callable[[Any], list[Any]]:
    def convert(raw: Any) -> list[Any]:
        if isinstance(raw, list):
            items: list[Any] = raw
        elif isinstance(raw, str) and raw.startswith("{") and raw.endswith("}"):
            body = raw[1:-1]
            if "{" in body:
                raise TypeMismatch(f"{raw[:60]!r}: multi-dimensional arrays are not supported")
            items = []
            pos = 0
            while pos < len(body):
                m = _ARRAY_ITEM.match(body, pos)
                if not m or m.end() == pos:
                    raise _fail(raw, "array literal")
                quoted, bare = m.group(1), m.group(2)
                if quoted is not None:
                    items.append(re.sub(r"\\(.)", r"\1", quoted))
                else:
                    items.append(None if bare == "NULL" else bare)
                pos = m.end()
        else:
            raise _fail(raw, "array")
        return [element.value(item) for item in items]

    return convert


# ---- the vocabulary ---------------------------------------------------------------------------


def _logical(connect_type: str, name: str | None = None, **parameters: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": connect_type}
    if name:
        schema.update({"name": name, "version": 1})
    if parameters:
        schema["parameters"] = dict(parameters)
    return schema


INT8 = ColumnType("int1", _logical("int8"), _integer(8))
INT16 = ColumnType("int2", _logical("int16"), _integer(16))
INT32 = ColumnType("int4", _logical("int32"), _integer(32))
INT64 = ColumnType("int8", _logical("int64"), _integer(64))
FLOAT32 = ColumnType("float4", _logical("float"), _float)
FLOAT64 = ColumnType("float8", _logical("double"), _float)
BOOLEAN = ColumnType("bool", _logical("boolean"), _boolean)
STRING = ColumnType("text", _logical("string"), _string)
BYTES = ColumnType("bytea", _logical("bytes"), _bytes)
DATE = ColumnType("date", _logical("int32", "io.debezium.time.Date"), _date)
TIMESTAMP_MS = ColumnType("timestamp(3)", _logical("int64", "io.debezium.time.Timestamp"), _timestamp(1000))
TIMESTAMP_US = ColumnType("timestamp", _logical("int64", "io.debezium.time.MicroTimestamp"), _timestamp(1))
TIMESTAMPTZ = ColumnType("timestamptz", _logical("string", "io.debezium.time.ZonedTimestamp"), _zoned_timestamp)
TIME_US = ColumnType("time", _logical("int64", "io.debezium.time.MicroTime"), _micro_time)
TIMETZ = ColumnType("timetz", _logical("string", "io.debezium.time.ZonedTime"), _zoned_time)
UUID = ColumnType("uuid", _logical("string", "io.debezium.data.Uuid"), _string)
JSON = ColumnType("json", _logical("string", "io.debezium.data.Json"), _string)
XML = ColumnType("xml", _logical("string", "io.debezium.data.Xml"), _string)
VARIABLE_DECIMAL = ColumnType(
    "numeric",
    {
        "type": "struct",
        "name": "io.debezium.data.VariableScaleDecimal",
        "version": 1,
        "doc": "Variable scaled decimal",
        "fields": [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
    },
    _to_decimal,
)


def decimal_type(precision: int | None, scale: int) -> ColumnType:
    params = {"scale": str(scale)}
    if precision is not None:
        params["connect.decimal.precision"] = str(precision)
    name = f"numeric({precision},{scale})" if precision is not None else f"numeric(*,{scale})"
    return ColumnType(
        name, _logical("bytes", "org.apache.kafka.connect.data.Decimal", **params), _fixed_decimal(precision, scale)
    )


def enum_type(allowed: tuple[str, ...] = ()) -> ColumnType:
    params = {"allowed": ",".join(allowed)} if allowed else {}
    return ColumnType(
        f"enum({','.join(allowed)})", _logical("string", "io.debezium.data.Enum", **params), _enum(allowed)
    )


def array_type(element: ColumnType) -> ColumnType:
    connect = {"type": "array", "items": {**element.connect, "optional": True}}
    return ColumnType(element.name + "[]", connect, _array(element), element.fallback)


def fallback(source_name: str) -> ColumnType:
    """An unknown source type: string, flagged so the caller logs a warning once per schema."""
    return ColumnType(source_name, _logical("string"), _string, fallback=True)


def timestamp_type(precision: int | None) -> ColumnType:
    """Debezium's adaptive precision: up to milliseconds -> Timestamp, else MicroTimestamp."""
    return TIMESTAMP_MS if precision is not None and precision <= 3 else TIMESTAMP_US


def infer(value: Any) -> ColumnType:
    """A column's type from one value, when the source gave none."""
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INT64
    if isinstance(value, float):
        return FLOAT64
    if isinstance(value, bytes):
        return BYTES
    return STRING  # str, or None: a null column stays text, and later numbers are kept as their text
