"""Debezium-mode records built from txbuffer ChangeEvents: compared field by field with Debezium's own.

The reference is the create event of Debezium's PostgreSQL connector documentation (the
`customers` table: id serial primary key, first_name/last_name/email varchar NOT NULL;
debezium/debezium documentation/modules/ROOT/pages/connectors/postgresql.adoc, "create events").
Where the documentation lags the 3.4 connector (the `snapshot` field is an io.debezium.data.Enum
string, and the common source fields are ordered version, connector, name, ts_ms, snapshot, db,
sequence, ts_us, ts_ns, as in debezium-core 3.4's SchemaFactory) the reference follows the code.
"""

import decimal
import json

import pytest

from processor.core.debezium import connect_json, pg_types
from processor.core.debezium import source_blocks as sb
from processor.core.debezium.catalogue import Column
from processor.core.debezium.envelope import DebeziumRecords
from processor.core.debezium.schemas import RowMismatch, SchemaBook

VARCHAR, INT4 = 1043, 23


def _req(kind, name):
    return {"type": kind, "optional": False, "field": name}


def _opt(kind, name):
    return {"type": kind, "optional": True, "field": name}


ROW_FIELDS = [_req("int32", "id"), _req("string", "first_name"), _req("string", "last_name"), _req("string", "email")]
REFERENCE_SCHEMA = {
    "type": "struct",
    "fields": [
        {
            "type": "struct",
            "fields": ROW_FIELDS,
            "optional": True,
            "name": "PostgreSQL_server.inventory.customers.Value",
            "field": "before",
        },
        {
            "type": "struct",
            "fields": ROW_FIELDS,
            "optional": True,
            "name": "PostgreSQL_server.inventory.customers.Value",
            "field": "after",
        },
        {
            "type": "struct",
            "fields": [
                _req("string", "version"),
                _req("string", "connector"),
                _req("string", "name"),
                _req("int64", "ts_ms"),
                {
                    "type": "string",
                    "optional": True,
                    "name": "io.debezium.data.Enum",
                    "version": 1,
                    "parameters": {
                        "allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
                    },
                    "default": "false",
                    "field": "snapshot",
                },
                _req("string", "db"),
                _opt("string", "sequence"),
                _opt("int64", "ts_us"),
                _opt("int64", "ts_ns"),
                _req("string", "schema"),
                _req("string", "table"),
                _opt("int64", "txId"),
                _opt("int64", "lsn"),
                _opt("int64", "xmin"),
            ],
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
        },
        {
            "type": "struct",
            "fields": [_req("string", "id"), _req("int64", "total_order"), _req("int64", "data_collection_order")],
            "optional": True,
            "name": "event.block",
            "version": 1,
            "field": "transaction",
        },
        _req("string", "op"),
        _opt("int64", "ts_ms"),
        _opt("int64", "ts_us"),
        _opt("int64", "ts_ns"),
    ],
    "optional": False,
    "name": "PostgreSQL_server.inventory.customers.Envelope",
    "version": 2,
}
REFERENCE_PAYLOAD = {
    "before": None,
    "after": {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"},
    "source": {
        "version": "3.4.0.Final",
        "connector": "postgresql",
        "name": "PostgreSQL_server",
        "ts_ms": 1559033904863,
        "snapshot": "false",
        "db": "postgres",
        "sequence": '["24023119","24023128"]',
        "ts_us": 1559033904863000,
        "ts_ns": 1559033904863000000,
        "schema": "inventory",
        "table": "customers",
        "txId": 555,
        "lsn": 24023128,
        "xmin": None,
    },
    "transaction": {"id": "555:24023119", "total_order": 1, "data_collection_order": 1},
    "op": "c",
    "ts_ms": 1559033904863,
    "ts_us": 1559033904863000,
    "ts_ns": 1559033904863000000,
}
REFERENCE_KEY = {
    "schema": {
        "type": "struct",
        "fields": [_req("int32", "id")],
        "optional": False,
        "name": "PostgreSQL_server.inventory.customers.Key",
    },
    "payload": {"id": 1},
}


def _change(op="c", key=None, before=None, after=None, table="inventory.customers", seq=0, attrs=None):
    """A decoded txbuffer ChangeEvent, as the emitter produces it."""
    return {
        "event_id": f"1:24023119:555:{seq}",
        "op": op,
        "ts_ms": 1559033904863,
        "key": key,
        "before": before,
        "after": after,
        "ddl": None,
        "source": {
            "table": table,
            "xid": "555",
            "seq": seq,
            "scn": 24023128,
            "commit_scn": 24023119,
            "commit_ts_ms": 1559033904863,
            "thread": 1,
            "user": None,
            "row_id": None,
            "attrs": attrs or {},
        },
        "transaction": {"id": "555", "total_order": 1, "data_collection_order": 1},
    }


def _customers_book():
    book = SchemaBook()
    cols = (
        Column("id", pg_types.from_oid(INT4), False),
        Column("first_name", pg_types.from_oid(VARCHAR), False),
        Column("last_name", pg_types.from_oid(VARCHAR), False),
        Column("email", pg_types.from_oid(VARCHAR), False),
    )
    book.set_columns("inventory.customers", cols, ("id",))
    return book


def _records(book=None, family="postgresql"):
    ctx = sb.SourceContext(family, "PostgreSQL_server", "postgres", "3.4.0.Final")
    return DebeziumRecords(ctx, book or _customers_book())


ANNE = {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}


def test_create_event_matches_debeziums_documented_record_field_by_field():
    rec = _records().change(_change(key={"id": 1}, after=ANNE), now_ms=1559033904863)
    value = json.loads(connect_json.render(rec.value_schema, rec.value))
    key = json.loads(connect_json.render(rec.key_schema, rec.key))
    assert rec.topic == "PostgreSQL_server.inventory.customers"
    # Field by field, so a difference names the field.
    ours, ref = value["schema"], REFERENCE_SCHEMA
    assert [f["field"] for f in ours["fields"]] == [f["field"] for f in ref["fields"]]
    for mine, theirs in zip(ours["fields"], ref["fields"], strict=True):
        assert mine == theirs, mine["field"]
    assert {k: v for k, v in ours.items() if k != "fields"} == {k: v for k, v in ref.items() if k != "fields"}
    for name, expected in REFERENCE_PAYLOAD.items():
        assert value["payload"][name] == expected, name
    assert value["payload"].keys() == REFERENCE_PAYLOAD.keys()
    assert key == REFERENCE_KEY


def test_update_delete_and_truncate_ops():
    records = _records()
    upd = records.change(_change("u", {"id": 1}, None, {**ANNE, "first_name": "Anne Marie"}), 0)
    assert upd.value["op"] == "u" and upd.value["before"] is None
    assert upd.value["after"]["first_name"] == "Anne Marie"
    delete = records.change(_change("d", {"id": 1}, {"id": 1}, None), 0)
    # REPLICA IDENTITY DEFAULT: only the key is known; required columns get their type's zero value.
    assert delete.value["before"] == {"id": 1, "first_name": "", "last_name": "", "email": ""}
    assert delete.value["after"] is None and delete.key == {"id": 1}
    trunc = records.change(_change("t"), 0)
    assert trunc.key is None and trunc.key_schema is None
    assert trunc.value["op"] == "t" and trunc.value["before"] is None and trunc.value["after"] is None


def test_delete_is_followed_by_a_tombstone_when_configured():
    out = _records().row_records(_change("d", {"id": 1}, {"id": 1}, None), 0, tombstones=True)
    assert [r.value and r.value["op"] for r in out] == ["d", None]
    assert out[1].key == {"id": 1} and out[1].value_schema is None
    assert connect_json.render(out[1].value_schema, out[1].value) is None


def test_primary_key_update_becomes_delete_tombstone_create():
    change = _change("u", {"id": 2}, {"id": 1}, {**ANNE, "id": 2})
    out = _records().row_records(change, 0, tombstones=True)
    assert [(r.key, r.value and r.value["op"]) for r in out] == [({"id": 1}, "d"), ({"id": 1}, None), ({"id": 2}, "c")]
    assert out[2].value["after"]["id"] == 2 and out[2].value["before"] is None


def test_row_that_does_not_fit_raises_with_the_column():
    records = _records()
    with pytest.raises(RowMismatch, match="column 'id'"):
        records.change(_change(key={"id": 1}, after={**ANNE, "id": "one"}), 0)
    with pytest.raises(RowMismatch, match="key column 'id' is missing"):
        records.change(_change(key={}, after=ANNE), 0)
    with pytest.raises(RowMismatch, match="'email' is null but not nullable"):
        records.change(_change(key={"id": 1}, after={**ANNE, "email": None}), 0)


def test_inferred_schema_widens_with_a_new_version_on_a_new_column():
    book = SchemaBook()
    records = _records(book)
    first = records.change(_change(key={"id": 7}, after={"id": 7, "n": None}, table="app.t"), 0)
    assert [f["field"] for f in first.value_schema["fields"][1]["fields"]] == ["id", "n"]
    assert book.tables["app.t"].version == 1
    second = records.change(_change(key={"id": 7}, after={"id": 7, "n": 5, "extra": 1.5}, table="app.t"), 0)
    assert book.tables["app.t"].version == 2
    assert second.value["after"] == {"id": 7, "n": "5", "extra": 1.5}  # null-typed column stays text


def test_ddl_from_postgres_capture_retypes_the_table_with_a_new_version():
    book = _customers_book()
    ddl = json.dumps(
        {
            "relation": "inventory.customers",
            "columns": [
                {"name": "id", "type_oid": 23, "typmod": -1, "key": True},
                {"name": "first_name", "type_oid": 1043, "typmod": -1, "key": False},
                {"name": "balance", "type_oid": 1700, "typmod": ((10 << 16) | 2) + 4, "key": False},
            ],
        }
    )
    schema = book.apply_ddl("inventory.customers", ddl)
    assert schema.version == 2
    assert schema.column("balance").type.connect["name"] == "org.apache.kafka.connect.data.Decimal"


def test_transaction_metadata_uses_debeziums_field_names():
    end = {
        "status": "END",
        "id": "555",
        "commit_scn": 24023119,
        "ts_ms": 1,
        "thread": 1,
        "event_count": 3,
        "data_collections": [{"name": "inventory.customers", "event_count": 3}],
        "input_partition": 0,
        "commit_offset": 9,
        "ordering": "partition",
        "reason": None,
    }
    rec = _records().transaction(end)
    assert rec.topic == "PostgreSQL_server.transaction"
    assert rec.key == {"id": "555:24023119"}
    assert rec.value == {
        "status": "END",
        "id": "555:24023119",
        "event_count": 3,
        "data_collections": [{"data_collection": "inventory.customers", "event_count": 3}],
        "ts_ms": 1,
    }
    assert [f["field"] for f in rec.value_schema["fields"]] == [
        "status",
        "id",
        "event_count",
        "data_collections",
        "ts_ms",
    ]


def test_oracle_source_block_has_debeziums_oracle_fields():
    book = SchemaBook()
    ctx = sb.SourceContext("oracle", "ora", "ORCLPDB1", "x")
    rec = DebeziumRecords(ctx, book).change(
        _change(key={"ID": 1}, after={"ID": 1}, table="HR.EMP", attrs={"rs_id": " 0x0001 ", "ssn": "4"}), 0
    )
    src = rec.value["source"]
    assert src["connector"] == "oracle" and src["txId"] == "555"
    assert src["scn"] == "24023128" and src["commit_scn"] == "24023119"
    assert src["rs_id"] == " 0x0001 " and src["ssn"] == 4 and src["redo_thread"] == 1
    assert rec.value["transaction"]["id"] == "555"


PG_COLUMNS = json.dumps(
    [
        ["id", 23, -1, "integer", 1, 0],
        ["amount", 1700, ((12 << 16) | 2) + 4, "numeric(12,2)", 0, 1],
        ["mood", 16500, -1, "public.mood", 0, 1],
        ["zip", 16600, -1, "character varying(5)", 0, 1],
    ]
)


def test_columns_typed_by_the_capture_attr_pg_columns_and_snapshot_rows_are_op_r():
    book = SchemaBook()
    records = _records(book)
    change = _change(
        "r",
        {"id": 4},
        None,
        {"id": 4, "amount": "1.50", "mood": "sad", "zip": "12345"},
        table="public.acct",
        attrs={"pg_columns": PG_COLUMNS},
    )
    rec = records.change(change, 0)
    schema = book.tables["public.acct"]
    assert [c.type.connect.get("name", c.type.connect["type"]) for c in schema.columns] == [
        "int32",
        "org.apache.kafka.connect.data.Decimal",
        "string",
        "string",
    ]
    assert schema.fallbacks == ("mood",)  # a user type the OID table does not know: text, with a warning
    assert schema.column("zip").type.fallback is False  # a domain's SQL name is read instead
    assert rec.value["op"] == "r" and rec.value["source"]["snapshot"] == "true"
    assert rec.value["after"]["amount"] == decimal.Decimal("1.50")
    # The same text again: same schema version; a changed table: a new version.
    records.change({**change, "op": "c"}, 0)
    assert book.tables["public.acct"].version == 1
    wider = json.dumps([*json.loads(PG_COLUMNS), ["extra", 25, -1, "text", 0, 1]])
    records.change(_change("c", {"id": 5}, None, {"id": 5}, table="public.acct", attrs={"pg_columns": wider}), 0)
    assert book.tables["public.acct"].version == 2


def test_replayed_oracle_rows_are_typed_by_the_catalogue():
    from processor.core.debezium import catalogue

    tables = catalogue.load(
        {
            "connector": "oracle",
            "tables": {
                "HR.EMP": {
                    "key": ["ID"],
                    "columns": [
                        {"name": "ID", "type": "NUMBER(6)", "nullable": False},
                        {"name": "SALARY", "type": "NUMBER(8,2)"},
                        {"name": "HIRED", "type": "DATE"},
                    ],
                }
            },
        }
    )
    book = SchemaBook(tables)
    records = DebeziumRecords(sb.SourceContext("oracle", "ora", "ORCL", "t"), book)
    after = {"ID": "7", "SALARY": "1234.5", "HIRED": "2024-01-02 03:04:05"}
    rec = records.change(_change(key={"ID": "7"}, after=after, table="HR.EMP"), 0)
    assert rec.key == {"ID": 7}
    assert rec.value["after"] == {"ID": 7, "SALARY": decimal.Decimal("1234.50"), "HIRED": 1704164645000}
    assert rec.value_schema["name"] == "ora.HR.EMP.Envelope"
    with pytest.raises(RowMismatch, match=r"'SALARY'.*more than 2 decimal places"):
        records.change(_change(key={"ID": "8"}, after={**after, "ID": "8", "SALARY": "1.234"}, table="HR.EMP"), 0)
