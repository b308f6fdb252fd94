"""The Avro schema of a Connect schema, and Avro values, as Confluent's AvroConverter makes them.

Structs become named records (namespace = the name's prefix), optional fields unions with null
first and a null default, int8/int16 ints tagged with connect.type, logical types tagged with
connect.name/connect.version/connect.parameters, and Decimal the Avro decimal logical type.
"""

from __future__ import annotations

from typing import Any

from processor.core.debezium.connect_json import DECIMAL, VARIABLE_DECIMAL, unscaled_bytes, variable_decimal

_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
DEFAULT_DECIMAL_PRECISION = 64  # AvroData's precision when the Connect schema gives none


def to_avro(schema: dict[str, Any]) -> Any:
    """The Avro schema (JSON-able) of a non-null Connect schema."""
    return _avro(schema, set())


def _avro(schema: dict[str, Any], seen: set[str]) -> Any:
    kind = schema["type"]
    name: str = schema.get("name") or ""
    if kind == "struct":
        if name in seen:
            return name  # a record defined earlier in this schema is referenced by its full name
        seen.add(name)
        namespace, _, simple = name.rpartition(".")
        record: dict[str, Any] = {"type": "record", "name": simple}
        if namespace:
            record["namespace"] = namespace
        record["fields"] = [_field(f, seen) for f in schema["fields"]]
        _tag(record, schema)
        return record
    if kind == "array":
        return {"type": "array", "items": _optional(schema["items"], seen)}
    out: dict[str, Any] = {"type": _PRIMITIVES[kind]}
    if kind in ("int8", "int16"):
        out["connect.type"] = kind
    if name == DECIMAL:
        params = schema["parameters"]
        out["scale"] = int(params["scale"])
        out["precision"] = int(params.get("connect.decimal.precision", DEFAULT_DECIMAL_PRECISION))
        out["logicalType"] = "decimal"
    _tag(out, schema)
    return out if len(out) > 1 else out["type"]


def _tag(out: dict[str, Any], schema: dict[str, Any]) -> None:
    if schema.get("version") is not None:
        out["connect.version"] = schema["version"]
    if schema.get("parameters"):
        out["connect.parameters"] = dict(schema["parameters"])
    if schema.get("name") and schema["type"] != "struct":
        out["connect.name"] = schema["name"]


def _optional(schema: dict[str, Any], seen: set[str]) -> Any:
    inner = _avro(schema, seen)
    return ["null", inner] if schema.get("optional") else inner


def _field(schema: dict[str, Any], seen: set[str]) -> dict[str, Any]:
    inner = _avro(schema, seen)
    out: dict[str, Any] = {"name": schema["field"]}
    if "default" in schema and schema["default"] is not None:
        out["type"] = [inner, "null"] if schema.get("optional") else inner
        out["default"] = schema["default"]
    elif schema.get("optional"):
        out["type"] = ["null", inner]
        out["default"] = None
    else:
        out["type"] = inner
    return out


def to_avro_value(schema: dict[str, Any] | None, value: Any) -> Any:
    """A Connect-level value -> what fastavro writes for to_avro(schema)."""
    if value is None or schema is None:
        return value
    name = schema.get("name")
    kind = schema["type"]
    if name == DECIMAL:
        return value  # fastavro encodes decimal.Decimal for the decimal logical type
    if name == VARIABLE_DECIMAL:
        scale, raw = variable_decimal(value)
        return {"scale": scale, "value": raw}
    if kind == "struct":
        return {f["field"]: to_avro_value(f, value.get(f["field"])) for f in schema["fields"]}
    if kind == "array":
        return [to_avro_value(schema["items"], v) for v in value]
    return value


__all__ = ["to_avro", "to_avro_value", "unscaled_bytes"]
