"""PostgreSQL type OIDs (pgoutput Relation messages) -> column types, as Debezium's connector maps them."""

from __future__ import annotations

from processor.core.debezium import types as t

# Built-in type OIDs (pg_type.dat); user types (enums, domains) have OIDs >= 16384.
_SCALARS: dict[int, t.ColumnType] = {
    16: t.BOOLEAN,
    17: t.BYTES,
    18: t.STRING,  # "char"
    19: t.STRING,  # name
    20: t.INT64,
    21: t.INT16,
    23: t.INT32,
    25: t.STRING,
    26: t.INT64,  # oid
    114: t.JSON,
    142: t.XML,
    650: t.STRING,  # cidr
    700: t.FLOAT32,
    701: t.FLOAT64,
    829: t.STRING,  # macaddr
    869: t.STRING,  # inet
    1042: t.STRING,  # bpchar
    1043: t.STRING,  # varchar
    1082: t.DATE,
    1266: t.TIMETZ,
    1184: t.TIMESTAMPTZ,
    2950: t.UUID,
    3802: t.JSON,  # jsonb
}
TIME, TIMESTAMP, NUMERIC = 1083, 1114, 1700

# Array OID -> element OID.
_ARRAYS: dict[int, int] = {
    1000: 16,
    1001: 17,
    1005: 21,
    1007: 23,
    1009: 25,
    1014: 1042,
    1015: 1043,
    1016: 20,
    1021: 700,
    1022: 701,
    1115: 1114,
    1182: 1082,
    1183: 1083,
    1185: 1184,
    1231: 1700,
    199: 114,
    2951: 2950,
    3807: 3802,
}


def numeric_type(typmod: int) -> t.ColumnType:
    """numeric(p,s) -> Decimal with its scale; numeric without a typmod -> VariableScaleDecimal."""
    if typmod < 4:
        return t.VARIABLE_DECIMAL
    packed = typmod - 4
    return t.decimal_type(packed >> 16, packed & 0xFFFF)


def from_oid(
    oid: int, typmod: int = -1, type_name: str | None = None, enum_values: tuple[str, ...] = ()
) -> t.ColumnType:
    """The column type of a pgoutput Relation column. enum_values marks a user enum type."""
    if oid in _SCALARS:
        return _SCALARS[oid]
    if oid == NUMERIC:
        return numeric_type(typmod)
    if oid == TIMESTAMP:
        return t.timestamp_type(typmod if typmod >= 0 else None)
    if oid == TIME:
        return t.TIME_US
    if oid in _ARRAYS:
        return t.array_type(from_oid(_ARRAYS[oid], typmod))
    if enum_values:
        return t.enum_type(enum_values)
    return t.fallback(type_name or f"oid:{oid}")
