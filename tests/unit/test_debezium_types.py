"""Column types: PostgreSQL OIDs and catalogue names -> Debezium's Connect types, and value conversion."""

import decimal

import pytest

from processor.core.debezium import catalogue, pg_types
from processor.core.debezium import types as t
from processor.core.debezium.connect_json import to_json, unscaled_bytes


@pytest.mark.parametrize(
    ("oid", "typmod", "connect_type", "name"),
    [
        (16, -1, "boolean", None),
        (21, -1, "int16", None),
        (23, -1, "int32", None),
        (20, -1, "int64", None),
        (700, -1, "float", None),
        (701, -1, "double", None),
        (25, -1, "string", None),
        (1043, 44, "string", None),
        (17, -1, "bytes", None),
        (1082, -1, "int32", "io.debezium.time.Date"),
        (1114, -1, "int64", "io.debezium.time.MicroTimestamp"),
        (1114, 3, "int64", "io.debezium.time.Timestamp"),
        (1184, -1, "string", "io.debezium.time.ZonedTimestamp"),
        (1083, -1, "int64", "io.debezium.time.MicroTime"),
        (2950, -1, "string", "io.debezium.data.Uuid"),
        (3802, -1, "string", "io.debezium.data.Json"),
        (114, -1, "string", "io.debezium.data.Json"),
        (1700, -1, "struct", "io.debezium.data.VariableScaleDecimal"),
        (1700, ((12 << 16) | 2) + 4, "bytes", "org.apache.kafka.connect.data.Decimal"),
    ],
)
def test_pg_oid_maps_to_debeziums_connect_type(oid, typmod, connect_type, name):
    col = pg_types.from_oid(oid, typmod)
    assert col.connect["type"] == connect_type
    assert col.connect.get("name") == name
    assert not col.fallback


def test_numeric_keeps_precision_and_scale_as_decimal_parameters():
    col = pg_types.from_oid(1700, ((12 << 16) | 2) + 4)
    assert col.connect["parameters"] == {"scale": "2", "connect.decimal.precision": "12"}
    assert col.value("123.4") == decimal.Decimal("123.40")
    # JsonConverter's BASE64 decimal: the unscaled integer 12340 as two's complement.
    assert to_json(col.connect, col.value("123.4")) == "MDQ="
    assert unscaled_bytes(decimal.Decimal("123.40"), 2) == (12340).to_bytes(2, "big")


def test_decimal_value_with_more_places_than_the_scale_does_not_fit():
    col = pg_types.from_oid(1700, ((12 << 16) | 2) + 4)
    with pytest.raises(t.TypeMismatch, match="more than 2 decimal places"):
        col.value("1.234")
    with pytest.raises(t.TypeMismatch, match="NaN"):
        col.value("NaN")


def test_negative_unscaled_bytes_match_java_biginteger():
    assert unscaled_bytes(decimal.Decimal("-1.28"), 2) == b"\x80"
    assert unscaled_bytes(decimal.Decimal("1.28"), 2) == b"\x00\x80"
    assert unscaled_bytes(decimal.Decimal("0"), 0) == b"\x00"


def test_temporal_values_follow_debezium_encodings():
    assert pg_types.from_oid(1082).value("1970-01-11") == 10
    assert pg_types.from_oid(1114).value("1970-01-01 00:00:01.5") == 1_500_000
    assert pg_types.from_oid(1114, 3).value("1970-01-01 00:00:01.5") == 1_500
    assert pg_types.from_oid(1184).value("2024-05-01 12:00:00.25+02") == "2024-05-01T10:00:00.250Z"
    assert pg_types.from_oid(1184).value("2024-05-01 12:00:00+00") == "2024-05-01T12:00:00Z"
    assert pg_types.from_oid(1083).value("01:00:00.000001") == 3_600_000_001
    assert pg_types.from_oid(1266).value("10:00:00+01") == "09:00:00Z"


def test_arrays_parse_postgres_literals_per_element_type():
    ints = pg_types.from_oid(1007)
    assert ints.connect == {"type": "array", "items": {"type": "int32", "optional": True}}
    assert ints.value("{1,2,NULL}") == [1, 2, None]
    texts = pg_types.from_oid(1009)
    assert texts.value('{a,"b c","d,\\"e"}') == ["a", "b c", 'd,"e']


def test_enum_and_unknown_types():
    mood = pg_types.from_oid(16500, -1, "public.mood", ("sad", "ok"))
    assert mood.connect == {
        "type": "string",
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "sad,ok"},
    }
    with pytest.raises(t.TypeMismatch):
        mood.value("happy")
    unknown = pg_types.from_oid(16600, -1, "public.point3d")
    assert unknown.fallback and unknown.connect == {"type": "string"}
    assert unknown.value("(1,2,3)") == "(1,2,3)"  # kept, as text


def test_integer_range_and_type_checks():
    assert t.INT16.value("12") == 12
    with pytest.raises(t.TypeMismatch, match="out of range"):
        t.INT16.value(40000)
    with pytest.raises(t.TypeMismatch, match="int32"):
        t.INT32.value("twelve")


@pytest.mark.parametrize(
    ("family", "name", "connect_type", "logical"),
    [
        ("oracle", "NUMBER(10,0)", "int64", None),
        ("oracle", "NUMBER(4)", "int16", None),
        ("oracle", "NUMBER(12,2)", "bytes", "org.apache.kafka.connect.data.Decimal"),
        ("oracle", "NUMBER", "struct", "io.debezium.data.VariableScaleDecimal"),
        ("oracle", "DATE", "int64", "io.debezium.time.Timestamp"),
        ("oracle", "TIMESTAMP(6)", "int64", "io.debezium.time.MicroTimestamp"),
        ("oracle", "TIMESTAMP(6) WITH TIME ZONE", "string", "io.debezium.time.ZonedTimestamp"),
        ("oracle", "VARCHAR2(100)", "string", None),
        ("oracle", "BLOB", "bytes", None),
        ("ibmi", "DECIMAL(9,2)", "bytes", "org.apache.kafka.connect.data.Decimal"),
        ("ibmi", "DATE", "int32", "io.debezium.time.Date"),
        ("ibmi", "GRAPHIC(10)", "string", None),
        ("postgresql", "integer[]", "array", None),
    ],
)
def test_catalogue_type_names_per_family(family, name, connect_type, logical):
    col = catalogue.parse_type(name, family)
    assert col.connect["type"] == connect_type
    assert col.connect.get("name") == logical
    assert not col.fallback


def test_catalogue_document_loads_columns_keys_and_nullability():
    doc = {
        "connector": "oracle",
        "tables": {
            "HR.EMP": {
                "key": ["ID"],
                "columns": [
                    {"name": "ID", "type": "NUMBER(10)", "nullable": False},
                    {"name": "HIRED", "type": "DATE"},
                    {"name": "GEOM", "type": "SDO_GEOMETRY"},
                ],
            }
        },
    }
    tables = catalogue.load(doc)
    emp = tables["HR.EMP"]
    assert emp.key == ("ID",)
    assert [c.name for c in emp.columns] == ["ID", "HIRED", "GEOM"]
    assert emp.columns[0].optional is False
    assert emp.columns[2].type.fallback


def test_catalogue_errors_name_the_table():
    with pytest.raises(catalogue.CatalogueError, match=r"HR\.EMP: key columns"):
        catalogue.load({"tables": {"HR.EMP": {"key": ["X"], "columns": [{"name": "ID", "type": "int"}]}}})
    with pytest.raises(catalogue.CatalogueError, match="needs 'name' and 'type'"):
        catalogue.load({"tables": {"T": {"columns": [{"name": "ID"}]}}})
