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


def to_json(schema: dict | None, value: Any) -> Any:
    """A Connect-level value (see types.py) -> its JsonConverter payload."""
    if value is None or schema is None:
        return value
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


def render(schema: dict | None, payload: Any) -> bytes | None:
    """One key or value as JsonConverter (schemas.enable=true) writes it; None stays a null record."""
    if payload is None and schema is None:
        return None
    body = {"schema": schema, "payload": to_json(schema, payload)}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
