"""Kafka Connect's JsonConverter shape with schemas enabled: {"schema": ..., "payload": ...}.

Values are written as JsonConverter writes them: bytes and Decimals in base64 (Decimals as the
unscaled two's-complement integer, decimal.format=BASE64), VariableScaleDecimal as {scale, value}.
"""

from __future__ import annotations

import base64
import decimal
import json
from typing import Any

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"


def unscaled_bytes(value: decimal.Decimal, scale: int) -> bytes:
    """Java's BigInteger.toByteArray() of value * 10^scale: minimal big-endian two's complement."""
    n = int(value.scaleb(scale))
    length = ((n if n >= 0 else ~n).bit_length() + 8) // 8
    return n.to_bytes(length, "big", signed=True)


def variable_decimal(value: decimal.Decimal) -> tuple[int, bytes]:
    exponent = value.as_tuple().exponent
    scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    return scale, unscaled_bytes(value, scale)


_PLAIN: dict[int, tuple[dict[str, Any], bool]] = {}  # id(schema) -> (schema, JSON-ready as is?)


def _is_plain(schema: dict[str, Any]) -> bool:
    """True when no value under this schema needs converting (no bytes, decimals or variable decimals)."""
    cached = _PLAIN.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    kind = schema["type"]
    if schema.get("name") in (DECIMAL, VARIABLE_DECIMAL) or kind == "bytes":
        plain = False
    elif kind == "struct":
        plain = all(_is_plain(f) for f in schema["fields"])
    elif kind == "array":
        plain = _is_plain(schema["items"])
    else:
        plain = True
    if len(_PLAIN) >= 4096:
        _PLAIN.clear()
    _PLAIN[id(schema)] = (schema, plain)
    return plain


def to_json(schema: dict[str, Any] | None, value: Any) -> Any:
    """A Connect-level value (see types.py) -> its JsonConverter payload."""
    if value is None or schema is None or _is_plain(schema):
        return value  # payloads are built in schema field order, so a plain one is already right
    name = schema.get("name")
    kind = schema["type"]
    if name == DECIMAL:
        return base64.b64encode(unscaled_bytes(value, int(schema["parameters"]["scale"]))).decode()
    if name == VARIABLE_DECIMAL:
        scale, raw = variable_decimal(value)
        return {"scale": scale, "value": base64.b64encode(raw).decode()}
    if kind == "struct":
        return {f["field"]: to_json(f, value.get(f["field"])) for f in schema["fields"]}
    if kind == "array":
        return [to_json(schema["items"], v) for v in value]
    if kind == "bytes":
        return base64.b64encode(value).decode()
    return value


_SCHEMA_TEXT: dict[int, tuple[dict[str, Any], str]] = {}  # id(schema) -> (schema, its JSON); holds the schema alive
_SCHEMA_TEXT_MAX = 4096


def _schema_text(schema: dict[str, Any] | None) -> str:
    """The JSON of a schema, rendered once: a table's schema repeats in every record of the table."""
    if schema is None:
        return "null"
    cached = _SCHEMA_TEXT.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    if len(_SCHEMA_TEXT) >= _SCHEMA_TEXT_MAX:
        _SCHEMA_TEXT.clear()
    text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    _SCHEMA_TEXT[id(schema)] = (schema, text)
    return text


def render(schema: dict[str, Any] | None, payload: Any) -> bytes | None:
    """One key or value as JsonConverter (schemas.enable=true) writes it; None stays a null record."""
    if payload is None and schema is None:
        return None
    body = json.dumps(to_json(schema, payload), separators=(",", ":"), ensure_ascii=False)
    return ('{"schema":' + _schema_text(schema) + ',"payload":' + body + "}").encode()
